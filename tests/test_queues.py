"""Queues on both backends: concurrency, per-key and rate limits, priorities, delayed starts,
deduplicated starts; claims racing from many threads; why a run is not running."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import torpor
from torpor.errors import BadInputError
from torpor.queues import Queues, why_not_running
from torpor.testing import FakeClock

T0 = 1_780_000_000.0  # 2026-05-28, a fixed start for the fake clock (SQLite)


@torpor.workflow("q_hold")
def q_hold(run: torpor.Run, input: Any) -> Any:
    """Runs one step, then waits for a signal (holding its queue slot), then finishes."""
    run.step("first", lambda: input)
    return run.wait_for("go")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def rt(store_url: str, clock: FakeClock) -> Iterator[torpor.Runtime]:
    r = torpor.Runtime(store_url, clock=clock if store_url.startswith("sqlite") else None)
    yield r
    r.close()


@pytest.fixture
def later(rt: torpor.Runtime, clock: FakeClock) -> Callable[[float], None]:
    """Let ``s`` seconds pass: the fake clock on SQLite; on PostgreSQL, which judges dispatch
    by the database clock, real time."""
    if rt.store.url.startswith("sqlite"):
        return clock.advance
    return time.sleep


def started_ms(rt: torpor.Runtime, run_id: str) -> int:
    with rt.store.driver.read() as cur:
        row = rt.store.driver.fetchone(cur, rt.store.q["queue_run"], {"run_id": run_id})
    assert row is not None and row[5] is not None
    return int(row[5])


def utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def claim(rt: torpor.Runtime) -> str | None:
    lease = rt.store.claim_next(rt.owner, 30, accept={"q_hold": ["1"]})
    if lease is None:
        return None
    rt.execute(lease.run_id, lease=lease)
    return lease.run_id


def finish(rt: torpor.Runtime, run_id: str) -> None:
    torpor.Client(rt.store).signal(run_id, "go", "done")
    assert claim(rt) == run_id
    assert rt.store.get_run(run_id).outcome == "succeeded"


def test_concurrency_one_serializes_in_order(rt: torpor.Runtime) -> None:
    Queues(rt.store).set("deploys", concurrency=1)
    ids = [rt.start("q_hold", i, run_id=f"d{i}", queue="deploys") for i in range(3)]
    assert claim(rt) == "d0"  # now waiting for its signal, still holding the slot
    assert claim(rt) is None
    assert why_not_running(rt.store, "d1") == "queued behind run d0 (queue deploys limit 1)"
    assert why_not_running(rt.store, "d0") is None
    finish(rt, "d0")
    assert claim(rt) == "d1"
    assert claim(rt) is None
    finish(rt, "d1")
    assert claim(rt) == "d2"
    finish(rt, "d2")
    assert [rt.store.get_run(i).outcome for i in ids] == ["succeeded"] * 3


def test_per_key_limit(rt: torpor.Runtime) -> None:
    Queues(rt.store).set("ci", key_concurrency=1)
    rt.start("q_hold", 1, run_id="a1", queue="ci", key="repo-a")
    rt.start("q_hold", 2, run_id="a2", queue="ci", key="repo-a")
    rt.start("q_hold", 3, run_id="b1", queue="ci", key="repo-b")
    assert claim(rt) == "a1"
    assert claim(rt) == "b1"  # another key: not held back
    assert claim(rt) is None
    assert why_not_running(rt.store, "a2") == "queued behind run a1 (per-key limit 1)"
    finish(rt, "a1")
    assert claim(rt) == "a2"


def test_rate_limit_and_its_window(rt: torpor.Runtime, later: Callable[[float], None]) -> None:
    Queues(rt.store).set("mail", rate_limit=2, rate_period_s=1.5)
    for i in range(3):
        rt.start("q_hold", i, run_id=f"m{i}", queue="mail")
    assert claim(rt) == "m0"
    later(0.3)
    assert claim(rt) == "m1"
    assert claim(rt) is None
    free_at = started_ms(rt, "m0") + 1500
    reason = why_not_running(rt.store, "m2")
    assert reason == f"rate limited until {utc(free_at)} (queue mail rate limit 2 per 1.5s)"
    assert claim(rt) is None
    later(max(0.0, (free_at - rt.store.now_ms()) / 1000) + 0.05)  # m0 left the window
    assert claim(rt) == "m2"


def test_per_key_rate_limit(rt: torpor.Runtime, later: Callable[[float], None]) -> None:
    Queues(rt.store).set("api", key_rate_limit=1, key_rate_period_s=1)
    rt.start("q_hold", 1, run_id="x1", queue="api", key="x")
    rt.start("q_hold", 2, run_id="x2", queue="api", key="x")
    rt.start("q_hold", 3, run_id="y1", queue="api", key="y")
    assert claim(rt) == "x1"
    assert claim(rt) == "y1"
    assert claim(rt) is None
    assert (why_not_running(rt.store, "x2") or "").startswith("rate limited until")
    later(1.05)
    assert claim(rt) == "x2"


def test_started_run_is_taken_over_whatever_the_rate(
    rt: torpor.Runtime, later: Callable[[float], None]
) -> None:
    """A run that holds its slot is taken over after its lease expires even while the queue's
    rate limit is exhausted: no deadlock."""
    Queues(rt.store).set("slow", concurrency=1, rate_limit=1, rate_period_s=3600)
    rt.start("q_hold", 1, run_id="s1", queue="slow")
    rt.start("q_hold", 2, run_id="s2", queue="slow")
    lease = rt.store.claim_next("dead-worker", 0.5)
    assert lease is not None and lease.run_id == "s1"  # claimed, never executed nor released
    assert rt.store.claim_next(rt.owner, 5) is None
    later(0.6)  # the lease expired: s1 is recovered, s2 still waits
    assert claim(rt) == "s1"
    assert why_not_running(rt.store, "s2") == "queued behind run s1 (queue slow limit 1)"
    finish(rt, "s1")
    assert (why_not_running(rt.store, "s2") or "").startswith("rate limited until")


def test_priority_then_creation_order(rt: torpor.Runtime) -> None:
    Queues(rt.store).set("p", concurrency=1)
    rt.start("q_hold", 1, run_id="low", queue="p")
    rt.start("q_hold", 2, run_id="high", queue="p", priority=5)
    rt.start("q_hold", 3, run_id="low2", queue="p")
    order = []
    for _ in range(3):
        rid = claim(rt)
        assert rid is not None
        order.append(rid)
        finish(rt, rid)
    assert order == ["high", "low", "low2"]


def test_delayed_start(rt: torpor.Runtime, later: Callable[[float], None]) -> None:
    due_ms = rt.store.now_ms() + 1000
    rt.start("q_hold", 1, run_id="later", start_at=due_ms / 1000)
    assert claim(rt) is None
    assert why_not_running(rt.store, "later") == f"delayed until {utc(due_ms)}"
    assert rt.store.next_wake_at_ms() == due_ms
    later(0.5)
    assert claim(rt) is None
    later(0.55)
    assert claim(rt) == "later"


def test_start_is_deduplicated_by_run_id(rt: torpor.Runtime) -> None:
    Queues(rt.store).set("once", concurrency=5)
    assert rt.start("q_hold", 1, run_id="same", queue="once", key="k") == "same"
    assert rt.start("q_hold", 2, run_id="same", queue="once", key="k") == "same"
    assert [r.run_id for r in rt.store.list_runs()] == ["same"]
    assert rt.store.load("same").input == 1


def test_unlimited_and_undefined_queues(rt: torpor.Runtime) -> None:
    for i in range(3):
        rt.start("q_hold", i, run_id=f"u{i}", queue="nolimits")
    assert {claim(rt) for _ in range(3)} == {"u0", "u1", "u2"}
    assert why_not_running(rt.store, "u0") is None


def test_bad_input_is_named(rt: torpor.Runtime) -> None:
    with pytest.raises(BadInputError, match="without a queue"):
        rt.start("q_hold", run_id="k", key="k")
    with pytest.raises(BadInputError, match="no time zone"):
        rt.start("q_hold", run_id="k", start_at=datetime(2026, 1, 1))
    with pytest.raises(BadInputError, match="aware datetime or epoch seconds, not 'soon'"):
        rt.start("q_hold", run_id="k", start_at="soon")  # type: ignore[arg-type]
    with pytest.raises(BadInputError, match="queue name 'a b'"):
        rt.start("q_hold", run_id="k", queue="a b")
    with pytest.raises(BadInputError, match="concurrency must be an integer from 1 to"):
        Queues(rt.store).set("q", concurrency=0)
    with pytest.raises(BadInputError, match="needs a period"):
        Queues(rt.store).set("q", rate_limit=3)
    assert rt.store.list_runs() == []


def test_claims_racing_never_exceed_the_limits(store_url: str) -> None:
    """8 threads, each with its own store connection, claim as fast as they can from a queue
    with concurrency 3 and per-key 1 (many keys): never more holders than the limits."""
    setup = torpor.Runtime(store_url)
    Queues(setup.store).set("race", concurrency=3, key_concurrency=1)
    for i in range(24):
        setup.start("q_hold", i, run_id=f"r{i:02}", queue="race", key=f"k{i % 4}")
    claimed: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def worker(n: int) -> None:
        s = torpor.Runtime(store_url).store
        try:
            barrier.wait()
            for _ in range(10):
                lease = s.claim_next(f"w{n}", 60)
                if lease is not None:
                    with lock:
                        claimed.append(lease.run_id)
        finally:
            s.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(claimed) == 3, claimed
    keys = {int(r[1:]) % 4 for r in claimed}
    assert len(keys) == 3  # per-key 1: three different keys
    assert sorted(claimed) == sorted(set(claimed))
    setup.close()


def test_a_free_run_behind_many_held_back_is_claimed(rt: torpor.Runtime) -> None:
    """More held-back runs ahead of a free one than a claim checks first (TOP_K): the claim
    looks further and takes the free one (no head-of-line blocking)."""
    from torpor.store.claims import TOP_K

    Queues(rt.store).set("hol", key_concurrency=1)
    for i in range(TOP_K + 4):
        rt.start("q_hold", i, run_id=f"a{i:02}", queue="hol", key="a")
    rt.start("q_hold", 0, run_id="b", queue="hol", key="b")
    assert claim(rt) == "a00"
    assert claim(rt) == "b"
    assert claim(rt) is None


def test_console_pages_say_why(rt: torpor.Runtime) -> None:
    """The console's runs list and run page carry the same reason as ls/show."""
    from torpor.console.pages import Filters, runs_page, summary

    Queues(rt.store).set("one", concurrency=1)
    rt.start("q_hold", 1, run_id="c1", queue="one")
    rt.start("q_hold", 2, run_id="c2", queue="one")
    assert claim(rt) == "c1"
    client = torpor.Client(rt.store)
    rows = {r.run_id: r for r in runs_page(client, Filters())["rows"]}
    assert rows["c2"].waiting_for == "queued behind run c1 (queue one limit 1)"
    assert rows["c1"].waiting_for == "signal go"
    assert summary(client, "c2")["not_running"] == "queued behind run c1 (queue one limit 1)"
    assert summary(client, "c1")["not_running"] is None


def test_runnable_leaves_queued_runs_to_workers(rt: torpor.Runtime) -> None:
    """``resume --all`` (Client.runnable) continues started runs and runs of no queue or of a
    queue without limits; the unstarted runs of a limited queue are left to workers."""
    Queues(rt.store).set("lim", concurrency=1)
    rt.start("q_hold", 1, run_id="free")
    rt.start("q_hold", 2, run_id="open", queue="no-limits")
    rt.start("q_hold", 3, run_id="held1", queue="lim")
    rt.start("q_hold", 4, run_id="held2", queue="lim")
    client = torpor.Client(rt.store)
    assert sorted(client.runnable()) == ["free", "open"]
    lease = rt.store.claim_next("gone", 0.2, accept={"q_hold": ["1"]}, exclude=["free", "open"])
    assert lease is not None and lease.run_id == "held1"
    rt.store.release_lease(lease)  # started, released without finishing: resumable
    assert sorted(client.runnable()) == ["free", "held1", "open"]


def test_a_lease_taken_only_to_annotate_takes_no_slot(rt: torpor.Runtime) -> None:
    """A worker naming a run it cannot execute (a version mismatch) leases it with
    ``starts=False``: the run does not take its queue's slot; ``resume`` (starts) does."""
    Queues(rt.store).set("solo", concurrency=1)
    rt.start("q_hold", 1, run_id="n1", queue="solo")
    rt.start("q_hold", 2, run_id="n2", queue="solo")
    lease = rt.store.acquire_lease("n2", "annotator", 5, starts=False)
    rt.store.release_lease(lease)
    assert why_not_running(rt.store, "n2") is None
    assert claim(rt) == "n1"  # n2 did not take the slot
    assert why_not_running(rt.store, "n2") == "queued behind run n1 (queue solo limit 1)"


def test_a_takeover_counts_as_a_start_in_the_rate_window(
    rt: torpor.Runtime, later: Callable[[float], None]
) -> None:
    """Field card C32 (issue 36): a run whose worker died right after claiming it does its
    work when it is taken over; the next run must not start within the window of that
    takeover (before: it started once the *first* claim left the window)."""
    period = 4.0
    Queues(rt.store).set("lim", rate_limit=1, rate_period_s=period)
    rt.start("q_hold", 1, run_id="r1", queue="lim")
    rt.start("q_hold", 2, run_id="r2", queue="lim")
    lease = rt.store.claim_next("dead-worker", 0.5)
    assert lease is not None and lease.run_id == "r1"  # claimed, never executed nor released
    first = started_ms(rt, "r1")
    later(0.6)  # the dead worker's lease expired
    assert claim(rt) == "r1"  # taken over at once: no other run started in the window
    taken = started_ms(rt, "r1")
    assert taken > first  # the takeover is the run's start now
    # Past the first claim's window, inside the takeover's.
    later(max(0.0, (first + period * 1000 - rt.store.now_ms()) / 1000) + 0.05)
    if rt.store.now_ms() < taken + period * 1000:  # (a loaded PostgreSQL host may be later)
        assert claim(rt) is None
        assert (why_not_running(rt.store, "r2") or "").startswith("rate limited until")
    later(max(0.0, (taken + period * 1000 - rt.store.now_ms()) / 1000) + 0.05)
    assert claim(rt) == "r2"


def test_a_takeover_waits_for_room_among_the_other_runs_starts(
    rt: torpor.Runtime, later: Callable[[float], None]
) -> None:
    """A dead holder's lease outlives the window: another run started meanwhile, so the
    takeover waits until that start left the window (before: taken over at once, its work
    right after the other run's)."""
    Queues(rt.store).set("lim2", rate_limit=1, rate_period_s=1.0)
    rt.start("q_hold", 1, run_id="t1", queue="lim2")
    rt.start("q_hold", 2, run_id="t2", queue="lim2")
    lease = rt.store.claim_next("dead-worker", 1.6)
    assert lease is not None and lease.run_id == "t1"
    later(1.05)  # t1's start left the window; its lease (1.6 s) has not expired
    assert claim(rt) == "t2"
    t2 = started_ms(rt, "t2")
    later(max(0.0, (lease.expires_at_ms - rt.store.now_ms()) / 1000) + 0.05)
    if rt.store.now_ms() < t2 + 1000:  # (a loaded PostgreSQL host may be later)
        assert claim(rt) is None  # t2 started within the window: the takeover waits
    later(max(0.0, (t2 + 1000 - rt.store.now_ms()) / 1000) + 0.05)
    assert claim(rt) == "t1"
    assert started_ms(rt, "t1") >= t2 + 1000
