"""Every stall says why, where people look (issue 36, items 3 and 4; G11): a live-looking lease
says what happens if its holder is not responding (field card C05), and a store connection
lost while a run executes leaves a trace on the run (C23), in ``show`` and the console's run
summary alike (one report: :mod:`torpor.report.run`)."""

from __future__ import annotations

import threading
import time
from typing import Any

import torpor
from conftest import HANG_S
from torpor import faults
from torpor.history import RunStarted
from torpor.report.run import gather

ENTERED = threading.Event()
RELEASE = threading.Event()


def _hold() -> str:
    ENTERED.set()
    RELEASE.wait(HANG_S)
    return "done"


@torpor.workflow("honest.hold")
def hold(run: torpor.Run, _: Any) -> str:
    return str(run.step("hold", _hold))


def test_a_live_looking_lease_says_what_happens_next(store_url: str) -> None:
    client = torpor.Client(store_url)
    try:
        client.store.create_run("held", RunStarted(workflow="honest.hold", version="1"))
        client.store.acquire_lease("held", "elsewhere:1:x", 600)
        live = gather(client, "held").summary
        assert "(leased) by elsewhere:1:x; a live holder renews it" in live.lease
        assert "if it is not responding, the lease expires in" in live.lease
        left = int(live.lease.split("expires in ")[1].split(" s")[0])
        assert 0 < left <= 600
        assert "`torpor resume --wait held` takes the run over then" in live.lease
    finally:
        client.close()


def test_a_lost_store_connection_during_a_run_leaves_a_trace(store_url: str) -> None:
    ENTERED.clear()
    RELEASE.clear()
    rt = torpor.Runtime(store_url, lease_ttl_s=1.5)
    out: list[Any] = []
    try:
        faults.install("break:lease.renewing@1")  # the first renewal meets a dead connection
        rid = rt.start("honest.hold")
        t = threading.Thread(target=lambda: out.append(rt.execute(rid)), daemon=True)
        t.start()
        assert ENTERED.wait(HANG_S)
        first = rt.store.get_run(rid).lease_expires_at_ms
        deadline = time.monotonic() + HANG_S
        # A later renewal went through (the first one broke): the store answers again.
        while rt.store.get_run(rid).lease_expires_at_ms <= first:
            assert time.monotonic() < deadline, "hang guard: no renewal went through"
            time.sleep(0.05)
        RELEASE.set()
        t.join(HANG_S)
        assert out and out[0].outcome == "succeeded", out
    finally:
        RELEASE.set()
        faults.reset()
    try:
        client = torpor.Client(rt.store)
        assert rt.store.get_run(rid).infra_retries == 1
        live = gather(client, rid).summary
        assert live.infra.startswith("1 incident(s) with the store's connection")
    finally:
        rt.close()


def test_a_failing_mark_advance_after_a_renewal_is_no_store_incident(
    store_url: str, monkeypatch: Any
) -> None:
    """The hook run after each renewal is this host's bookkeeping (the high-water mark, G16):
    when it raises, the renewal itself went through, so nothing is counted as an incident with
    the store's connection and the run goes on (it used to share the renewal's ``except``)."""
    from torpor.engine.highwater import HighWater

    ENTERED.clear()
    RELEASE.clear()
    calls: list[int] = []

    advance_really = HighWater.advance

    def advance(self: HighWater, run_id: str, seq: int) -> None:
        if not threading.current_thread().name.startswith("lease-"):
            return advance_really(self, run_id, seq)
        calls.append(seq)  # the heartbeat's call after a renewal
        raise OSError("no space left on device (the mark's folder)")

    monkeypatch.setattr(HighWater, "advance", advance)
    rt = torpor.Runtime(store_url, lease_ttl_s=1.5)
    out: list[Any] = []
    try:
        rid = rt.start("honest.hold")
        t = threading.Thread(target=lambda: out.append(rt.execute(rid)), daemon=True)
        t.start()
        assert ENTERED.wait(HANG_S)
        deadline = time.monotonic() + HANG_S
        while len(calls) < 3:  # two renewals after a failing advance went through
            assert time.monotonic() < deadline, "hang guard: no renewal reached the hook"
            time.sleep(0.05)
        RELEASE.set()
        t.join(HANG_S)
        assert out and out[0].outcome == "succeeded", out
        assert rt.store.get_run(rid).infra_retries == 0
    finally:
        RELEASE.set()
        rt.close()


@torpor.workflow("honest.gate")
def gate(run: torpor.Run, _: Any) -> Any:
    return run.wait_for("go")


def test_the_worker_summary_counts_runs_not_executions(db_url: str) -> None:
    """Issue 36 item 7: a run that waited, then succeeded, is not "waiting" in the worker's
    summary (before: one count per execution, "waiting 1" after the only run succeeded)."""
    from torpor.worker import Worker

    with torpor.Runtime(db_url) as rt:
        rid = rt.start("honest.gate")
        w = Worker(rt, concurrency=1, poll_s=0.05)
        w.run(until_idle=True)
        assert rt.store.get_run(rid).status == "waiting"
        assert (w.stats.runs, w.stats.waiting) == (1, 1)
        torpor.Client(rt.store).signal(rid, "go", 1)
        stats = w.run(until_idle=True)
    assert stats.executed == 2 and stats.runs == 1
    assert stats.finished == 1 and stats.outcomes == {"succeeded": 1}
    assert stats.waiting == 0


def test_a_bare_word_as_json_input_gets_a_quoting_hint() -> None:
    import pytest

    from torpor.cli.context import parse_json
    from torpor.errors import BadInputError

    with pytest.raises(BadInputError) as bare:
        parse_json("--input", "world")
    assert """a string must be JSON-quoted: --input '"world"'""" in str(bare.value)
    with pytest.raises(BadInputError) as broken:
        parse_json("--input", '{"a": ')
    assert "JSON-quoted" not in str(broken.value)  # not a bare word: no such hint
    assert parse_json("--input", '"world"') == "world"


def test_help_text_is_reflowed_not_broken_where_the_source_was() -> None:
    """Issue 36 item 7: ``--help`` kept the docstring's line breaks, so at 80 columns every
    other line was a stub ("evidence, effects")."""
    from typer.testing import CliRunner

    from torpor.cli import app

    out = CliRunner().invoke(app, ["show", "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    start = next(i for i, line in enumerate(lines) if "The four answers" in line)
    para = []
    for line in lines[start:]:
        if not line.strip():
            break
        para.append(line.strip())
    assert len(para) >= 3
    stubs = [line for line in para[:-1] if len(line) < 50]  # every line but the last is full
    assert stubs == [], para


def test_the_otel_sdks_export_failures_are_one_line_each() -> None:
    """Issue 36 item 7: with the collector down, the SDK logged each failed export with a
    traceback; through torpor's filter each is one line naming what failed and why."""
    import io
    import logging

    from torpor.telemetry.quiet import LOGGERS, one_line

    one_line()
    one_line()  # idempotent
    logger = logging.getLogger(LOGGERS[0])
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    try:
        try:
            raise ConnectionError(
                "HTTPConnectionPool(host='localhost', port=4318): Max retries exceeded\n"
                "(Caused by NewConnectionError: Connection refused)"
            )
        except ConnectionError:
            logger.exception("Exception while exporting %s.", "Span")
    finally:
        logger.removeHandler(handler)
    out = sink.getvalue()
    assert out.count("\n") == 1, out
    assert "Exception while exporting Span.: ConnectionError: HTTPConnectionPool" in out
    assert "Traceback" not in out


def test_a_postgres_outage_under_a_running_step_is_noted(pg_url: str) -> None:
    """Field card C23 on the real server: while a step runs, the executing process's
    connections are terminated and its database refuses new ones (``ALLOW_CONNECTIONS
    false``), so its lease renewals fail; once connections are allowed again, its heartbeat
    reconnects and the run's row counts the incident — before the step even returns (before:
    no trace anywhere). A reader that stayed connected watches."""
    import psycopg

    ENTERED.clear()
    RELEASE.clear()
    tag = "torpor-i36-outage"
    rt = torpor.Runtime(f"{pg_url}&application_name={tag}", lease_ttl_s=1.5)
    reader = torpor.Client(pg_url)
    base = pg_url.split("?", 1)[0]
    dbname = base.rsplit("/", 1)[1]
    server = base.rsplit("/", 1)[0] + "/postgres"
    out: list[Any] = []

    def allow(yes: bool) -> None:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS {str(yes).lower()}')
            if not yes:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (tag,),
                )

    try:
        rid = rt.start("honest.hold")
        t = threading.Thread(target=lambda: out.append(rt.execute(rid)), daemon=True)
        t.start()
        assert ENTERED.wait(HANG_S)
        assert reader.get(rid).infra_retries == 0
        allow(False)
        try:
            deadline = time.monotonic() + HANG_S
            # The lease runs out: its renewals are failing.
            while reader.get(rid).lease_expires_at_ms > reader.store.now_ms():
                assert time.monotonic() < deadline, "hang guard: the lease was still renewed"
                time.sleep(0.05)
        finally:
            allow(True)
        deadline = time.monotonic() + HANG_S
        while reader.get(rid).infra_retries < 1:  # noted by the heartbeat, the step still held
            assert time.monotonic() < deadline, "hang guard: the outage left no trace"
            time.sleep(0.05)
        assert t.is_alive() and not RELEASE.is_set()
        RELEASE.set()
        t.join(HANG_S)
        # The lease ran out meanwhile: that execution was fenced off; a resume finishes it.
        assert rt.resume(rid).outcome == "succeeded"
    finally:
        RELEASE.set()
        reader.close()
        rt.close()
