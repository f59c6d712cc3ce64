"""Record the legacy fixture databases of ``tests/fixtures/legacy/`` (run once, with the torpor
whose records they preserve; kept so the recording can be read and repeated).

    uv run python scripts/make_legacy_fixture.py tests/fixtures/legacy \
        [--postgres postgresql://postgres@127.0.0.1:5432/postgres]

Runs the workflows of ``tests/legacy_flows.py`` into every state a run can be left in — finished
(succeeded, failed, unresolved), waiting (signal, timer, approval, a signal buffered in the
inbox), and running (a process SIGKILLed right after an effect's intent) — then writes
``v1.sqlite`` (the SQLite file) and, with ``--postgres``, ``v1-postgres.json`` (every row of
every table of a schema of its own, which the test loads into a fresh schema).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
TABLES = ("torpor_schema", "runs", "events", "inbox")

CASES = """
import os, sys
sys.path[:0] = [{tests!r}, {src!r}]
import torpor, legacy_flows
url = {url!r}
rt = torpor.Runtime(url)
print(rt.run("legacy.done", 4, run_id="done"))
print(rt.run("legacy.signal", "alice", run_id="sig"))
print(rt.run("legacy.signal", "bob", run_id="sig-buffered"))
torpor.Client(rt.store).signal("sig-buffered", "go", {{"early": True}}, message_id="m-early")
print(rt.run("legacy.sleep", 1.0, run_id="sleepy", follow_timers=False))
print(rt.run("legacy.approval", "hello world", run_id="appr"))
print(rt.run("legacy.unresolved", 7, run_id="unres"))
print(rt.run("legacy.failed", 3, run_id="failed"))
"""

CRASH = """
import sys
sys.path[:0] = [{tests!r}, {src!r}]
import torpor, legacy_flows
torpor.Runtime({url!r}).run({workflow!r}, {input!r}, run_id={run_id!r})
"""


def _run(code: str, env: dict[str, str], crash_at: str | None = None) -> None:
    e = dict(env)
    if crash_at:
        e["TORPOR_CRASH_AT"] = crash_at
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True)
    print(p.stdout, p.stderr, sep="", end="")
    if crash_at is None and p.returncode != 0:
        raise SystemExit(f"recording failed ({p.returncode})")
    if crash_at is not None and p.returncode != -9:
        raise SystemExit(f"expected a SIGKILL at {crash_at}, got exit {p.returncode}")


def record(url: str, home: Path) -> None:
    env = {**os.environ, "TORPOR_HOME": str(home), "TORPOR_SIGNING_KEY": "test-signing-key"}
    env.pop("TORPOR_DATABASE_URL", None)
    paths = {"tests": str(ROOT / "tests"), "src": str(ROOT / "src"), "url": url}
    _run(CASES.format(**paths), env)
    for workflow, inp, run_id, point in (
        ("legacy.crashed", 5, "crashed", "effect.intended"),
        ("legacy.loop", 4, "loop", "effect.intended@3"),
    ):
        code = CRASH.format(**paths, workflow=workflow, input=inp, run_id=run_id)
        _run(code, env, crash_at=point)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--postgres", help="a PostgreSQL server URL to record the PostgreSQL fixture")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        db = home / "torpor.db"
        record(f"sqlite:///{db}", home)
        with sqlite3.connect(db) as c:
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            c.execute("PRAGMA journal_mode = DELETE")
        shutil.copy(db, args.out / "v1.sqlite")
        print("wrote", args.out / "v1.sqlite")
    if args.postgres:
        import psycopg

        schema = f"legacy_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        sep = "&" if "?" in args.postgres else "?"
        url = f"{args.postgres}{sep}options={quote(f'-csearch_path={schema}')}"
        try:
            with tempfile.TemporaryDirectory() as tmp:
                record(url, Path(tmp) / "home")
            dump: dict[str, dict[str, list[object]]] = {}
            with psycopg.connect(url) as conn:
                for table in TABLES:
                    cur = conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2")
                    cols = [d.name for d in cur.description or ()]
                    dump[table] = {"columns": cols, "rows": [list(r) for r in cur.fetchall()]}
            out = args.out / "v1-postgres.json"
            out.write_text(json.dumps(dump, indent=1, sort_keys=True) + "\n")
            print("wrote", out)
        finally:
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
