"""Planners: turn a ruff survey into a modernization plan (which files get which fixes).

A planner is a plain callable ``(request: dict) -> dict`` on JSON data, run by the workflow as a
recorded ``compute`` step, so its plan is kept in the history and never recomputed on resume.
:func:`code_planner` needs no model. Issue 4 adds an LLM planner behind the same signature
(register it in :data:`PLANNERS`; the workflow picks one by name from the run's input).

The request::

    {"target": "py311", "select": "UP", "unsafe_fixes": false,
     "files": {"json/encoder.py": {"sha256": "…",
                                   "findings": {"UP032": {"safe": 3, "unsafe": 0, "none": 0}}}}}

The plan::

    {"planner": "code", "target": "py311", "select": "UP", "unsafe_fixes": false,
     "files": [{"path": "json/encoder.py", "sha256": "…", "rules": ["UP004", "UP032"],
                "findings": 6, "why": "…"}],
     "left": [{"path": "…", "rule": "UP031", "findings": 1, "why": "…"}],
     "totals": {"files": 2, "findings": 12, "left": 1}}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Planner = Callable[[dict[str, Any]], dict[str, Any]]


def code_planner(request: dict[str, Any]) -> dict[str, Any]:
    """Plan every rule whose findings in a file can *all* be fixed automatically.

    A rule with even one finding ruff cannot fix (or only with an unsafe fix, unless
    ``unsafe_fixes`` is set) is left for a person in that file: a half-applied rule could not
    be verified as clean. Files are processed in path order.
    """
    allowed = ("safe", "unsafe") if request.get("unsafe_fixes") else ("safe",)
    files: list[dict[str, Any]] = []
    left: list[dict[str, Any]] = []
    for path in sorted(request["files"]):
        info = request["files"][path]
        rules: list[str] = []
        planned = 0
        for rule in sorted(info["findings"]):
            counts: dict[str, int] = info["findings"][rule]
            total = sum(counts.values())
            fixable = sum(n for kind, n in counts.items() if kind in allowed)
            if total and fixable == total:
                rules.append(rule)
                planned += total
            elif total:
                unfixable = total - fixable
                left.append(
                    {
                        "path": path,
                        "rule": rule,
                        "findings": total,
                        "why": f"{unfixable} of {total} finding(s) have no "
                        + ("automatic fix" if allowed == ("safe", "unsafe") else "safe fix"),
                    }
                )
        if rules:
            files.append(
                {
                    "path": path,
                    "sha256": info["sha256"],
                    "rules": rules,
                    "findings": planned,
                    "why": f"{planned} finding(s) of {', '.join(rules)} all have safe fixes"
                    if allowed == ("safe",)
                    else f"{planned} finding(s) of {', '.join(rules)} all have fixes",
                }
            )
    return {
        "planner": "code",
        "target": request["target"],
        "select": request["select"],
        "unsafe_fixes": bool(request.get("unsafe_fixes")),
        "files": files,
        "left": left,
        "totals": {
            "files": len(files),
            "findings": sum(f["findings"] for f in files),
            "left": sum(x["findings"] for x in left),
        },
    }


#: Planners by name (the run's input names one). Issue 4 registers ``"model"`` here.
PLANNERS: dict[str, Planner] = {"code": code_planner}


def get_planner(name: str) -> Planner:
    """The planner registered as ``name`` (ValueError naming the known ones otherwise)."""
    try:
        return PLANNERS[name]
    except KeyError:
        raise ValueError(
            f"no planner named {name!r} (known: {', '.join(sorted(PLANNERS))})"
        ) from None
