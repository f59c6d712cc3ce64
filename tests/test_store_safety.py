"""Nothing lost (issue 35): writers refuse a store a reader found damaged, a missing store is
never recreated silently, gc never races a run, doctor sees every stored value, a damaged last
event is refused by every reader, numbers and OS errors are one-line errors, offloaded values
are listed, and OTEL_* without the SDK leaves tracing off with a warning.

The CLI runs in this process (its one error boundary, :func:`torpor.cli.main`); the faults are
real: bytes written into the database file, files and rows deleted, SQLite's own read-only and
full-disk errors."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

import torpor
from torpor import retention
from torpor.artifacts import ArtifactStore
from torpor.cli import main
from torpor.errors import StoreError

BIG = 300_000  # a step result over TORPOR_INLINE_VALUE_BYTES (256 KiB): offloaded


@torpor.workflow(name="safety.steps", version="1")
def steps(run: torpor.Run, n: int) -> int:
    for i in range(n):
        run.step(f"s{i}", lambda i=i: {"i": i, "pad": "x" * 200})
    return n


@torpor.workflow(name="safety.wait", version="1")
def waits(run: torpor.Run, _: Any) -> Any:
    return run.wait_for("go")


@torpor.workflow(name="safety.big", version="1")
def big(run: torpor.Run, n: int) -> int:
    total = 0
    for i in range(n):
        total += len(run.step(f"fetch{i}", lambda i=i: str(i) * BIG))
    return total


@torpor.workflow(name="safety.state", version="1")
def state_flow(run: torpor.Run, finish: bool) -> Any:
    run.checkpoint({"big": "q" * 40_000})  # one chunk, the same for every run
    return "done" if finish else run.wait_for("go")


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def _one_line(err: str, *fragments: str) -> None:
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for f in fragments:
        assert f in err, (f, err)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def base_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of 60 steps and a waiting run, the WAL folded into the file."""
    path = tmp_path_factory.mktemp("base") / "base.db"
    with torpor.Runtime(f"sqlite:///{path}") as rt:
        assert rt.run(steps, 60, run_id="r1").outcome == "succeeded"
        assert rt.run(waits, None, run_id="w").status == "waiting"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def _damaged(base: Path, folder: Path) -> Path:
    """A copy of ``base`` with random bytes over the first leaf page of the events table: the
    history of r1 is damaged, the run rows (what ``ls`` and ``start`` touch) are not."""
    conn = sqlite3.connect(base)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        leaf = conn.execute(
            "SELECT min(pageno) FROM dbstat WHERE name = 'events' AND pagetype = 'leaf'"
        ).fetchone()[0]
    finally:
        conn.close()
    path = folder / "damaged.db"
    shutil.copy(base, path)
    with open(path, "r+b") as f:
        f.seek((leaf - 1) * page_size)
        f.write(random.Random(7).randbytes(page_size))
    return path


# ------------------------------------------------------------------ item 1: damaged stores


def test_writers_refuse_a_store_a_reader_found_damaged(
    base_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _damaged(base_store, tmp_path)
    url = f"sqlite:///{path}"
    assert _cli(capsys, "--db", url, "ls")[0] == 0  # the run rows are sound
    code, _, err = _cli(capsys, "--db", url, "events", "r1")  # the history is not
    _one_line(err, "is damaged", "torpor doctor")
    assert code == 1 and Path(f"{path}-damaged").is_file()
    before = _digest(path)
    for cmd in (
        ["signal", "w", "go"],
        ["resume", "w"],
        ["start", "safety.wait", "--run-id", "new"],
        ["worker", "--until-idle"],
        ["cancel", "w"],
        ["gc", "--grace", "0", "--force"],
    ):
        code, _, err = _cli(capsys, "--db", url, *cmd)
        assert code == 1, (cmd, err)
        _one_line(err, "was found damaged", "nothing is written", "torpor doctor")
    assert _digest(path) == before
    code, out, _ = _cli(capsys, "--db", url, "doctor")
    assert code == 1 and "PROBLEM damage marker" in out and "Restore it from a copy" in out, out
    assert ".recover" in out, out
    # The marker goes only once the file is sound: not now, and after restoring a copy, yes.
    code, _, err = _cli(capsys, "--db", url, "doctor", "--clear-damaged")
    assert code == 2 and "still damaged" in err and Path(f"{path}-damaged").exists(), err
    shutil.copy(base_store, path)
    for side in ("-wal", "-shm"):
        Path(f"{path}{side}").unlink(missing_ok=True)
    code, out, _ = _cli(capsys, "--db", url, "doctor")
    assert code == 1 and "checks sound now" in out and "--clear-damaged" in out, out
    code, out, _ = _cli(capsys, "--db", url, "doctor", "--clear-damaged")
    assert code == 0 and "removed" in out and not Path(f"{path}-damaged").exists(), out
    assert _cli(capsys, "--db", url, "signal", "w", "go")[0] == 0


def test_a_running_execution_stops_before_its_next_effect_once_the_store_is_marked(
    tmp_path: Path,
) -> None:
    """A worker already running when a reader finds the store damaged: it stops before its
    next effect (checked where a deleted or replaced file is)."""
    from torpor.errors import StoreFoundDamagedError
    from torpor.store import damage

    path = tmp_path / "live.db"
    calls: list[int] = []

    def send(n: int) -> int:
        calls.append(n)
        if n == 2:
            damage.mark(str(path), "found by another process")
        return n

    @torpor.workflow(name="safety.effects")
    def effects(run: torpor.Run, _: Any) -> None:
        for n in range(1, 5):
            run.effect(f"send{n}", send, n)

    rt = torpor.Runtime(f"sqlite:///{path}")
    try:
        with pytest.raises(StoreFoundDamagedError, match="found damaged while in use"):
            rt.run(effects, None, run_id="e")
    finally:
        rt.close()
    assert calls == [1, 2]


@pytest.mark.parametrize(
    "cmd",
    [
        ["gc", "--grace", "0", "--force"],
        ["gc", "--vacuum"],
        ["retention", "safety.steps", "--last", "0"],
    ],
)
def test_destructive_commands_run_a_quick_check_first(
    base_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], cmd: list[str]
) -> None:
    """No reader has looked yet (no marker): the command's own quick check finds the damage,
    refuses with the file untouched, and marks the store for the writers after it."""
    path = _damaged(base_store, tmp_path)
    url = f"sqlite:///{path}"
    before = _digest(path)
    code, _, err = _cli(capsys, "--db", url, *cmd)
    assert code == 1, err
    _one_line(err, "quick_check", "was found damaged")
    assert _digest(path) == before and Path(f"{path}-damaged").is_file()
    code, _, err = _cli(capsys, "--db", url, "signal", "w", "go")
    assert code == 1 and "was found damaged" in err, err


def test_archive_restore_checks_the_store_and_refuses_a_deep_file(
    base_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"format": "torpor-run-archive/1", "run": ' + "[" * 200_000 + "]" * 200_000)
    sound = tmp_path / "sound.db"
    shutil.copy(base_store, sound)
    code, _, err = _cli(capsys, "--db", f"sqlite:///{sound}", "archive", "restore", str(deep))
    assert code == 1, err
    _one_line(err, str(deep), "nested too deeply")
    path = _damaged(base_store, tmp_path)
    code, _, err = _cli(capsys, "--db", f"sqlite:///{path}", "archive", "restore", str(deep))
    assert code == 1, err
    _one_line(err, "was found damaged")


# ------------------------------------------------------------------ item 2: a missing store


def _drop_store(store_url: str) -> None:
    """Delete the store as a person would: the SQLite files, or every table of the schema."""
    if store_url.startswith("sqlite:"):
        path = store_url.split("://", 1)[1][1:]
        for side in ("", "-wal", "-shm"):
            Path(f"{path}{side}").unlink(missing_ok=True)
        return
    import psycopg

    with psycopg.connect(store_url, autocommit=True) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()
        assert schema is not None and schema[0].startswith("t_")
        conn.execute(f'DROP SCHEMA "{schema[0]}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{schema[0]}"')


def _store_exists(store_url: str) -> bool:
    if store_url.startswith("sqlite:"):
        return Path(store_url.split("://", 1)[1][1:]).exists()
    import psycopg

    with psycopg.connect(store_url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass('torpor_schema')").fetchone()
    return row is not None and row[0] is not None


def test_a_missing_store_is_named_never_recreated(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with torpor.Runtime(store_url) as rt:
        assert rt.run(waits, None, run_id="w").status == "waiting"
    _drop_store(store_url)
    for cmd in (
        ["signal", "w", "go"],
        ["resume", "w"],
        ["cancel", "w"],
        ["worker", "--until-idle"],
        ["gc", "--dry-run"],
        ["doctor"],
    ):
        code, out, err = _cli(capsys, "--db", store_url, *cmd)
        assert code == 1, (cmd, out, err)
        if cmd != ["doctor"]:
            _one_line(err, "no torpor store", "nothing was created")
        else:  # doctor names what creates a store, as every other command does
            assert "init` creates a store" in out, out
        assert not _store_exists(store_url), cmd
    # What starts a run creates one; so does init. This host pinned the dropped store's
    # identity at that place (issue 33's high-water mark), so the new store is named as
    # recreated and runs nothing until a person accepts it.
    code, _, err = _cli(capsys, "--db", store_url, "start", "safety.wait", "--run-id", "n")
    assert code == 1 and "recreated or replaced" in err and _store_exists(store_url), err
    code, _, err = _cli(capsys, "--db", store_url, "store", "accept-restore", "--as", "tester")
    assert code == 0, err
    code, _, err = _cli(capsys, "--db", store_url, "resume", "n")
    assert code == 0, err
    _drop_store(store_url)
    code, out, err = _cli(capsys, "--db", store_url, "init")
    assert code == 0 and "created" in out and _store_exists(store_url), (out, err)
    assert _cli(capsys, "--db", store_url, "init")[1].count("existed") == 1


def test_a_bad_option_value_is_one_line_in_plain_words(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value Typer's parameter check refuses: one line, without the validation library's
    "Value error, " prefix (a new user's trial found it)."""
    assert _cli(capsys, "--db", db_url, "init")[0] == 0
    code, _, err = _cli(capsys, "--db", db_url, "ls", "--status", "bogus")
    assert code == 2, err
    _one_line(err, "'--status'", "'bogus' is not one of")
    assert "Value error" not in err


# ------------------------------------------------------------------ item 3: gc never races


def test_gc_with_no_grace_at_the_worst_instant_keeps_a_running_runs_values(
    store_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every offloaded result is written, then a collection pass with no grace runs (from
    another store handle: another process's view) before the step records it: none is
    collected, the run resumes and doctor finds every value."""
    put = ArtifactStore.put
    passes: list[int] = []
    other = torpor.Runtime(store_url)

    def put_then_collect(self: ArtifactStore, data: bytes) -> str:
        digest = put(self, data)
        passes.append(retention.collect(other.store, other.artifacts, grace_s=0).artifacts)
        return digest

    monkeypatch.setattr(ArtifactStore, "put", put_then_collect)
    try:
        with torpor.Runtime(store_url) as rt:
            res = rt.run(big, 3, run_id="b")
            assert res.result == 3 * BIG, res
    finally:
        other.close()
    monkeypatch.setattr(ArtifactStore, "put", put)
    assert passes == [0, 0, 0]
    code, _, err = _cli(capsys, "--db", store_url, "gc", "--grace", "0", "--force")
    assert code == 0, err
    with torpor.Runtime(store_url) as rt:
        assert rt.resume("b").result == 3 * BIG
        assert rt.store.load("b").outcome is not None
    code, out, _ = _cli(capsys, "--db", store_url, "doctor", "--deep")
    assert code == 0 and "3 references of runs, 0 with problems" in out.replace("\n", " "), out


def test_a_chunk_another_run_used_is_written_again_for_a_new_run(store_url: str) -> None:
    """A finished run's chunk collected with no grace; the same process then records the same
    content for a new run: the chunk comes with the new reference."""
    with torpor.Runtime(store_url) as rt:
        assert rt.run(state_flow, True, run_id="a").outcome == "succeeded"
        retention.set_policy(rt.store, "safety.state", keep_last=0)
        rep = retention.collect(rt.store, rt.artifacts, grace_s=0)
        assert rep.runs == ["a"] and rep.chunks >= 1
        assert rt.run(state_flow, False, run_id="b").status == "waiting"
        assert retention.collect(rt.store, rt.artifacts, grace_s=0).chunks == 0
    with torpor.Runtime(store_url) as rt:
        assert rt.store.load("b").user_state == {"big": "q" * 40_000}


def test_a_grace_below_the_floor_needs_force(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    torpor.Runtime(db_url).close()
    code, _, err = _cli(capsys, "--db", db_url, "gc", "--grace", "10")
    assert code == 2, err
    _one_line(err, "below 300 seconds", "--force")
    assert _cli(capsys, "--db", db_url, "gc", "--grace", "10", "--force")[0] == 0
    assert _cli(capsys, "--db", db_url, "gc", "--grace", "10", "--dry-run")[0] == 0


# ------------------------------------------------------------------ item 4: doctor's values


def _sql(store_url: str, sql: str) -> None:
    from torpor.store import open_store

    store = open_store(store_url)
    try:
        with store.driver.transaction() as cur:
            store.driver.execute(cur, sql, {})
    finally:
        store.close()


def test_doctor_names_missing_and_altered_stored_values(
    store_url: str, torpor_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with torpor.Runtime(store_url) as rt:
        assert rt.run(big, 1, run_id="b").outcome == "succeeded"
        assert rt.run(state_flow, False, run_id="s").status == "waiting"
    (file,) = (torpor_home / "artifacts" / "sha256").glob("*/*")
    blob = file.name
    code, out, _ = _cli(capsys, "--db", store_url, "doctor", "--deep")
    assert code == 0 and "0 with problems; hash-checked" in out, out
    data = file.read_bytes()
    file.write_bytes(data[:-1] + b"!")  # altered: found by --deep only
    assert _cli(capsys, "--db", store_url, "doctor")[0] == 0
    code, out, _ = _cli(capsys, "--db", store_url, "doctor", "--deep")
    assert code == 1 and f"run b: artifact sha256:{blob}" in out and "does not match" in out, out
    file.unlink()  # missing: found without --deep
    code, out, _ = _cli(capsys, "--db", store_url, "doctor")
    assert code == 1 and f"run b: artifact sha256:{blob} is missing" in out, out
    file.write_bytes(data)
    _sql(store_url, "DELETE FROM chunks")  # the waiting run's checkpoint state
    code, out, _ = _cli(capsys, "--db", store_url, "doctor")
    assert code == 1 and "run s: chunk sha256:" in out and "missing" in out, out


# ------------------------------------------------------------------ item 5: a bogus last event


def test_a_bogus_last_event_is_refused_by_show_and_resume_alike(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with torpor.Runtime(store_url) as rt:
        assert rt.run(waits, None, run_id="w").status == "waiting"
    _sql(store_url, "UPDATE events SET type = 'bogus' WHERE run_id = 'w' AND seq = 4")
    errors = set()
    for cmd in (["show", "w"], ["resume", "w"], ["signal", "w", "go"]):
        code, _, err = _cli(capsys, "--db", store_url, *cmd)
        assert code == 1, (cmd, err)
        _one_line(err, "run 'w' seq 4", "bogus")
        errors.add(err)
    assert len(errors) == 1, errors  # the same refusal
    code, out, _ = _cli(capsys, "--db", store_url, "doctor")
    assert code == 1 and "run w: cannot be folded" in out, out


# ------------------------------------------------------------------ item 6: one-line errors


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["events", "w", "--limit", "99999999999999999999"], "'--limit'"),
        (["retention", "safety.steps", "--last", "9" * 30], "'--last'"),
        (["gc", "--grace", "nan"], "not a finite number"),
        (["gc", "--grace", "inf", "--dry-run"], "not a finite number"),
        (["gc", "--grace", "-inf", "--dry-run"], "not a finite number"),
    ],
)
def test_numbers_torpor_cannot_use_are_one_line_usage_errors(
    db_url: str, capsys: pytest.CaptureFixture[str], args: list[str], fragment: str
) -> None:
    with torpor.Runtime(db_url) as rt:
        assert rt.run(waits, None, run_id="w").status == "waiting"
    code, _, err = _cli(capsys, "--db", db_url, *args)
    assert code == 2, err
    _one_line(err, fragment)


@pytest.mark.parametrize(
    ("pragma", "fragment"),
    [("query_only = 1", "read-only"), ("max_page_count = 1", "disk is full")],
)
def test_read_only_and_full_disk_are_one_line_store_errors(
    db_url: str, pragma: str, fragment: str
) -> None:
    """SQLite's own errors (a read-only database, a full disk) on the store's connection:
    StoreError naming the file and what to do, never a raw sqlite3.OperationalError."""
    with torpor.Runtime(db_url) as rt:
        assert rt.run(waits, None, run_id="w").status == "waiting"
        conn = rt.store.driver.conn()  # type: ignore[attr-defined]
        if pragma.startswith("max_page_count"):
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            pragma = f"max_page_count = {pages}"
        conn.execute(f"PRAGMA {pragma}")
        client = torpor.Client(rt.store)
        with pytest.raises(StoreError) as info:
            client.signal("w", "go", {"pad": "z" * 200_000})
            rt.resume("w")
        text = str(info.value)
        assert fragment in text and "torpor.db" in text and "\n" not in text, text


# ------------------------------------------------------------------ item 7: offloaded values


def test_artifacts_and_show_list_offloaded_values(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with torpor.Runtime(db_url) as rt:
        assert rt.run(big, 2, run_id="b").outcome == "succeeded"
    code, out, _ = _cli(capsys, "--db", db_url, "artifacts", "b", "--json")
    values = [v for v in json.loads(out) if v.get("kind") == "offloaded value"]
    assert [(v["step_id"], v["field"]) for v in values] == [
        ("fetch0", "result"),
        ("fetch1", "result"),
    ]
    code, out, _ = _cli(capsys, "--db", db_url, "artifacts", "b")
    assert code == 0 and "Offloaded values" in out and "has no artifacts" not in out, out
    assert values[1]["sha256"] in out.replace("\n", "").replace(" ", "").replace("│", "")
    shown = json.loads(_cli(capsys, "--db", db_url, "show", "b", "--json")[1])
    assert [v["sha256"] for v in shown["offloaded"]] == [v["sha256"] for v in values]
    code, out, _ = _cli(capsys, "--db", db_url, "artifacts", "b", values[0]["sha256"][:12])
    assert code == 0 and json.loads(out) == "0" * BIG, out[:80]


# ------------------------------------------------------------------ item 8


def test_otel_variables_without_the_sdk_leave_tracing_off_with_one_warning(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from torpor import telemetry

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    for name in ["opentelemetry", *(m for m in sys.modules if m.startswith("opentelemetry."))]:
        monkeypatch.setitem(sys.modules, name, None)  # as if the extra were absent
    telemetry.reset()
    try:
        capsys.readouterr()
        with torpor.Runtime(db_url) as rt:
            assert rt.run(waits, None, run_id="w").status == "waiting"
        err = capsys.readouterr().err
        assert err.count("warning: OTEL_* variables") == 1 and err.count("\n") == 1, err
        assert telemetry.get() is None
    finally:
        telemetry.reset()


def test_each_command_says_which_store_it_used_at_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TORPOR_HOME", ".torpor")  # relative: the trap of issue 35
    with torpor.Runtime() as rt:
        assert rt.run(waits, None, run_id="w").status == "waiting"
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    where = str(tmp_path / ".torpor" / "torpor.db")
    for cmd in (["signal", "w", "go"], ["show", "w"], ["resume", "w"]):
        code, _, err = _cli(capsys, *cmd)
        assert code == 0 and "store: sqlite:///.torpor/torpor.db" in err and where in err, err
