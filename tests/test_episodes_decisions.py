"""Episodes carry a run's decisions and the approaches it ruled out (issue 31), and an agent
recalls episodes again at each new plan version, recorded (``episodes@vN``) and read back on
replay; on both backends."""

from __future__ import annotations

from typing import Any

import torpor
from torpor.agents.proposals import PlanView, Proposal, step
from torpor.episodes import EpisodeStore
from torpor.history import StepCompleted

DECISION = "Decision: use the brisk mirror strategy because the main mirror times out."

tools = torpor.Tools()


@tools.tool(retry=None)
def mirror_main(target: str) -> str:
    """Sync through the main mirror (it times out)."""
    raise RuntimeError("main mirror timed out after 30 s")


@tools.tool(policy="effect", requires_approval=True, retry=None)
def mirror_brisk(target: str, idempotency_key: str) -> str:
    """Sync through the brisk mirror (a person approves it)."""
    return f"synced {target} via brisk"


SEEN: dict[str, dict[int, str]] = {}


def plan(view: PlanView) -> Any:
    SEEN.setdefault(str(view.input["run"]), {})[view.version] = view.episodes
    if view.succeeded():
        return None
    if view.status("m") in ("failed", "invalid"):
        return Proposal(
            steps=[
                step(
                    "b", "mirror_brisk", why="the main mirror failed with a timeout", target="repo"
                )
            ],
            reason=DECISION,
        )
    return Proposal(
        steps=[step("m", "mirror_main", why="the main mirror is the default", target="repo")],
        reason="try the default mirror first",
    )


def mirror_agent() -> torpor.Agent:
    return torpor.Agent(
        "ep.mirror",
        goal="sync the package repository",
        tools=tools,
        planner=torpor.CodePlanner(plan),
        task_type="sync",
    )


def _steps(rt: torpor.Runtime, run_id: str) -> list[str]:
    return [
        e.payload.step_id
        for e in rt.store.read_events(run_id)
        if isinstance(e.payload, StepCompleted)
    ]


def _approve_and_resume(rt: torpor.Runtime, run_id: str) -> torpor.RunResult:
    res = rt.run(mirror_agent(), {"run": run_id}, run_id=run_id, scope="acme")
    assert res.status == "waiting", res.reason
    torpor.Client(rt.store).decide(run_id, None, "approve", "carol")
    return rt.resume(run_id)


def test_decisions_are_carried_and_recalled_at_each_plan(store_url: str) -> None:
    SEEN.clear()
    with torpor.Runtime(store_url) as rt:
        res = _approve_and_resume(rt, "day1")  # the resume replays plans v1 and v2
        assert res.outcome == "succeeded", res.reason
        steps = _steps(rt, "day1")
        assert steps.count("episodes") == 1 and steps.count("episodes@v2") == 1
        assert "episodes@v1" not in steps  # the run's start recall is plan v1's
        es = EpisodeStore(rt.store)
        (ended,) = [h for h in es.search("mirror", scope="acme") if h.kind == "ended"]
        assert f"decided under plan v2: {DECISION}" in ended.lesson
        assert "ruled out under plan v2: the main mirror failed with a timeout" in ended.lesson
        assert "mirror_main(" in ended.lesson  # the failed approach itself, with its error
        # Day two: the recall at plan v2 is the earlier run's lessons for the new plan,
        # recorded, and the planner sees it from then on.
        res2 = _approve_and_resume(rt, "day2")
        assert res2.outcome == "succeeded"
        recalled = [
            e.payload.result
            for e in rt.store.read_events("day2")
            if isinstance(e.payload, StepCompleted) and e.payload.step_id == "episodes@v2"
        ]
        assert len(recalled) == 1 and DECISION in str(recalled[0])
        assert DECISION in SEEN["day2"][2]
        assert _steps(rt, "day2").count("episodes@v2") == 1
