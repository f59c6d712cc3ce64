"""A planner agent and its workers (issue 38): one tree of runs, one budget, one honest outcome.

The **planner** (``team.planner``, an :class:`~torpor.Agent` with a code planner) is given a
task of the flagship's kind — modernize several standard-library packages with ruff's
pyupgrade fixes — and splits it: one call of its ``delegate`` tool per package, each delegated
to a **worker** child run (``spawns="team.worker"``). The delegations are ready together, so
they start together and the planner waits on all of them in one fan-in, holding no process.

Each **worker** (``team.worker``, an agent of its own) computes its package's patch (a
``compute`` tool: ruff on the interpreter's own sources), then applies it to the shared
output folder — an ``effect`` that needs a person's approval bound to the exact patch
(``requires_approval=True``): every worker asks for its own. Once every worker is back, the
planner verifies the combined result (each patch present, with the hash its worker reported,
and every patched file compiles) and publishes one summary — an effect too.

Every effect writes the world's ledger (``<world>/ledger.jsonl``, one fsynced line per
delivery with its idempotency key) and is reconciled from it after a crash, so a tree killed
at any instant and resumed applies each package once and publishes once. The whole tree draws
from the planner's budget (``Budget(steps=...)``, :mod:`torpor.engine.budgets`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torpor
from examples.repo_agent.codemod import (
    apply_patch,
    make_patch,
    ruff_fix,
    split_patch,
    stdlib_dir,
    target_version,
)
from torpor.agents.planners import CodePlanner
from torpor.agents.proposals import ProposedStep

PLANNER, WORKER = "team.planner", "team.worker"
RULES = ["UP"]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _world(world: str) -> Path:
    """The outside world of a run: ``world`` (under the explorer, its per-case folder)."""
    return Path(os.environ.get("TORPOR_EXPLORE_WORLD") or world)


def _deliver(world: str, key: str, path: Path, text: str, **fields: Any) -> None:
    """Write ``text`` to ``path`` (atomically) and note the delivery in the ledger."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    with (_world(world) / "ledger.jsonl").open("a") as f:
        f.write(json.dumps({"key": key, "pid": os.getpid(), **fields}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def delivered(world: str, key: str) -> dict[str, Any] | None:
    """The ledger's line for idempotency key ``key``, if it was delivered."""
    ledger = _world(world) / "ledger.jsonl"
    if not ledger.exists():
        return None
    rows = [json.loads(x) for x in ledger.read_text().splitlines() if x.strip()]
    return next((r for r in rows if r["key"] == key), None)


def _reconciler(call: torpor.EffectCall) -> Any:
    hit = delivered(call.kwargs["world"], call.idempotency_key)
    return torpor.Applied(hit["result"]) if hit else torpor.Absent()


# ------------------------------------------------------------------ the worker

worker_tools = torpor.Tools()


@worker_tools.tool(policy="compute")
def modernize(package: str) -> dict[str, Any]:
    """The package's patch: ruff's pyupgrade fixes on each of its files (unified diff)."""
    root = stdlib_dir(package)
    parts = []
    for f in sorted(root.rglob("*.py")):
        rel = f"{package}/{f.relative_to(root).as_posix()}"
        old = f.read_text()
        new = ruff_fix(old.encode(), rel, RULES, target_version(), False).decode()
        if new != old:
            parts.append(make_patch(rel, old, new))
    patch = "".join(parts)
    return {"package": package, "files": len(parts), "patch": patch, "sha256": sha256(patch)}


@worker_tools.tool(policy="effect", reconcile=_reconciler, requires_approval=True)
def apply(package: str, patch: str, world: str, idempotency_key: str) -> dict[str, Any]:
    """Write the approved patch to the shared output folder (once per key)."""
    result = {"package": package, "sha256": sha256(patch)}
    out = _world(world) / "out" / f"{package}.patch"
    _deliver(world, idempotency_key, out, patch, what="apply", result=result)
    return result


def _worker_plan(view: Any) -> Any:
    pkg, world = view.input["package"], view.input["world"]
    done = {s.call_id: s for s in view.steps}
    if "apply" in done:
        # The worker's answer to its planner: the hash of the patch it applied.
        obs = done["apply"].observation
        return torpor.Proposal.finish(obs["sha256"] if done["apply"].status == "succeeded" else "")
    if "patch" not in done:
        return [ProposedStep(call_id="patch", tool="modernize", args={"package": pkg})]
    made = done["patch"].observation
    return [
        ProposedStep(
            call_id="apply",
            tool="apply",
            args={"package": pkg, "patch": made["patch"], "world": world},
            why=f"{made['files']} file(s) of {pkg} modernized",
        )
    ]


def _applied(ctx: Any) -> bool:
    r = ctx.results()
    return "apply" in r and r["apply"]["sha256"] == r["patch"]["sha256"]


worker = torpor.Agent(
    WORKER,
    goal="modernize one standard-library package and apply the approved patch",
    tools=worker_tools,
    planner=CodePlanner(_worker_plan, name="worker"),
    criteria={"applied as approved": _applied},
)

# ------------------------------------------------------------------ the planner

planner_tools = torpor.Tools()


@planner_tools.tool(spawns=WORKER)
def delegate(package: str, world: str) -> dict[str, Any]:
    """Hand one package to a worker (its input)."""
    return {"package": package, "world": world}


@planner_tools.tool(policy="read")
def verify(packages: list[str], world: str, reported: dict[str, str]) -> dict[str, Any]:
    """Each package's patch is in the output folder with the hash its worker reported, and
    every file it patches compiles."""
    problems = []
    for pkg in packages:
        out = _world(world) / "out" / f"{pkg}.patch"
        if not out.exists():
            problems.append(f"{pkg}: no patch applied")
            continue
        patch = out.read_text()
        if sha256(patch) != reported.get(pkg):
            problems.append(f"{pkg}: the applied patch is not the one its worker reported")
        root = stdlib_dir(pkg)
        for rel, part in split_patch(patch).items():
            src = apply_patch((root / rel.split("/", 1)[1]).read_text(), part)
            try:
                compile(src, rel, "exec")
            except SyntaxError as exc:
                problems.append(f"{rel}: {exc}")
    return {"ok": not problems, "problems": problems, "packages": len(packages)}


@planner_tools.tool(policy="effect", reconcile=_reconciler)
def publish(packages: list[str], world: str, idempotency_key: str) -> dict[str, Any]:
    """Publish one summary of the modernized packages (once per key)."""
    result = {"packages": packages}
    text = json.dumps({"packages": packages, "key": idempotency_key}, indent=2)
    _deliver(
        world,
        idempotency_key,
        _world(world) / "published.json",
        text,
        what="publish",
        result=result,
    )
    return result


def _planner_plan(view: Any) -> Any:
    pkgs, world = view.input["packages"], view.input["world"]
    steps = {s.call_id: s for s in view.steps}
    if "publish" in steps or any(s.status not in ("succeeded", "pending") for s in view.steps):
        return None  # published, or a worker (or the check) failed: the criteria decide
    if not steps:
        return [
            ProposedStep(call_id=f"pkg:{p}", tool="delegate", args={"package": p, "world": world})
            for p in pkgs
        ]
    reported = {p: steps[f"pkg:{p}"].observation["result"]["final"] for p in pkgs}
    return [
        ProposedStep(
            call_id="verify",
            tool="verify",
            args={"packages": pkgs, "world": world, "reported": reported},
        ),
        ProposedStep(
            call_id="publish",
            tool="publish",
            args={"packages": pkgs, "world": world},
            depends_on=["verify"],
        ),
    ]


def _verified(ctx: Any) -> bool:
    v = ctx.results().get("verify")
    return bool(v and v["ok"])


planner = torpor.Agent(
    PLANNER,
    goal="modernize several standard-library packages: one worker per package, then verify",
    tools=planner_tools,
    planner=CodePlanner(_planner_plan, name="split"),
    criteria={"verified": _verified},
    budget=torpor.Budget(steps=40),
    max_parallel=8,
)
