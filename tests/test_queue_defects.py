"""Queues on both backends, as an adversarial review found them broken: a repeated start of a
queued or delayed run only returns it; a run reopened from a terminal outcome waits for room in
its queue; why a run is queued names every run holding the slots; huge or tiny limits are
refused with one line."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import torpor
from torpor.errors import BadInputError
from torpor.queues import Queues, dispatch_for, why_not_running
from torpor.testing import FakeClock

T0 = 1_780_000_000.0


@torpor.workflow("qd_hold")
def qd_hold(run: torpor.Run, input: Any) -> Any:
    """One step, then waits for a signal (holding its queue slot)."""
    run.step("first", lambda: input)
    return run.wait_for("go")


@torpor.workflow("qd_park")
def qd_park(run: torpor.Run, input: Any) -> Any:
    """Ends blocked; reopened, it blocks again (each attempt needs a slot of its queue)."""
    run.step("look", lambda: input)
    run.block("waiting for more budget")
    return "unreachable"


ACCEPT = {"qd_hold": ["1"], "qd_park": ["1"]}


@pytest.fixture
def rt(store_url: str) -> Iterator[torpor.Runtime]:
    clock = FakeClock(T0) if store_url.startswith("sqlite") else None
    r = torpor.Runtime(store_url, clock=clock)
    yield r
    r.close()


def claim(rt: torpor.Runtime) -> str | None:
    lease = rt.store.claim_next(rt.owner, 30, accept=ACCEPT)
    if lease is None:
        return None
    rt.execute(lease.run_id, lease=lease)
    return lease.run_id


def test_a_repeated_start_of_a_queued_run_only_returns_it(rt: torpor.Runtime) -> None:
    Queues(rt.store).set("q", concurrency=1)
    rt.start("qd_hold", 1, run_id="B", queue="q")
    rt.start("qd_hold", 2, run_id="C", queue="q")
    assert claim(rt) == "B"
    res = rt.run("qd_hold", 2, run_id="C")  # "rejoin" the run: B holds the only slot
    assert (res.status, rt.store.get_run("C").status) == ("pending", "pending")
    assert why_not_running(rt.store, "C") == "queued behind run B (queue q limit 1)"
    later = datetime(2030, 1, 1, tzinfo=UTC)
    rt.start("qd_hold", 3, run_id="D", start_at=later)
    assert rt.run("qd_hold", 3, run_id="D").status == "pending"
    assert why_not_running(rt.store, "D") == "delayed until 2030-01-01 00:00:00 UTC"
    assert claim(rt) is None


def test_a_reopened_run_waits_for_room_in_its_queue(rt: torpor.Runtime) -> None:
    Queues(rt.store).set("q", concurrency=2)
    rt.start("qd_park", 0, run_id="A", queue="q")
    assert claim(rt) == "A" and rt.store.get_run("A").outcome == "blocked"  # slot given back
    rt.start("qd_hold", 1, run_id="B", queue="q")
    rt.start("qd_hold", 2, run_id="C", queue="q")
    assert claim(rt) == "B" and claim(rt) == "C"  # the queue is full
    client = torpor.Client(rt.store)
    client.reopen("A", "alice", steps=100)
    assert rt.store.get_run("A").status == "pending"
    assert claim(rt) is None  # not over the limit: A waits for a slot like a new run
    assert why_not_running(rt.store, "A") == "queued behind runs B, C (queue q limit 2)"
    client.signal("C", "go", "done")
    claim(rt)  # C finishes (its signal) and frees its slot
    assert claim(rt) == "A" and rt.store.get_run("A").outcome == "blocked"


@pytest.mark.parametrize(
    ("limits", "fragment"),
    [
        ({"concurrency": 10**23}, "concurrency must be an integer from 1 to"),
        ({"key_concurrency": 10**20}, "key_concurrency must be an integer from 1 to"),
        ({"rate_limit": 10**20, "rate_period_s": 1}, "rate_limit must be an integer from 1"),
        ({"rate_limit": 1, "rate_period_s": 1e300}, "period of at most"),
        ({"rate_limit": 1, "rate_period_s": float("inf")}, "period of at most"),
        ({"rate_limit": 1, "rate_period_s": float("nan")}, "needs a period"),
        ({"key_rate_limit": 1, "key_rate_period_s": 1e-7}, "at least 0.001"),
    ],
)
def test_limits_out_of_bounds_are_refused(
    rt: torpor.Runtime, limits: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(BadInputError, match=fragment):
        Queues(rt.store).set("q", **limits)
    assert Queues(rt.store).get("q") is None  # nothing was stored


def test_priority_out_of_bounds_is_refused() -> None:
    with pytest.raises(BadInputError, match="priority must be an integer from"):
        dispatch_for("q", None, -(10**20))
    with pytest.raises(BadInputError, match="start_at"):
        dispatch_for("q", None, 0, 1e300)
