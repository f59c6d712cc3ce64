"""Durable waits: timers that straddle a SIGKILL fire once at the original deadline; signals are
kept until a wait consumes them, deduplicated by message id; deadlines raise WaitTimeout;
cancellation ends a run ``cancelled`` and cannot be swallowed by ``except Exception``."""

from __future__ import annotations

import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import runtime_kit as kit
import torpor
from runtime_kit import Lab

SLEEPY = """
@torpor.workflow(name="w.sleepy", version="1")
def sleepy(run, _):
    run.step("before", work, "before", 1)
    run.sleep(timedelta(seconds=2))
    run.step("after", work, "after", 2)
    return "woke"


@torpor.workflow(name="w.busy", version="1")
def busy(run, n):
    done = 0
    for i in range(n):
        try:
            run.step("tick", work, "tick" if i == 0 else f"tick#{i + 1}", i)
            _time.sleep(0.02)
            done += 1
        except Exception as exc:  # a workflow that swallows every error it sees
            ledger("swallowed", error=repr(exc))
    return done
"""


@pytest.fixture
def lab(tmp_path: Path, db_url: str) -> Lab:
    lab = Lab(tmp_path, db_url, tmp_path / "ledger.jsonl")
    lab.module("wwf", SLEEPY)
    return lab


@pytest.mark.proc
def test_timer_straddling_a_sigkill_fires_once_at_the_original_deadline(lab: Lab) -> None:
    a = lab.spawn("wwf", "t1", workflow="w.sleepy")
    # Wait until A has recorded the sleep (status waiting), then kill it mid-sleep.
    deadline = time.monotonic() + 30
    while True:
        assert time.monotonic() < deadline and a.poll() is None, "A never started sleeping"
        if lab.ledger("step", name="before"):
            try:
                if lab.state("t1").status == "waiting":
                    break
            except torpor.errors.StoreError:
                pass
        time.sleep(0.01)
    a.send_signal(signal.SIGKILL)
    assert lab.collect(a).killed
    waits = [e for e in lab.events("t1") if e.type == "wait_started"]
    assert len(waits) == 1
    original_ms = waits[0].payload.deadline_ms  # type: ignore[attr-defined]
    # fixed when the sleep began (two recorded times, not a wall-clock budget)
    assert 1900 <= original_ms - waits[0].at_ms <= 2000  # timing-audit: recorded deadline

    # B resumes without following the timer: before the deadline it finds the wait still open
    # with the original deadline (not re-armed from its own start); after it (a loaded machine
    # can take seconds to start an interpreter) the timer fires at once. Either way it is the
    # recorded deadline, not the wall clock, that decides: no budget on how late B came.
    b = lab.drive("wwf", "t1", resume=True, follow_timers=False)
    assert b.result is not None, b.describe()
    if b.result["status"] == "waiting":
        assert b.result["wake_at_ms"] == original_ms, "the resumed run re-armed its timer"
        assert lab.ledger("step", name="after") == []
        b = lab.drive("wwf", "t1", resume=True)  # follows the timer to the original deadline
    assert b.result is not None and b.result["outcome"] == "succeeded", b.describe()
    after = lab.ledger("step", name="after")
    assert len(after) == 1, "the step after the sleep ran twice"
    fired_ms = after[0]["t"] * 1000
    assert fired_ms >= original_ms, f"fired {original_ms - fired_ms:.0f} ms before the deadline"
    assert after[0]["pid"] == b.pid
    assert len(lab.ledger("step", name="before")) == 1
    events = [e.type for e in lab.events("t1")]
    assert (events.count("wait_started"), events.count("wait_completed")) == (1, 1)

    c = lab.drive("wwf", "t1", resume=True)  # and never again
    assert c.result is not None and c.result["outcome"] == "succeeded"
    assert len(lab.ledger("step", name="after")) == 1


@pytest.mark.proc
def test_cancel_cannot_be_swallowed_by_except_exception(lab: Lab) -> None:
    assert issubclass(torpor.errors.Cancelled, BaseException)
    assert not issubclass(torpor.errors.Cancelled, Exception)
    assert not issubclass(torpor.errors.Suspended, Exception)
    proc = lab.spawn(
        "wwf", "c1", workflow="w.busy", input=300, runtime={"lease_ttl_s": 1.0, "heartbeat_s": 0.1}
    )
    deadline = time.monotonic() + 30
    while len(lab.ledger("step")) < 3:
        assert time.monotonic() < deadline and proc.poll() is None, "never started ticking"
        time.sleep(0.01)
    c = lab.client()
    c.cancel("c1", by="ops", reason="wrong target")
    c.close()
    p = lab.collect(proc)
    assert p.result is not None, p.describe()
    assert p.result["outcome"] == "cancelled", p.result
    assert lab.ledger("swallowed") == [], "the workflow's except Exception caught the cancel"
    ticks = len(lab.ledger("step"))
    assert ticks < 300
    assert len(lab.events("c1")) > 0
    assert lab.state("c1").outcome == "cancelled"
    # Cancelled is final: resuming does not tick again.
    lab.drive("wwf", "c1", resume=True)
    assert len(lab.ledger("step")) == ticks


# ------------------------------------------------------------------ in-process signal waits


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path) -> None:
    kit.use_ledger(tmp_path / "inproc-ledger.jsonl")


def _post_signal(db_url: str, rid: str, payload: Any) -> str:
    c = torpor.Client(db_url)
    try:
        c.signal(rid, "go", payload, message_id="early")
    finally:
        c.close()
    return "posted"


@torpor.workflow(name="w.waiter", version="1")
def waiter(run: torpor.Run, cfg: dict[str, Any]) -> Any:
    if cfg.get("signal_during_step"):
        run.step("busy", _post_signal, cfg["db"], run.run_id, "sent mid-step")
    kit.ledger("before wait")
    first = run.wait_for("go")
    kit.ledger("got", payload=first)
    try:
        second = run.wait_for("go", timeout=timedelta(seconds=cfg.get("timeout", 0.3)))
    except torpor.WaitTimeout as exc:
        second = f"timeout: {exc}"
    return {"first": first, "second": second}


@torpor.workflow(name="w.strict", version="1")
def strict(run: torpor.Run, _: Any) -> Any:
    try:
        return run.wait_for("go", timeout=timedelta(seconds=0.2))
    except Exception as exc:  # must not swallow the suspension (it is not an Exception)
        kit.ledger("swallowed", error=repr(exc))
        raise


def test_signal_sent_before_the_run_starts_is_consumed_by_the_wait(
    runtime: torpor.Runtime, client: torpor.Client
) -> None:
    rid = runtime.start(waiter, {})
    assert client.signal(rid, "go", {"n": 1}, message_id="m1") is True
    res = runtime.resume(rid)
    assert res.status == "waiting" and res.wait_kind == "signal"  # now on the second wait
    assert kit.ledger_entries("got")[0]["payload"] == {"n": 1}
    assert len(kit.ledger_entries("before wait")) == 1


def test_signal_arriving_while_busy_before_the_wait_is_consumed(
    runtime: torpor.Runtime, client: torpor.Client, db_url: str
) -> None:
    res = runtime.run(waiter, {"signal_during_step": True, "db": db_url}, run_id="busy")
    assert res.status == "waiting"
    assert kit.ledger_entries("got")[0]["payload"] == "sent mid-step"
    waits = [e.payload for e in client.events("busy") if e.type == "wait_completed"]
    assert waits[0].signal_id == "early"  # type: ignore[attr-defined]


def test_same_message_id_twice_is_consumed_once_and_deadline_times_out(
    runtime: torpor.Runtime, client: torpor.Client
) -> None:
    rid = runtime.start(waiter, {"timeout": 0.3})
    assert client.signal(rid, "go", "once", message_id="dup") is True
    assert client.signal(rid, "go", "once", message_id="dup") is False
    res = runtime.resume(rid)
    assert res.status == "waiting"  # the duplicate did not satisfy the second wait
    assert client.signal(rid, "go", "once", message_id="dup") is False  # still deduplicated
    received = [e for e in client.events(rid) if e.type == "signal_received"]
    assert len(received) == 1
    wake = client.get(rid).wake_at_ms
    assert wake is not None
    time.sleep(max(0.0, wake / 1000 - time.time()) + 0.05)
    res = runtime.resume(rid)
    assert res.outcome == "succeeded", res
    assert res.result["first"] == "once"
    assert res.result["second"].startswith("timeout:") and "deadline" in res.result["second"]
    # (workflow code between steps re-runs on replay; the wait returns the same payload)
    assert {e["payload"] for e in kit.ledger_entries("got")} == {"once"}


def test_uncaught_wait_timeout_fails_the_run_and_suspension_is_not_swallowed(
    runtime: torpor.Runtime,
) -> None:
    res = runtime.run(strict, None, run_id="strict")
    assert res.status == "waiting"
    assert kit.ledger_entries("swallowed") == []
    time.sleep(0.25)
    res = runtime.resume("strict")
    assert res.outcome == "failed", res
    assert "WaitTimeout" in res.reason
    # The WaitTimeout itself is an ordinary error the workflow may catch (and here re-raised).
    assert len(kit.ledger_entries("swallowed")) == 1


def test_cancel_a_waiting_run(runtime: torpor.Runtime, client: torpor.Client) -> None:
    res = runtime.run(waiter, {}, run_id="wc")
    assert res.status == "waiting"
    client.cancel("wc", by="ops", reason="no longer needed")
    res = runtime.resume("wc")
    assert res.outcome == "cancelled", res
    assert kit.ledger_entries("got") == []
    with pytest.raises(torpor.TorporError):
        client.signal("wc", "go", 1)


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("signal", {"payload": "no name"}),
        ("decision", {"approval_id": "ship@x"}),
        ("resolve", {"key": "k"}),
        ("mystery", {"a": 1}),
    ],
)
def test_malformed_inbox_message_never_blocks_the_run(
    runtime: torpor.Runtime, client: torpor.Client, kind: str, body: dict[str, Any]
) -> None:
    """A message that cannot be understood (written by a buggy client, or by hand) is moved
    into the history as a warning naming it; the run goes on and its outcome says so."""
    rid = runtime.start(waiter, {"timeout": 0.05})
    assert runtime.resume(rid).status == "waiting"
    runtime.store.post_inbox(rid, kind, body, message_id="bad-1")
    res = runtime.resume(rid)
    assert res.status == "waiting", res  # not an error: still waiting for "go"
    warnings = client.state(rid).warnings
    assert len(warnings) == 1 and "bad-1" in warnings[0] and "malformed" in warnings[0]
    client.signal(rid, "go", "fine")
    res = runtime.resume(rid)
    if res.status == "waiting":  # the second wait's short deadline
        time.sleep(0.1)
        res = runtime.resume(rid)
    assert res.outcome == "succeeded_with_warnings", res
    assert res.result["first"] == "fine"
    assert "bad-1" in res.reason
