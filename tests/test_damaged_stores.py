"""A damaged or vanished SQLite store is refused loudly (issue 16, item 2; G10).

- 4 KB of random bytes in the middle of a store: every command either shows the whole history
  or stops with one line naming the file and ``torpor doctor`` — never a traceback, never part
  of the history with exit 0; ``torpor doctor`` reports what is wrong.
- The file deleted or replaced while a run performs effects: the run stops before its next
  effect (and a heartbeat renewal notices it between steps).
- Read-only commands never create a store or a key, say which store they read, and open a
  store in a folder they cannot write immutable, with a warning.

SQLite only: these are properties of a database file (PostgreSQL's own storage is the
server's)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

import torpor
from torpor.cli import main
from torpor.errors import StoreFileChangedError, StoreMissingError
from torpor.store import open_store

STEPS = 150  # 150 steps: 153 events, a ~100 KB file


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def sound_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding one finished run of STEPS steps, its WAL folded into the file."""
    path = tmp_path_factory.mktemp("sound") / "base.db"
    rt = torpor.Runtime(f"sqlite:///{path}")

    @torpor.workflow(name="damage.steps")
    def steps(run: torpor.Run, _: Any) -> int:
        for i in range(STEPS):
            run.step(f"s{i}", lambda i=i: {"i": i, "pad": "x" * 200})
        return STEPS

    try:
        assert rt.run(steps, None, run_id="r1").outcome == "succeeded"
    finally:
        rt.close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def _damaged_copy(base: Path, folder: Path, seed: int) -> Path:
    rng = random.Random(seed)
    path = folder / f"damaged-{seed}.db"
    shutil.copy(base, path)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(rng.randrange(4096, size - 4096))
        f.write(rng.randbytes(4096))
    return path


def test_random_bytes_in_a_store_give_one_line_never_part_of_the_history(
    sound_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refused: dict[str, int] = {}
    # Seeds 0 and 10 lost the tail of the history silently before; 24 seeds, as the file holds
    # more tables than the history's (ledger, vectors, scopes) and fewer bytes land on it.
    for seed in range(24):
        path = _damaged_copy(sound_store, tmp_path, seed)
        url = f"sqlite:///{path}"
        for cmd in (["events", "r1", "--json", "--limit", "1000"], ["show", "r1", "--json"]):
            code, out, err = _cli(capsys, "--db", url, *cmd)
            assert "Traceback" not in err, (seed, cmd, err)
            if code == 0:
                if cmd[0] == "events":
                    assert [e["seq"] for e in json.loads(out)] == list(range(1, STEPS + 4))
                else:
                    assert json.loads(out)["outcome"] == "succeeded"
                continue
            assert err.startswith("error: ") and err.count("\n") == 1, (seed, cmd, err)
            assert "torpor doctor" in err, (seed, cmd, err)
            assert str(path) in err or "missing from its history" in err, (seed, cmd, err)
            kind = "hole" if "missing from its history" in err else "damaged"
            refused[kind] = refused.get(kind, 0) + 1
        code, out, _ = _cli(capsys, "--db", url, "doctor")
        assert code == 1 and "PROBLEM integrity check" in out, (seed, out)
    # Whether random bytes make SQLite refuse a page or skip rows depends on the file's layout
    # (auto_vacuum's pointer-map pages, chunk rows): either way nothing partial is shown with
    # exit 0. The hole check itself is tested deterministically in test_bad_input.py.
    assert sum(refused.values()) >= 8, refused
    code, out, _ = _cli(capsys, "--db", f"sqlite:///{sound_store}", "doctor")
    assert code == 0, out
    assert "integrity check: ok" in out and "runs: 1 read, 0 with problems" in out, out


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_store_file_deleted_or_replaced_stops_before_the_next_effect(
    tmp_path: Path, how: str
) -> None:
    path = tmp_path / "live.db"
    calls: list[int] = []

    def send(n: int) -> int:
        calls.append(n)
        if n == 3:
            if how == "deleted":
                os.remove(path)
            else:
                other = tmp_path / "other.db"
                sqlite3.connect(other).close()
                os.replace(other, path)
        return n

    @torpor.workflow(name=f"damage.effects.{how}")
    def effects(run: torpor.Run, _: Any) -> None:
        for n in range(1, 7):
            run.effect(f"send{n}", send, n)

    rt = torpor.Runtime(f"sqlite:///{path}")
    try:
        with pytest.raises(StoreFileChangedError, match=f"{path}.* was {how}"):
            rt.run(effects, None, run_id="r1")
    finally:
        rt.close()
    assert calls == [1, 2, 3]


def test_a_heartbeat_notices_a_deleted_store_between_steps(tmp_path: Path) -> None:
    path = tmp_path / "live.db"
    ran: list[str] = []

    def first() -> None:
        ran.append("first")
        os.remove(path)
        time.sleep(0.5)  # several renewals: the next one finds the file gone

    @torpor.workflow(name="damage.heartbeat")
    def flow(run: torpor.Run, _: Any) -> None:
        run.step("first", first)
        run.step("second", lambda: ran.append("second"))

    rt = torpor.Runtime(f"sqlite:///{path}", lease_ttl_s=0.3, heartbeat_s=0.1)
    try:
        with pytest.raises(StoreFileChangedError, match="deleted"):
            rt.run(flow, None, run_id="r1")
    finally:
        rt.close()
    assert ran == ["first"]


def test_a_worker_stops_when_its_store_file_is_deleted(tmp_path: Path) -> None:
    from torpor.worker import Worker

    path = tmp_path / "live.db"
    rt = torpor.Runtime(f"sqlite:///{path}")
    try:
        os.remove(path)
        # It stops by raising; run out of time instead, it would return (max_seconds is a
        # hang guard, generous for a loaded machine).
        with pytest.raises(StoreFileChangedError, match="deleted"):
            Worker(rt, poll_s=0.05).run(max_seconds=120)
    finally:
        rt.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_read_only_commands_never_create_a_store_or_a_key(
    sound_store: Path,
    tmp_path: Path,
    torpor_home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TORPOR_SIGNING_KEY")
    missing = tmp_path / "typo" / "torpor.db"
    read_only = (["ls"], ["show", "r1"], ["events", "r1"], ["artifacts", "r1"], ["doctor"])
    for cmd in (*read_only, ["context", "r1"]):
        code, out, err = _cli(capsys, "--db", f"sqlite:///{missing}", *cmd)
        assert code == 1, (cmd, out, err)
        assert str(missing) in out + err, (cmd, out, err)
        assert "Traceback" not in err
    assert not missing.parent.exists()
    assert not torpor_home.exists() or not list(torpor_home.rglob("*"))
    with pytest.raises(StoreMissingError, match="no torpor store at"):
        open_store(f"sqlite:///{missing}", read_only=True)

    # An existing store: read without a byte written, and ls says which store it read.
    store = tmp_path / "copy.db"
    shutil.copy(sound_store, store)
    before = _digest(store)
    url = f"sqlite:///{store}"
    code, out, err = _cli(capsys, "--db", url, "ls")
    assert code == 0 and "r1" in out and f"store: {url}" in err, (out, err)
    for cmd in (["show", "r1"], ["events", "r1"], ["artifacts", "r1"], ["doctor"]):
        assert _cli(capsys, "--db", url, *cmd)[0] == 0, cmd
    assert _digest(store) == before
    assert not (torpor_home / "signing.key").exists()


def test_a_store_in_a_folder_that_cannot_be_written_is_read_immutable(
    sound_store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # (The tests may run as root, for whom every folder is writable: os.access says not.)
    folder = str(sound_store.parent)
    real = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda p, mode, **kw: False if str(p) == folder else real(p, mode, **kw),
    )
    store = open_store(f"sqlite:///{sound_store}", read_only=True)
    try:
        assert store.driver.mode == "immutable"  # type: ignore[attr-defined]
        assert [r.run_id for r in store.list_runs()] == ["r1"]
    finally:
        store.close()
    code, out, err = _cli(capsys, "--db", f"sqlite:///{sound_store}", "ls")
    assert code == 0 and "r1" in out, (out, err)
    assert "not writable" in err and "not seen" in err, err


@pytest.mark.proc
def test_the_readme_snippets_run_as_written(tmp_path: Path) -> None:
    """The README's section on things going wrong: ``fenced.py`` and ``torpor doctor``."""
    import re
    import subprocess
    import sys

    from conftest import ROOT

    text = (ROOT / "README.md").read_text()
    section = text[text.index("## When things go wrong") :]
    code = re.search(r"```python\n(# fenced\.py\n.*?)```", section, re.S)
    assert code is not None
    (tmp_path / "fenced.py").write_text(code.group(1))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.pop("TORPOR_HOME")
    run = subprocess.run(
        [sys.executable, "fenced.py"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert run.stdout == "charged 5\n", run.stderr
    doctor = subprocess.run(
        [sys.executable, "-m", "torpor.cli", "doctor"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert doctor.returncode == 0 and "runs: 1 read, 0 with problems" in doctor.stdout, doctor


def test_read_only_commands_create_nothing_in_postgresql(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same rule on PostgreSQL: an empty schema stays empty."""
    import psycopg

    for cmd in (["ls"], ["show", "r1"], ["events", "r1"], ["doctor"], ["context", "r1"]):
        code, out, err = _cli(capsys, "--db", pg_url, *cmd)
        assert code == 1 and "no torpor store in" in out + err, (cmd, out, err)
        assert "nothing was created" in out + err
    with psycopg.connect(pg_url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchone()
    assert tables == (0,)
    open_store(pg_url).close()  # a writing open creates it; then the readers read it
    code, out, err = _cli(capsys, "--db", pg_url, "ls")
    assert code == 0 and "no runs" in out and "store: postgresql://" in err, (out, err)
