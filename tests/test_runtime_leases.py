"""G3 with real processes: two processes resuming one run at once — one runs, the other is
refused with LeaseHeldError; a process paused (SIGSTOP) past its lease is fenced off when it
wakes, and nothing it tries to write lands."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import runtime_kit as kit
import torpor
from runtime_kit import Lab

LEASES = """
@torpor.workflow(name="l.slow", version="1")
def slow(run, _):
    a = run.step("first", work, "first", 1)
    b = run.step("slow", slow_work)
    c = run.step("last", work, "last", 3)
    sent = run.effect("notify", send, "done", reconcile=find_sent)
    return [a, b, c, sent]


def slow_work():
    ledger("step", name="slow")
    _time.sleep(float(_os.environ.get("RT_SLOW_S", "1.5")))
    return 2
"""


@pytest.fixture
def lab(tmp_path: Path, db_url: str) -> Lab:
    lab = Lab(tmp_path, db_url, tmp_path / "ledger.jsonl")
    lab.module("lwf", LEASES)
    return lab


@pytest.mark.proc
def test_two_processes_resuming_at_once(lab: Lab) -> None:
    barrier = lab.tmp / "go"
    env = {"RT_BARRIER": str(barrier)}
    procs = [lab.spawn("lwf", "same", workflow="l.slow", env=env) for _ in range(2)]
    # Both interpreters up and waiting at the barrier (each says so), however long that takes.
    kit.wait_for_file_count(lab.tmp, "go.ready.*", 2)
    barrier.touch()
    results = [lab.collect(p) for p in procs]
    winners = [r for r in results if r.result is not None]
    losers = [r for r in results if r.error is not None]
    assert len(winners) == 1 and len(losers) == 1, [r.describe() for r in results]
    assert winners[0].result is not None
    assert winners[0].result["outcome"] == "succeeded"
    assert losers[0].error is not None
    assert losers[0].error["type"] == "LeaseHeldError", losers[0].error
    assert "same" in losers[0].error["msg"]
    steps = Counter(e["name"] for e in lab.ledger("step"))
    assert steps == {"first": 1, "slow": 1, "last": 1}, steps
    assert len(lab.ledger("effect")) == 1
    assert all(e["pid"] == winners[0].pid for e in lab.ledger())
    leases = [e for e in lab.events("same") if e.type == "lease_acquired"]
    assert len(leases) == 1


@pytest.mark.proc
def test_paused_holder_is_fenced_off_after_takeover(lab: Lab) -> None:
    rt = {"lease_ttl_s": 1.0, "heartbeat_s": 0.25}
    a = lab.spawn("lwf", "fence", workflow="l.slow", runtime=rt, env={"RT_SLOW_S": "2.5"})
    deadline = time.monotonic() + 30
    while not lab.ledger("step", name="slow"):
        assert time.monotonic() < deadline and a.poll() is None, "A never reached the slow step"
        time.sleep(0.005)
    a.send_signal(signal.SIGSTOP)  # a GC pause, a laptop lid: alive, but silent
    try:
        time.sleep(1.2)  # the lease (1 s) expires meanwhile
        b = lab.drive("lwf", "fence", resume=True, runtime=rt, env={"RT_SLOW_S": "0.05"})
        assert b.result is not None, b.describe()
        assert b.result["outcome"] == "succeeded", b.result
    finally:
        a.send_signal(signal.SIGCONT)
    pa = lab.collect(a)
    assert pa.error is not None, pa.describe()
    assert pa.error["type"] == "LeaseLostError", pa.error
    # A ran its slow step but could record nothing; B did everything that is recorded.
    evs = lab.events("fence")
    epochs = {e.payload.epoch: e.payload.owner for e in evs if e.type == "lease_acquired"}  # type: ignore[attr-defined]
    b_epoch = max(epochs)
    assert str(b.pid) in epochs[b_epoch]
    completions = {e.payload.step_id: e.epoch for e in evs if e.type == "step_completed"}  # type: ignore[attr-defined]
    assert completions["slow"] == b_epoch and completions["last"] == b_epoch
    assert all(e.epoch <= b_epoch for e in evs)
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
    assert len(lab.ledger("effect")) == 1
    assert Counter(e["name"] for e in lab.ledger("step")) == {"first": 1, "slow": 2, "last": 1}
    lab.check_no_rerun_after_record("fence")


# ---------------------------------------------------------------------- in-process


def _long_step(seconds: float) -> str:
    time.sleep(seconds)
    return "done"


@torpor.workflow(name="l.long_step", version="1")
def long_step(run: torpor.Run, seconds: float) -> str:
    return str(run.step("long", _long_step, seconds))


def test_heartbeat_keeps_the_lease_through_a_long_step(db_url: str) -> None:
    """A step three times longer than the lease ttl: the heartbeat renews it, the run
    succeeds, and another owner trying meanwhile is refused."""
    rt = torpor.Runtime(db_url, lease_ttl_s=0.5, heartbeat_s=0.1)
    other = torpor.Runtime(db_url, lease_ttl_s=0.5, heartbeat_s=0.1)
    rid = rt.start(long_step, 1.5)
    refused: list[BaseException] = []

    def intrude() -> None:
        time.sleep(0.9)  # well past the first lease's ttl
        try:
            other.execute(rid)
        except torpor.errors.LeaseHeldError as exc:
            refused.append(exc)

    t = threading.Thread(target=intrude)
    t.start()
    try:
        res = rt.execute(rid)
    finally:
        t.join()
        rt.close()
        other.close()
    assert res.outcome == "succeeded", res
    assert len(refused) == 1
