"""Schedules through each backend: fires at DST transitions under a FakeClock, one run per
slot across racing workers, editing replaces, catch-up policies, pause/resume, a worker
firing and executing a schedule."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import torpor
from torpor.errors import BadInputError
from torpor.schedules import Schedules, fire_due, slot_run_id
from torpor.testing import FakeClock
from torpor.worker import Worker

NY = ZoneInfo("America/New_York")


@torpor.workflow("sched_job")
def sched_job(run: torpor.Run, input: Any) -> Any:
    return run.step("work", lambda: input)


def at(*args: int, tz: ZoneInfo = NY) -> float:
    return datetime(*args, tzinfo=tz).timestamp()  # type: ignore[misc]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(at(2026, 3, 6, 12, 0))


@pytest.fixture
def rt(store_url: str, clock: FakeClock) -> Iterator[torpor.Runtime]:
    r = torpor.Runtime(store_url, clock=clock)
    yield r
    r.close()


def run_ids(rt: torpor.Runtime) -> list[str]:
    return sorted(r.run_id for r in rt.store.list_runs(limit=1000))


def test_daily_1700_new_york_across_spring_forward(rt: torpor.Runtime, clock: FakeClock) -> None:
    book = Schedules(rt.store)
    s = book.add("report", cron="0 17 * * *", tz="America/New_York", workflow="sched_job", input=7)
    assert s.next_fire == datetime(2026, 3, 6, 17, 0, tzinfo=NY)
    assert s.next_fire_ms == int(at(2026, 3, 6, 17, 0) * 1000)  # stored in UTC
    fired = []
    for _ in range(4):  # follow the schedule: jump to each next fire, a few seconds late
        nxt = book.get("report")
        assert nxt is not None
        clock.advance(nxt.next_fire_ms / 1000 - clock() + 3)
        fired += fire_due(rt)
        assert fire_due(rt) == []  # nothing more until the next slot
    assert fired == [
        "report@2026-03-06T22:00:00Z",
        "report@2026-03-07T22:00:00Z",
        "report@2026-03-08T21:00:00Z",  # EDT from the 8th: 17:00 local is 21:00 UTC
        "report@2026-03-09T21:00:00Z",
    ]
    assert run_ids(rt) == fired
    assert rt.store.load(fired[0]).input == 7


def test_daily_0230_on_spring_forward_fires_at_0330(rt: torpor.Runtime, clock: FakeClock) -> None:
    book = Schedules(rt.store)
    book.add("early", cron="30 2 * * *", tz="America/New_York", workflow="sched_job")
    clock.advance(at(2026, 3, 8, 4, 0) - clock())  # 04:00 EDT on the 8th
    assert fire_due(rt) == ["early@2026-03-08T07:30:00Z"]  # 03:30 EDT, the documented substitute
    s = book.get("early")
    assert s is not None and s.next_fire == datetime(2026, 3, 9, 2, 30, tzinfo=NY)


def test_one_run_per_slot_across_racing_workers(store_url: str, clock: FakeClock) -> None:
    """Six workers (their own stores) fire the same due slots at once: one run each."""
    setup = torpor.Runtime(store_url, clock=clock)
    Schedules(setup.store).add("tick", cron="*/5 * * * *", workflow="sched_job", catchup="all")
    clock.advance(3600)  # 12 slots due
    results: list[list[str]] = []
    barrier = threading.Barrier(6)

    def worker() -> None:
        r = torpor.Runtime(store_url, clock=clock)
        try:
            barrier.wait()
            results.append(fire_due(r))
        finally:
            r.close()

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = run_ids(setup)
    assert len(ids) == 12 and all(i.startswith("tick@") for i in ids)
    assert {i for r in results for i in r} == set(ids)
    setup.close()


def test_edit_replaces_and_never_fires_a_slot_twice(rt: torpor.Runtime, clock: FakeClock) -> None:
    book = Schedules(rt.store)
    book.add("nightly", cron="0 13 * * *", tz="America/New_York", workflow="sched_job", input=1)
    clock.advance(at(2026, 3, 6, 13, 0, 10) - clock())
    assert fire_due(rt) == ["nightly@2026-03-06T18:00:00Z"]
    # Edited right after it fired, to a definition whose slot includes that same time.
    s = book.add(
        "nightly", cron="0 13,14 * * *", tz="America/New_York", workflow="sched_job", input=2
    )
    assert s.generation == 2 and s.next_fire == datetime(2026, 3, 6, 14, 0, tzinfo=NY)
    clock.advance(at(2026, 3, 6, 14, 0, 1) - clock())
    assert fire_due(rt) == ["nightly@2026-03-06T19:00:00Z"]
    assert run_ids(rt) == ["nightly@2026-03-06T18:00:00Z", "nightly@2026-03-06T19:00:00Z"]
    assert rt.store.load("nightly@2026-03-06T19:00:00Z").input == 2
    # A worker that read the old definition cannot move the edited schedule on.
    before = book.get("nightly")
    book.add("nightly", cron="0 15 * * *", tz="America/New_York", workflow="sched_job")
    assert before is not None
    with rt.store.driver.transaction() as cur:
        n = rt.store.driver.execute(
            cur,
            rt.store.q["schedule_advance"],
            {
                "name": "nightly",
                "generation": before.generation,
                "prev_fire_ms": before.next_fire_ms,
                "next_fire_ms": 0,
                "last_fire_ms": None,
                "now_ms": 0,
            },
        )
    assert n == 0


@pytest.mark.parametrize(("policy", "expected"), [("one", 1), ("all", 3), ("skip", 0)])
def test_catch_up_after_downtime(
    rt: torpor.Runtime, clock: FakeClock, policy: str, expected: int
) -> None:
    book = Schedules(rt.store)
    book.add("daily", cron="0 9 * * *", tz="Europe/Berlin", workflow="sched_job", catchup=policy)
    clock.advance(timedelta(days=3, hours=1))  # no worker for three days
    fired = fire_due(rt)
    assert len(fired) == expected
    if policy == "one":
        assert fired == [
            slot_run_id("daily", int(at(2026, 3, 9, 9, 0, tz=ZoneInfo("Europe/Berlin")) * 1000))
        ]
    s = book.get("daily")
    assert s is not None and s.next_fire_ms > clock() * 1000
    # and on time again from then on, whatever the policy
    clock.advance(s.next_fire_ms / 1000 - clock() + 1)
    assert len(fire_due(rt)) == 1


def test_pause_resume_remove(rt: torpor.Runtime, clock: FakeClock) -> None:
    book = Schedules(rt.store)
    book.add("p", cron="@hourly", workflow="sched_job")
    assert book.pause("p").paused
    clock.advance(7200)
    assert fire_due(rt) == []
    s = book.resume("p")
    assert not s.paused and s.next_fire_ms > clock() * 1000  # the paused hours are not caught up
    assert [x.name for x in book.list()] == ["p"]
    assert book.remove("p") and not book.remove("p")
    with pytest.raises(BadInputError, match="no schedule named 'p'"):
        book.pause("p")


def test_bad_definitions_are_named(rt: torpor.Runtime) -> None:
    book = Schedules(rt.store)
    with pytest.raises(BadInputError, match="unknown time zone"):
        book.add("x", cron="0 1 * * *", tz="Nowhere/Land", workflow="sched_job")
    with pytest.raises(BadInputError, match="catch-up policy 'some'"):
        book.add("x", cron="0 1 * * *", workflow="sched_job", catchup="some")
    with pytest.raises(BadInputError, match="minute field"):
        book.add("x", cron="99 1 * * *", workflow="sched_job")
    assert book.list() == []


def test_a_worker_fires_and_executes_a_schedule(rt: torpor.Runtime, clock: FakeClock) -> None:
    Schedules(rt.store).add("w", cron="*/10 * * * *", workflow="sched_job", input="hi")
    clock.advance(601)
    stats = Worker(rt, poll_s=0.05).run(until_idle=True, max_seconds=10)
    assert stats.finished == 1
    (rid,) = run_ids(rt)
    assert rid.startswith("w@") and rt.store.get_run(rid).outcome == "succeeded"


def test_hourly_across_fall_back_fires_every_real_hour(
    rt: torpor.Runtime, clock: FakeClock
) -> None:
    """An hourly schedule through the store over the 2026-11-01 fall-back in New York: the
    repeated 01:00 fires twice (EDT, then EST), each real hour once."""
    book = Schedules(rt.store)
    clock.advance(at(2026, 10, 31, 23, 30) - clock())
    book.add("hourly", cron="0 * * * *", tz="America/New_York", workflow="sched_job")
    fired = []
    for _ in range(5):
        s = book.get("hourly")
        assert s is not None
        clock.advance(s.next_fire_ms / 1000 - clock() + 1)
        fired += fire_due(rt)
    assert fired == [
        "hourly@2026-11-01T04:00:00Z",  # 00:00 EDT
        "hourly@2026-11-01T05:00:00Z",  # 01:00 EDT
        "hourly@2026-11-01T06:00:00Z",  # 01:00 EST
        "hourly@2026-11-01T07:00:00Z",  # 02:00 EST
        "hourly@2026-11-01T08:00:00Z",
    ]


@pytest.mark.parametrize("policy, expected", [("one", 1), ("all", 3)])
def test_an_edit_keeps_the_slots_already_due(
    rt: torpor.Runtime, clock: FakeClock, policy: str, expected: int
) -> None:
    """Field card C33 (issue 36): slots came due while no worker ran; an edit then (a new
    input, say) must not drop them — they are caught up by the policy, as without the edit
    (before: the next fire was computed from now and they never fired)."""
    book = Schedules(rt.store)
    book.add("hourly", cron="0 * * * *", workflow="sched_job", input=1, catchup=policy)
    clock.advance(3 * 3600)  # three slots due, none fired
    book.add("hourly", cron="0 * * * *", workflow="sched_job", input=2, catchup=policy)
    fired = fire_due(rt)
    assert len(fired) == expected
    assert rt.store.load(fired[-1]).input == 2  # fired under the edited definition
    assert fire_due(rt) == []  # once
    s = book.get("hourly")
    assert s is not None and s.next_fire_ms > rt.store.now_ms()
