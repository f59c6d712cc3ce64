"""Escalation when nobody answers (issue 39), on both backends, under a FakeClock, across
restarts (each resume is a new runtime: only what is durable carries over): an approval's wait
notifies by an effect (a real webhook on loopback, once per stage), hands the decision to
another approver, then denies — each stage recorded (``wait_escalated``) in order, at its due
time, and a decision before a stage ends the chain."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import torpor
from torpor.engine.escalation import after
from torpor.errors import ConfigError, InboxError
from torpor.store import open_store
from torpor.testing import FakeClock

T0 = 1_800_000_000.0
HOUR = 3600.0

#: The webhook's receipts (idempotency key -> bodies): what the outside world saw.
HOOK: dict[str, Any] = {"url": "", "got": []}


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        HOOK["got"].append(body)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[list[dict[str, Any]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    HOOK["url"], HOOK["got"] = f"http://127.0.0.1:{server.server_port}/page", []
    try:
        yield HOOK["got"]
    finally:
        server.shutdown()
        server.server_close()


def page_oncall(info: dict[str, Any], idempotency_key: str) -> str:
    import urllib.request

    data = json.dumps({**info, "key": idempotency_key}).encode()
    req = urllib.request.Request(HOOK["url"], data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return f"paged ({resp.status})"


def paged(call: torpor.EffectCall) -> torpor.Applied | torpor.Absent:
    hit = [b for b in HOOK["got"] if b["key"] == call.idempotency_key]
    return torpor.Applied("paged (200)") if hit else torpor.Absent()


PUSHED: list[str] = []


def push(sha: str) -> str:
    PUSHED.append(sha)
    return sha


@torpor.workflow(name="test.escalation.ship", version="1")
def ship(run: torpor.Run, content: str) -> Any:
    ref = run.artifact("patch", content)
    appr = run.approval(
        "ship",
        [ref],
        summary="push the patch",
        approvers=["alice"],
        escalate=[
            after(hours=1, notify=page_oncall, reconcile=paged),
            after(hours=24, approvers=["carol"]),
            after(hours=48, then="deny"),
        ],
    )
    return run.effect("push", push, ref.sha256, approval=appr, artifacts=[ref])


class World:
    def __init__(self, url: str, tmp: Path):
        self.url, self.tmp, self.clock = url, tmp, FakeClock(T0)
        self.rt = torpor.Runtime(url, str(tmp / "artifacts"), clock=self.clock)
        self.client = torpor.Client(open_store(url, clock=self.clock))

    def resume_at(self, hours: float, run_id: str) -> torpor.RunResult:
        """A new runtime (a restart) at ``T0 + hours``, resuming ``run_id``."""
        self.clock.advance(T0 + hours * HOUR - self.clock())
        self.rt.close()
        self.rt = torpor.Runtime(self.url, str(self.tmp / "artifacts"), clock=self.clock)
        return self.rt.resume(run_id)

    def stages(self, run_id: str) -> list[tuple[int, str]]:
        return [
            (e.payload.stage, e.payload.action)  # type: ignore[attr-defined]
            for e in self.client.events(run_id)
            if e.type == "wait_escalated"
        ]

    def wake_at_h(self, run_id: str) -> float | None:
        w = self.client.get(run_id).wake_at_ms
        return None if w is None else (w / 1000 - T0) / HOUR


@pytest.fixture
def world(store_url: str, tmp_path: Path) -> Iterator[World]:
    w = World(store_url, tmp_path)
    yield w
    w.rt.close()
    w.client.close()


def test_a_chain_notifies_once_then_hands_over_across_restarts(
    world: World, webhook: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    PUSHED.clear()
    assert world.rt.run(ship, "patch v1\n", run_id="e1").wait_kind == "approval"
    assert world.wake_at_h("e1") == 1.0  # the first stage's due time is the wake time
    assert world.resume_at(0.5, "e1").wait_kind == "approval"
    assert world.stages("e1") == [] and webhook == []

    res = world.resume_at(1.0, "e1")
    assert res.wait_kind == "approval", res
    assert world.stages("e1") == [(1, "notify")]
    assert [(b["stage"], b["run_id"]) for b in webhook] == [(1, "e1")]
    assert world.wake_at_h("e1") == 24.0
    world.resume_at(2.0, "e1")  # another restart before the next stage: nothing again
    assert len(webhook) == 1 and world.stages("e1") == [(1, "notify")]
    from torpor.cli import main

    with pytest.raises(SystemExit):
        main(["--db", world.url, "show", "e1"])
    assert "escalation: 1 of 3 stages; next at" in capsys.readouterr().out

    world.resume_at(24.0, "e1")
    assert world.stages("e1") == [(1, "notify"), (2, "approvers")]
    aid = next(iter(world.client.state("e1").approvals))
    assert world.client.state("e1").approvals[aid].approvers == ["carol"]
    with pytest.raises(InboxError, match="not one of the approvers"):
        world.client.decide("e1", None, "approve", "alice")  # handed over: alice no longer
    world.client.decide("e1", None, "approve", "carol")
    res = world.resume_at(25.0, "e1")
    assert res.outcome == "succeeded", res
    assert len(PUSHED) == 1 and len(webhook) == 1
    assert world.stages("e1") == [(1, "notify"), (2, "approvers")]  # decided: the chain ends
    types = [e.type for e in world.client.events("e1")]
    assert types.index("wait_escalated") < types.index("approval_decided")
    [notify] = [e.payload for e in world.client.events("e1") if e.type == "wait_escalated"][:1]
    assert notify.effect_step == f"approval:{aid}/escalate-1"  # type: ignore[attr-defined]


def test_a_chain_nobody_answers_ends_denied_with_every_stage_in_order(
    world: World, webhook: list[dict[str, Any]]
) -> None:
    PUSHED.clear()
    assert world.rt.run(ship, "patch v2\n", run_id="e2").wait_kind == "approval"
    res = world.resume_at(72.0, "e2")  # down for three days: every stage is due at once
    assert res.outcome == "blocked", res
    assert "denied by escalation: no decision by stage 3 of its escalation chain" in res.reason
    assert world.stages("e2") == [(1, "notify"), (2, "approvers"), (3, "deny")]
    assert len(webhook) == 1 and PUSHED == []
    [done] = [e.payload for e in world.client.events("e2") if e.type == "wait_completed"]
    assert done.via == "decision"  # type: ignore[attr-defined]  (the chain's)


@torpor.workflow(name="test.escalation.cancel", version="1")
def cancel_after(run: torpor.Run, content: str) -> Any:
    ref = run.artifact("patch", content)
    run.approval("ship", [ref], escalate=[after(minutes=30, then="cancel")])
    return "never"


def test_stages_and_decisions_are_ordered_by_when_they_came_due_and_arrived(
    world: World, webhook: list[dict[str, Any]]
) -> None:
    """The run was down from the request on: alice's decision arrived at 26 h, after the
    hand-over to carol (due at 24 h), so it is refused when the run resumes at 30 h — as if the
    run had been up all along; carol's, arriving at 50 h after the chain's denial (due at
    48 h), is refused too, and the chain ends the run."""
    PUSHED.clear()
    assert world.rt.run(ship, "patch v3\n", run_id="e5").wait_kind == "approval"
    world.clock.advance(26 * HOUR)
    world.client.decide("e5", None, "approve", "alice")  # the last state she saw allowed it
    res = world.resume_at(30.0, "e5")
    assert res.wait_kind == "approval", res
    assert world.stages("e5") == [(1, "notify"), (2, "approvers")]
    refused = [e.payload for e in world.client.events("e5") if e.type == "approval_refused"]
    assert [r.approver for r in refused] == ["alice"]  # type: ignore[attr-defined]
    assert "not one of the approvers" in refused[0].reason  # type: ignore[attr-defined]
    world.clock.advance(20 * HOUR)
    world.client.decide("e5", None, "approve", "carol")
    res = world.resume_at(51.0, "e5")
    assert res.outcome == "blocked", res
    refused = [e.payload for e in world.client.events("e5") if e.type == "approval_refused"]
    assert "arrived after its escalation chain ended it (deny)" in refused[-1].reason  # type: ignore[attr-defined]
    assert world.stages("e5") == [(1, "notify"), (2, "approvers"), (3, "deny")]
    assert PUSHED == []


def test_a_chain_may_end_by_cancelling_the_run(world: World) -> None:
    assert world.rt.run(cancel_after, "x\n", run_id="e3").wait_kind == "approval"
    assert world.resume_at(0.25, "e3").wait_kind == "approval"
    res = world.resume_at(0.5, "e3")
    assert res.outcome == "cancelled", res
    assert world.stages("e3") == [(1, "cancel")]
    [cancel] = [e.payload for e in world.client.events("e3") if e.type == "cancel_requested"]
    assert cancel.by == "escalation"  # type: ignore[attr-defined]


def _deploy_plan(view: torpor.PlanView) -> Any:
    if view.steps:
        return None
    return [torpor.ProposedStep(call_id="d1", tool="deploy", args={"env": "prod"})]


agent_tools = torpor.Tools()


@agent_tools.tool(policy="effect", requires_approval=lambda a: True)
def deploy(env: str, idempotency_key: str) -> str:
    """Deploy."""
    PUSHED.append(env)
    return env


escalating_agent = torpor.Agent(
    "test.escalation.agent",
    goal="deploy",
    tools=agent_tools,
    planner=torpor.CodePlanner(_deploy_plan),
    escalate=[after(hours=2, then="deny")],
)


def test_an_agents_tool_call_approval_escalates(world: World) -> None:
    PUSHED.clear()
    assert world.rt.run(escalating_agent, {}, run_id="e4").wait_kind == "approval"
    res = world.resume_at(2.0, "e4")
    assert res.outcome == "blocked" and "escalation chain" in res.reason, res
    assert world.stages("e4") == [(1, "deny")] and PUSHED == []
    [settled] = [e.payload for e in world.client.events("e4") if e.type == "tool_call_settled"]
    assert settled.outcome == "denied"  # type: ignore[attr-defined]


def test_a_stage_does_one_thing() -> None:
    with pytest.raises(ConfigError, match="exactly one thing"):
        after(hours=1)
    with pytest.raises(ConfigError, match="exactly one thing"):
        after(hours=1, approvers=["carol"], then="deny")
    with pytest.raises(ConfigError, match="'deny' or 'cancel'"):
        after(hours=1, then="retry")
    with pytest.raises(ConfigError, match="positive time"):
        after(then="deny")
