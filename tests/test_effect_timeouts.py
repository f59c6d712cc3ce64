"""Effects that time out never overlap themselves (issue 14), counted at a real HTTP service on
loopback (tests/http_kit.py), on both backends.

A Python thread cannot be killed, so an attempt that did not return within its timeout is *in
doubt*: reconcile is asked and ``applied`` settles it; otherwise no other attempt starts while
the timed-out one is alive — the run waits for it (up to the timeout's grace): a late return is
the observation, a late error is reconciled again and retried only on ``absent``; a thread still
alive after the grace leaves the run ``unresolved`` with the reason, for a person. An attempt in
a child process (``Timeout(kill=True)``) is killed at the timeout: provably stopped, it is
reconciled and retried at once. Agents' tools go through the same mechanism.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import http_kit
import torpor
from conftest import HANG_S
from torpor import Agent, CodePlanner, PlanView, Proposal, Tools, step

FAST_RETRY = torpor.Retry(attempts=3, initial=0.01, max_wait=0.05)


@pytest.fixture
def svc() -> Iterator[http_kit.Service]:
    with http_kit.running() as s:
        yield s


@torpor.workflow(name="timeouts.charge", version="1")
def charge_flow(run: torpor.Run, cfg: dict[str, Any]) -> Any:
    timeout = torpor.Timeout(
        cfg["timeout_s"], grace_s=cfg.get("grace_s", 30.0), kill=cfg.get("kill", False)
    )
    return run.effect(
        "charge",
        http_kit.charge,
        cfg["url"],
        42,
        reconcile=http_kit.find_charge,
        timeout=timeout,
        retry=FAST_RETRY,
    )


@torpor.workflow(name="timeouts.acharge", version="1")
async def acharge_flow(run: torpor.Run, cfg: dict[str, Any]) -> Any:
    return await run.aeffect(
        "charge",
        http_kit.acharge,
        cfg["url"],
        42,
        reconcile=http_kit.find_charge,
        timeout=cfg["timeout_s"],
        retry=FAST_RETRY,
    )


def kinds(store_url: str, run_id: str) -> list[str]:
    out = []
    for e in torpor.Client(store_url).events(run_id):
        p: Any = e.payload
        if e.type == "effect_intended":
            out.append(f"intended#{p.attempt}")
        elif e.type == "effect_reconciled":
            out.append(f"reconciled:{p.verdict}")
        elif e.type in ("effect_observed", "effect_failed"):
            out.append(e.type.removeprefix("effect_"))
    return out


def settle(svc: http_kit.Service, seconds: float) -> None:
    """Give any attempt still running time to reach the service (so a duplicate would show)."""
    time.sleep(seconds)


def test_an_attempt_that_returns_late_within_the_grace_is_the_observation(
    store_url: str, svc: http_kit.Service
) -> None:
    key = "late/charge"
    svc.script(key, {"hang_s": 0.6})  # attempt 1 is stuck before sending, past the timeout
    with torpor.Runtime(store_url) as rt:
        res = rt.run("timeouts.charge", {"url": svc.url, "timeout_s": 0.15}, run_id="late")
    assert res.outcome == "succeeded", res.reason
    assert res.result == {"charge": 1, "key": key}
    settle(svc, 0.3)
    assert svc.count() == 1  # no second attempt started while the first was alive
    assert kinds(store_url, "late") == ["intended#1", "observed"]


def test_a_timed_out_attempt_found_applied_settles_it(
    store_url: str, svc: http_kit.Service
) -> None:
    key = "applied/charge"
    svc.script(key, {"delay_s": 0.8})  # the charge lands at once; the answer is late
    with torpor.Runtime(store_url) as rt:
        res = rt.run("timeouts.charge", {"url": svc.url, "timeout_s": 0.15}, run_id="applied")
    assert res.outcome == "succeeded", res.reason
    assert res.result == {"charge": 1, "key": key}
    assert kinds(store_url, "applied") == ["intended#1", "reconciled:applied"]
    rec = next(
        e for e in torpor.Client(store_url).events("applied") if e.type == "effect_reconciled"
    )
    assert "did not return within 0.15 s" in rec.payload.reason  # type: ignore[attr-defined]
    settle(svc, 0.8)
    assert svc.count() == 1


def test_a_late_error_is_reconciled_again_and_retried_only_on_absent(
    store_url: str, svc: http_kit.Service
) -> None:
    key = "retry/charge"
    svc.script(key, {"hang_s": 0.4, "fail": True})  # stuck, then gives up without sending
    with torpor.Runtime(store_url) as rt:
        res = rt.run("timeouts.charge", {"url": svc.url, "timeout_s": 0.15}, run_id="retry")
    assert res.outcome == "succeeded", res.reason
    assert svc.count(key) == 1
    assert kinds(store_url, "retry") == [
        "intended#1",
        "reconciled:absent",
        "intended#2",
        "observed",
    ]


def test_a_thread_alive_past_the_grace_leaves_the_run_unresolved_for_a_person(
    store_url: str, svc: http_kit.Service
) -> None:
    key = "stuck/charge"
    svc.script(key, {"hang_s": 1.0})
    cfg = {"url": svc.url, "timeout_s": 0.15, "grace_s": 0.3}
    with torpor.Runtime(store_url) as rt:
        res = rt.run("timeouts.charge", cfg, run_id="stuck")
        assert res.outcome == "unresolved"
        assert "still running" in res.reason and "grace" in res.reason, res.reason
        assert kinds(store_url, "stuck") == ["intended#1", "reconciled:unknown"]
        settle(svc, 1.0)
        assert svc.count(key) == 1  # the stuck attempt did send, later; nothing else did
        # A person looks at the service and settles it; the run finishes without a retry.
        torpor.Client(rt.store).resolve("stuck", key, "applied", "alice", result={"charge": 1})
        res = rt.resume("stuck")
    assert res.outcome == "succeeded", res.reason
    assert svc.count() == 1


def test_an_attempt_left_running_is_never_overlapped_even_once_a_person_says_absent(
    store_url: str, svc: http_kit.Service
) -> None:
    """A person settles the effect ``absent`` too early, while the timed-out attempt's thread
    still runs in this process: resuming here starts no attempt beside it; once it ended, its
    return is the result."""
    key = "early/charge"
    svc.script(key, {"hold": True})  # stuck before sending until released below
    cfg = {"url": svc.url, "timeout_s": 0.1, "grace_s": 0.2}
    with torpor.Runtime(store_url) as rt:
        client = torpor.Client(rt.store)
        res = rt.run("timeouts.charge", cfg, run_id="early")
        assert res.outcome == "unresolved", res.reason
        # Still held: every resume finds the attempt running and starts nothing beside it.
        for _ in range(2):
            client.resolve("early", key, "absent", "bob", reason="looked too early")
            res = rt.resume("early")
            assert res.outcome == "unresolved" and "earlier attempt" in res.reason, res.reason
        assert svc.count() == 0
        svc.release(key)
        deadline = time.monotonic() + HANG_S  # a hang guard
        while res.outcome == "unresolved" and time.monotonic() < deadline:
            # Until the released attempt's thread has returned, a resume still finds it running.
            assert "earlier attempt" in res.reason, res.reason
            time.sleep(0.05)
            client.resolve("early", key, "absent", "bob", reason="looked too early")
            res = rt.resume("early")
    assert res.outcome == "succeeded", res.reason
    assert res.result == {"charge": 1, "key": key}
    settle(svc, 1.2)  # a second call, had one been started, would have landed by now
    assert svc.count() == 1  # the stuck attempt's call only; no attempt ran beside it
    reasons = [
        e.payload.reason  # type: ignore[attr-defined]
        for e in torpor.Client(store_url).events("early")
        if e.type == "effect_reconciled" and e.payload.verdict == "unknown"  # type: ignore[attr-defined]
    ]
    assert any("earlier attempt of this effect is still running" in r for r in reasons)


def test_an_async_attempt_is_cancelled_at_the_timeout_then_reconciled_and_retried(
    store_url: str, svc: http_kit.Service
) -> None:
    key = "async/charge"
    svc.script(key, {"hang_s": 0.6})
    with torpor.Runtime(store_url) as rt:
        res = rt.run("timeouts.acharge", {"url": svc.url, "timeout_s": 0.15}, run_id="async")
    assert res.outcome == "succeeded", res.reason
    settle(svc, 0.6)
    assert svc.count() == 1
    assert kinds(store_url, "async") == [
        "intended#1",
        "reconciled:absent",
        "intended#2",
        "observed",
    ]


@pytest.mark.slow
def test_an_attempt_in_a_child_process_is_killed_at_the_timeout_and_retried_at_once(
    store_url: str, svc: http_kit.Service
) -> None:
    key = "killed/charge"
    svc.script(key, {"hang_s": 2.0})  # would send 2 s later, if it were still alive
    cfg = {"url": svc.url, "timeout_s": 1.0, "kill": True, "grace_s": 60.0}
    with torpor.Runtime(store_url) as rt:
        res = rt.run("timeouts.charge", cfg, run_id="killed")
    assert res.outcome == "succeeded", res.reason
    assert kinds(store_url, "killed") == [
        "intended#1",
        "reconciled:absent",
        "intended#2",
        "observed",
    ]
    rec = next(
        e for e in torpor.Client(store_url).events("killed") if e.type == "effect_reconciled"
    )
    assert "killed" in rec.payload.reason  # type: ignore[attr-defined]
    settle(svc, 2.2)
    assert svc.count() == 1  # the killed attempt never sent


# ------------------------------------------------------------------ agents' tools


def test_an_agent_tool_that_times_out_is_never_called_twice(
    store_url: str, svc: http_kit.Service
) -> None:
    """The report: a tool (timeout, retries) whose hung attempt called the service again after
    the retry had succeeded and the run had finished: two calls at the service, one recorded."""
    tools = Tools()

    def find(call: torpor.EffectCall) -> Any:
        return http_kit.find_charge(
            torpor.EffectCall(
                call.run_id,
                call.step_id,
                call.idempotency_key,
                call.operation,
                call.attempt,
                (svc.url,),
                call.kwargs,
            )
        )

    @tools.tool(policy="effect", timeout=0.15, retry=FAST_RETRY, reconcile=find)
    def pay(amount: int, idempotency_key: str) -> dict[str, Any]:
        return http_kit.charge(svc.url, amount, idempotency_key)

    def planner(view: PlanView) -> Proposal:
        if view.version == 0:
            return Proposal(steps=[step("p", "pay", amount=5)])
        return Proposal.finish("paid")

    svc.script("agent/tool:p@v1", {"hang_s": 0.6})
    agent = Agent(
        f"timeouts.agent.{store_url[:5]}",
        goal="pay once",
        tools=tools,
        planner=CodePlanner(planner),
        criteria={"paid": lambda ctx: ctx.results().get("p", {}).get("charge") == 1},
    )
    with torpor.Runtime(store_url) as rt:
        res = rt.run(agent, {}, run_id="agent")
    assert res.outcome == "succeeded", res.reason
    settle(svc, 0.8)
    assert svc.count() == 1


def test_bad_timeouts_and_unkillable_calls_are_refused_before_anything_is_recorded(
    db_url: str,
) -> None:
    with pytest.raises(torpor.TorporError, match=r"timeout must be > 0 s"):
        torpor.Timeout(0)
    with pytest.raises(torpor.TorporError, match=r"attempts must be >= 1"):
        torpor.Retry(attempts=0)

    @torpor.workflow(name="timeouts.bad", version="1")
    def bad(run: torpor.Run, how: str) -> Any:
        if how == "text":
            return run.effect("send", http_kit.charge, "u", 1, timeout="5")  # type: ignore[arg-type]
        # A lambda cannot be sent to a child process.
        return run.effect("send", lambda: 1, timeout=torpor.Timeout(1, kill=True))

    with torpor.Runtime(db_url) as rt:
        for how, problem in (("text", "must be seconds"), ("lambda", "cannot be pickled")):
            res = rt.run(bad, how, run_id=f"bad-{how}")
            assert res.outcome == "failed" and problem in res.reason, res.reason
            assert f"run 'bad-{how}' effect 'send'" in res.reason
            seen = [e.type for e in torpor.Client(rt.store).events(f"bad-{how}")]
            assert "effect_intended" not in seen and "step_started" not in seen
