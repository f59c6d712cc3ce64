"""Schedules and queues whose rows cannot be used, on both backends (as an adversarial review
found them): a schedule that cannot be computed here records its error and backs off; a damaged
schedule, queue or run row is named in one line, skipped by workers (logged once), and
reported by ``torpor doctor``; the other schedules stay listed and fired."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import torpor
from test_cli_schedule import session
from torpor.errors import CorruptRecordError
from torpor.queues import Queues, damaged_rows, why_not_running
from torpor.schedules import SCHEDULE_RETRY_S, Schedules, fire_due, schedule_problems
from torpor.testing import FakeClock
from torpor.worker import Worker


@torpor.workflow("sd_job")
def sd_job(run: torpor.Run, input: Any) -> Any:
    return run.step("work", lambda: input)


@pytest.fixture
def rt(store_url: str) -> Iterator[torpor.Runtime]:
    clock = FakeClock(1_780_000_000.0) if store_url.startswith("sqlite") else None
    r = torpor.Runtime(store_url, clock=clock)
    yield r
    r.close()


def edit(rt: torpor.Runtime, sql: str, **params: Any) -> None:
    """Damage the store by hand, as someone with a SQL shell would."""
    with rt.store.driver.transaction() as cur:
        rt.store.driver.execute(cur, sql, params)


def add_two(rt: torpor.Runtime) -> Schedules:
    book = Schedules(rt.store)
    book.add("bad", cron="* * * * *", workflow="sd_job")
    book.add("good", cron="* * * * *", workflow="sd_job")
    edit(rt, "UPDATE schedules SET next_fire_ms = 1000")  # both long due
    return book


@pytest.mark.parametrize(
    ("column", "value", "fragment", "ok"),
    [
        ("tz", "Mars/Olympus_Mons", "unknown time zone 'Mars/Olympus_Mons'", "UTC"),
        ("cron", "61 * * * *", "61 is out of range", "* * * * *"),
    ],
)
def test_a_schedule_that_cannot_fire_records_why_and_backs_off(
    rt: torpor.Runtime,
    caplog: pytest.LogCaptureFixture,
    column: str,
    value: str,
    fragment: str,
    ok: str,
) -> None:
    book = add_two(rt)
    edit(rt, f"UPDATE schedules SET {column} = :v WHERE name = 'bad'", v=value)
    with caplog.at_level(logging.ERROR, logger="torpor.schedules"):
        fired = fire_due(rt)
        assert [f.split("@")[0] for f in fired] == ["good"]  # the other one fires
        assert fire_due(rt) == []  # not retried at once
    bad = book.get("bad")
    assert bad is not None and bad.last_error is not None and fragment in bad.last_error
    assert bad.retry_at_ms is not None and bad.next_fire_ms == 1000  # the slot is kept
    assert 0 < bad.retry_at_ms - rt.store.now_ms() <= SCHEDULE_RETRY_S * 1000
    assert len([r for r in caplog.records if "schedule bad" in r.getMessage()]) == 1
    assert [s.name for s in book.list()] == ["bad", "good"]  # still listed, error shown
    assert [what for what, _ in schedule_problems(rt.store)] == ["schedule bad"]
    # Once it can fire (a worker with the zone; the retry time come), the missed slot fires.
    edit(rt, f"UPDATE schedules SET {column} = :v, retry_at_ms = 2000 WHERE name = 'bad'", v=ok)
    assert [f.split("@")[0] for f in fire_due(rt)] == ["bad"]
    assert book.get("bad").last_error is None  # type: ignore[union-attr]


def test_a_damaged_schedule_is_skipped_named_and_reported(
    rt: torpor.Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    book = add_two(rt)
    edit(rt, "UPDATE schedules SET input = '{not json' WHERE name = 'bad'")
    with caplog.at_level(logging.ERROR, logger="torpor.schedules"):
        stats = Worker(rt, poll_s=0.02).run(until_idle=True, max_seconds=3)
    assert stats.finished == 1  # the good schedule fired and ran; the worker did not exit
    assert len([r for r in caplog.records if "schedule bad" in r.getMessage()]) == 1
    with pytest.raises(CorruptRecordError, match="schedule 'bad' is damaged: input"):
        book.list()
    ((what, detail),) = schedule_problems(rt.store)
    assert what == "schedule bad" and "damaged: input" in detail
    book.add("bad", cron="@daily", workflow="sd_job")  # an edit replaces the damaged row
    assert [s.name for s in book.list()] == ["bad", "good"] and not schedule_problems(rt.store)


def test_a_damaged_queue_row_is_named(rt: torpor.Runtime) -> None:
    if not rt.store.url.startswith("sqlite"):
        pytest.skip("PostgreSQL's typed columns refuse such an edit")
    Queues(rt.store).set("q", concurrency=1)
    rt.start("sd_job", 1, run_id="r1", queue="q")
    edit(rt, "UPDATE queues SET concurrency = 'abc'")
    with pytest.raises(CorruptRecordError, match="queue 'q' is damaged: concurrency 'abc'"):
        Queues(rt.store).list()
    with pytest.raises(CorruptRecordError, match="queue 'q' is damaged"):
        why_not_running(rt.store, "r1")
    assert damaged_rows(rt.store) == [("queue q", "queue 'q' is damaged: concurrency 'abc'")]


def test_a_damaged_run_row_is_skipped_named_and_reported(
    rt: torpor.Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    if not rt.store.url.startswith("sqlite"):
        pytest.skip("PostgreSQL's typed columns refuse such an edit")
    rt.start("sd_job", 1, run_id="r1", queue="q")
    rt.start("sd_job", 2, run_id="r2", queue="q")
    edit(rt, "UPDATE runs SET not_before_ms = 'soon' WHERE run_id = 'r2'")
    with caplog.at_level(logging.ERROR, logger="torpor.worker"):
        stats = Worker(rt, poll_s=0.02).run(until_idle=True, max_seconds=3)
    assert stats.finished == 1 and rt.store.get_run("r1").outcome == "succeeded"
    named = [r.getMessage() for r in caplog.records if "'r2' is damaged" in r.getMessage()]
    assert len(named) == 1, named
    with pytest.raises(CorruptRecordError, match="run 'r2' is damaged: not_before_ms 'soon'"):
        why_not_running(rt.store, "r2")
    assert damaged_rows(rt.store) == [("run r2", "run 'r2' is damaged: not_before_ms 'soon'")]


def test_a_schedule_that_never_comes_due_is_named_by_workers(
    rt: torpor.Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    if not rt.store.url.startswith("sqlite"):
        pytest.skip("PostgreSQL's typed columns refuse such an edit")
    Schedules(rt.store).add("s", cron="@daily", workflow="sd_job")
    rt.start("sd_job", 1, run_id="r1")
    edit(rt, "UPDATE schedules SET next_fire_ms = 'x'")
    with caplog.at_level(logging.ERROR, logger="torpor.schedules"):
        assert Worker(rt, poll_s=0.02).run(until_idle=True, max_seconds=3).finished == 1
    named = [r.getMessage() for r in caplog.records if "damaged: next_fire_ms" in r.getMessage()]
    assert len(named) == 1, named


@pytest.mark.proc
def test_cli_names_damaged_rows_and_doctor_reports_them(tmp_path: Path, db_url: str) -> None:
    rt = torpor.Runtime(db_url)
    try:
        Queues(rt.store).set("q", concurrency=1)
        rt.start("sd_job", 1, run_id="r2", queue="q")
        Schedules(rt.store).add("s", cron="@daily", workflow="sd_job")
        edit(rt, "UPDATE schedules SET next_fire_ms = 'x'")
        edit(rt, "UPDATE queues SET rate_period_ms = 'x'")
        edit(rt, "UPDATE runs SET not_before_ms = 'soon'")
    finally:
        rt.close()
    res = session(tmp_path, ["schedule", "ls"], ["queue", "ls"], ["ls"], ["show", "r2"], ["doctor"])
    for code, _out, err in res[:4]:
        assert code != 0 and err.startswith("error: ") and "damaged" in err, err
        assert len(err.splitlines()) == 1, err
    code, out, _err = res[4]
    assert code == 1, out
    for fragment in ("schedule s", "queue q", "run r2", "queues and schedules: 3 with problems"):
        assert fragment in out, out
