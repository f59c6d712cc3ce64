"""A damaged run row (text in a number column, e.g. ``not_before_ms = 'soon'`` set with
sqlite3) is named in one line by ``ls``/``show``/``doctor`` — run and column — and a worker
logs it once and goes on serving the other runs (G10). SQLite only for the damage itself:
PostgreSQL's typed columns refuse the edit (checked below)."""

from __future__ import annotations

import logging
import sqlite3

import pytest

import torpor
from torpor.cli import main
from torpor.errors import CorruptRecordError
from torpor.worker import Worker


@torpor.workflow(name="drr.flow", version="1")
def flow(run: torpor.Run, _: object) -> str:
    return run.step("s", lambda: "ok")


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return (code, *capsys.readouterr())


def _three_runs(url: str) -> None:
    with torpor.Runtime(url) as rt:
        for rid in ("r1", "r2", "r3"):
            rt.start("drr.flow", None, run_id=rid)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("not_before_ms", "soon"),
        ("wake_at_ms", "later"),
        ("priority", "high"),
        ("lease_epoch", "x"),
    ],
)
def test_ls_show_and_doctor_name_the_run_and_column(
    db_url: str, capsys: pytest.CaptureFixture[str], column: str, value: str
) -> None:
    _three_runs(db_url)
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        conn.execute(f"UPDATE runs SET {column} = ? WHERE run_id = 'r2'", (value,))
    for cmd in (["ls"], ["show", "r2"]):
        code, out, err = _cli(capsys, "--db", db_url, *cmd)
        assert code == 1, (cmd, out, err)
        assert "Traceback" not in err
        assert f"run 'r2': column {column} of its row holds '{value}', not a number" in out + err
    code, out, err = _cli(capsys, "--db", db_url, "doctor")
    assert f"run r2: column {column} holds '{value}', not a number" in out, out
    assert code == 1 and "1 damaged run rows" in out
    code, out, err = _cli(capsys, "--db", db_url, "show", "r1")
    assert code == 0 and "r1" in out, err


def test_a_worker_logs_a_damaged_run_once_and_serves_the_others(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    _three_runs(db_url)
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE runs SET not_before_ms = 'soon' WHERE run_id = 'r2'")
    with torpor.Runtime(db_url) as rt, caplog.at_level(logging.ERROR, "torpor.worker"):
        w = Worker(rt, poll_s=0.05)
        stats = w.run(until_idle=True, max_seconds=20)
        w._next_version_scan = 0.0  # a second scan: nothing new to say
        w._note_unrunnable()
        assert stats.finished == 2 and stats.errors == 0
        assert rt.store.damaged_runs() == [("r2", "not_before_ms='soon'")]
        with pytest.raises(CorruptRecordError, match="r2"):
            rt.store.get_run("r2")
        assert rt.store.next_wake_at_ms() is None  # the damaged row is no timer
    named = [r for r in caplog.records if "r2" in r.getMessage()]
    assert len(named) == 1 and "not_before_ms" in named[0].getMessage()
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        done = conn.execute("SELECT run_id FROM runs WHERE status = 'finished' ORDER BY 1")
        assert [r[0] for r in done] == ["r1", "r3"]


def test_a_damaged_checkpoint_seq_never_ends_the_run_failed(db_url: str) -> None:
    """The append's fenced update returns the row's checkpoint_seq: text there is a
    CorruptRecordError (the append rolled back, the run left pending and backed off), not a
    ValueError that the engine would record as the run's failure."""
    _three_runs(db_url)
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE runs SET checkpoint_seq = 'zz' WHERE run_id = 'r2'")
    with torpor.Runtime(db_url) as rt:
        stats = Worker(rt, poll_s=0.05).run(until_idle=True, max_seconds=20)
    assert stats.finished == 2 and stats.errors >= 1
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        rows = dict(conn.execute("SELECT run_id, status FROM runs").fetchall())
    assert rows == {"r1": "finished", "r2": "pending", "r3": "finished"}


def test_postgresql_columns_cannot_be_damaged_so(pg_url: str) -> None:
    import psycopg

    _three_runs(pg_url)
    with torpor.Runtime(pg_url) as rt:
        assert rt.store.damaged_runs() == []
        assert {r.run_id for r in rt.store.list_runs()} == {"r1", "r2", "r3"}
    with psycopg.connect(pg_url) as conn, pytest.raises(psycopg.errors.InvalidTextRepresentation):
        conn.execute("UPDATE runs SET not_before_ms = 'soon' WHERE run_id = 'r2'")
