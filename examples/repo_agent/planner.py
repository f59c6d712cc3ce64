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


# ------------------------------------------------------------------ the model planner (--model)

#: The name the run's input gives when a model plans (``--model``); not in :data:`PLANNERS`
#: because it needs the run (its model calls are recorded steps) and a model.
MODEL_PLANNER = "model"

SUBMIT_PLAN = {
    "name": "submit_plan",
    "description": "Submit the modernization plan: which files to change with which rules.",
    "parameters": {
        "type": "object",
        "properties": {
            "files": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "rules": {"type": "array", "items": {"type": "string"}},
                        "why": {"type": "string"},
                    },
                    "required": ["path", "rules"],
                },
            },
            "summary": {"type": "string"},
        },
        "required": ["files"],
    },
}


def make_model(spec: dict[str, Any]) -> Any:
    """The OpenAI-compatible model the run's input names (the API key comes from the
    environment: ``$TORPOR_MODEL_API_KEY`` or ``$OPENAI_API_KEY``, never from the record)."""
    from torpor.agents.models import OpenAIChatModel

    return OpenAIChatModel(
        spec["name"], base_url=spec.get("base_url"), timeout=float(spec.get("timeout", 120))
    )


def merge_model_choice(request: dict[str, Any], choice: dict[str, Any]) -> dict[str, Any]:
    """The plan from the model's choice, checked by code: only rules the code planner would
    apply (every finding of the rule in the file fixable) are kept; what the model chose that
    cannot be applied, and what it left out, go to ``left`` with the reason."""
    base = code_planner(request)
    fixable = {f["path"]: set(f["rules"]) for f in base["files"]}
    chosen: dict[str, tuple[set[str], str]] = {}
    for item in choice.get("files") or []:
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            continue
        rules = {r for r in item.get("rules") or [] if isinstance(r, str)}
        prev = chosen.get(item["path"], (set(), ""))
        chosen[item["path"]] = (prev[0] | rules, str(item.get("why") or prev[1])[:300])
    files, left = [], list(base["left"])
    for path in sorted(request["files"]):
        info = request["files"][path]
        want, why = chosen.get(path, (set(), ""))
        rules = sorted(want & fixable.get(path, set()))
        for rule in sorted(want - fixable.get(path, set())):
            counts = info["findings"].get(rule)
            if counts is None:
                continue  # a rule with no finding in the file: nothing to leave
            if any(x["path"] == path and x["rule"] == rule for x in left):
                continue
            left.append(
                {
                    "path": path,
                    "rule": rule,
                    "findings": sum(counts.values()),
                    "why": "chosen by the model, but not every finding has a safe fix",
                }
            )
        for rule in sorted(fixable.get(path, set()) - want):
            left.append(
                {
                    "path": path,
                    "rule": rule,
                    "findings": sum(info["findings"][rule].values()),
                    "why": "fixable, but not chosen by the model planner",
                }
            )
        if rules:
            n = sum(sum(info["findings"][r].values()) for r in rules)
            files.append(
                {
                    "path": path,
                    "sha256": info["sha256"],
                    "rules": rules,
                    "findings": n,
                    "why": why or f"{n} finding(s) of {', '.join(rules)} (chosen by the model)",
                }
            )
    return {
        **base,
        "planner": MODEL_PLANNER,
        "files": files,
        "left": left,
        "summary": str(choice.get("summary") or "")[:1000],
        "totals": {
            "files": len(files),
            "findings": sum(f["findings"] for f in files),
            "left": sum(x["findings"] for x in left),
        },
    }


def model_plan(run: Any, request: dict[str, Any], model: Any) -> dict[str, Any] | None:
    """Ask the model which files and rules to handle (a recorded model call: a resumed run
    never asks again), then check its choice in code (a recorded compute step). ``None`` when
    the model gave no usable plan (the caller falls back to the code planner)."""
    import json

    from torpor.agents.models import Message, ToolSpec, call_model

    survey = {
        path: {rule: counts for rule, counts in info["findings"].items()}
        for path, info in sorted(request["files"].items())
        if info["findings"]
    }
    messages = [
        Message.system(
            "You plan a Python modernization with ruff's pyupgrade (UP) rules. Pick the files "
            "and rules worth changing now. A rule can be applied to a file only if every one "
            "of its findings there has a safe fix ('safe' counts; 'unsafe'/'none' cannot be "
            "applied). Call submit_plan once."
        ),
        Message.user(
            f"Target: {request['target']}. Findings per file and rule "
            "(counts by fix kind), JSON:\n" + json.dumps(survey, sort_keys=True)
        ),
    ]
    resp = call_model(
        run, model, messages, [ToolSpec(**SUBMIT_PLAN)], name="model:plan", purpose="plan"
    )
    call = next((c for c in resp.message.tool_calls if c.name == "submit_plan"), None)
    if call is None or not isinstance(call.arguments.get("files"), list):
        return None
    return run.compute(
        "plan", merge_model_choice, request, call.arguments, purpose="check the model's plan"
    )


def model_commit_message(run: Any, model: Any, facts: dict[str, Any]) -> tuple[str, str] | None:
    """``(subject, body)`` written by the model from ``facts`` (recorded), or ``None``."""
    import json

    from torpor.agents.models import Message, call_model

    messages = [
        Message.system(
            "Write a git commit message for the change described. First line: a subject of "
            "at most 72 characters, imperative mood. Then a blank line and a short body. "
            "Plain text only."
        ),
        Message.user(json.dumps(facts, sort_keys=True)),
    ]
    resp = call_model(run, model, messages, name="model:commit-message", purpose="commit message")
    text = resp.message.content.strip().replace("\r", "")
    subject, _, body = text.partition("\n")
    subject = subject.strip().strip("#").strip()[:72]
    if not subject:
        return None
    return subject, body.strip()[:4000]
