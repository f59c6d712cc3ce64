"""Record the effect fixture stores of ``tests/fixtures/legacy/`` (issue 28): runs written by the
torpor of ``--src`` (a source tree: ``git worktree add --detach /tmp/old main`` gives main's) in
every state an effect can be left in, so that the format each later change reads stays pinned.

    uv run python scripts/make_effects_fixture.py tests/fixtures/legacy --src /tmp/old \
        --name effects-v3 [--postgres postgresql://postgres@127.0.0.1:5432/postgres]

The workflows are ``tests/legacy_flows.py`` (of this tree). The runs:

- ``done`` — an effect observed, the run succeeded;
- ``sig`` / ``sleepy`` / ``appr`` — waiting (signal, timer, approval) before an effect;
- ``called`` — SIGKILLed right after the effect's call returned (``effect.called``): intended,
  not observed, and the world has it (reconciled ``applied`` on resume);
- ``intended`` — SIGKILLed right after the intent committed (``effect.intended``): intended,
  never called (reconciled ``absent`` on resume, then performed);
- ``acked`` — the call's acknowledgement lost (``ack:effect.called``): reconciled ``applied``
  on the error path, finished;
- ``loop`` — two effects observed, the third intended and called, then SIGKILLed;
- ``unres`` — an effect reconciled ``unknown``: unresolved.

Writes ``<name>.sqlite`` and, with ``--postgres``, ``<name>-postgres.json`` (every row of every
non-empty table of a schema of its own; ``bytes`` as ``{"$hex": ...}``), which the test loads
into a fresh schema created by the migrations the dump records as applied; and the outside
world each recording left (``<name>[-postgres]-ledger.jsonl``: the effects that reached it).
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

CASES = """
import sys
sys.path[:0] = [{tests!r}, {src!r}]
import torpor, legacy_flows
rt = torpor.Runtime({url!r})
print(rt.run("legacy.done", 4, run_id="done"))
print(rt.run("legacy.signal", "alice", run_id="sig"))
print(rt.run("legacy.sleep", 1.0, run_id="sleepy", follow_timers=False))
print(rt.run("legacy.approval", "hello world", run_id="appr"))
print(rt.run("legacy.unresolved", 7, run_id="unres"))
"""

ONE = """
import sys
sys.path[:0] = [{tests!r}, {src!r}]
import torpor, legacy_flows
print(torpor.Runtime({url!r}).run({workflow!r}, {input!r}, run_id={run_id!r}))
"""

FAULTED = (
    ("legacy.crashed", 5, "called", "crash:effect.called", -9),
    ("legacy.crashed", 6, "intended", "crash:effect.intended", -9),
    ("legacy.crashed", 7, "acked", "ack:effect.called", 0),
    ("legacy.loop", 4, "loop", "crash:effect.called@3", -9),
)


def _run(code: str, env: dict[str, str], faults: str | None = None, rc: int = 0) -> None:
    e = dict(env)
    if faults:
        e["TORPOR_FAULTS"] = faults
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True)
    print(p.stdout, p.stderr, sep="", end="")
    if p.returncode != rc:
        raise SystemExit(f"recording failed: exit {p.returncode}, expected {rc} ({faults})")


def record(url: str, home: Path, src: Path) -> None:
    env = {**os.environ, "TORPOR_HOME": str(home), "TORPOR_SIGNING_KEY": "test-signing-key"}
    for k in ("TORPOR_DATABASE_URL", "TORPOR_FAULTS", "TORPOR_CRASH_AT"):
        env.pop(k, None)
    paths = {"tests": str(ROOT / "tests"), "src": str(src / "src"), "url": url}
    _run(CASES.format(**paths), env)
    for workflow, inp, run_id, faults, rc in FAULTED:
        code = ONE.format(**paths, workflow=workflow, input=inp, run_id=run_id)
        _run(code, env, faults, rc)


def _plain(v: object) -> object:
    return {"$hex": v.hex()} if isinstance(v, (bytes, memoryview)) and not isinstance(v, str) else v


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--src", type=Path, default=ROOT, help="the torpor source tree to record with")
    ap.add_argument("--name", default="effects-v3")
    ap.add_argument("--postgres", help="a PostgreSQL server URL to record the PostgreSQL fixture")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        db = home / "torpor.db"
        record(f"sqlite:///{db}", home, args.src)
        with sqlite3.connect(db) as c:
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            c.execute("PRAGMA journal_mode = DELETE")
        shutil.copy(db, args.out / f"{args.name}.sqlite")
        shutil.copy(home / "ledger.jsonl", args.out / f"{args.name}-ledger.jsonl")
        print("wrote", args.out / f"{args.name}.sqlite")
    if args.postgres:
        import psycopg

        schema = f"fixture_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        sep = "&" if "?" in args.postgres else "?"
        url = f"{args.postgres}{sep}options={quote(f'-csearch_path={schema}')}"
        try:
            with tempfile.TemporaryDirectory() as tmp:
                record(url, Path(tmp) / "home", args.src)
                ledger = args.out / f"{args.name}-postgres-ledger.jsonl"
                shutil.copy(Path(tmp) / "home" / "ledger.jsonl", ledger)
            dump: dict[str, dict[str, list[object]]] = {}
            with psycopg.connect(url) as conn:
                tables = [
                    r[0]
                    for r in conn.execute(
                        "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1",
                        (schema,),
                    )
                ]
                for table in tables:
                    cur = conn.execute(f'SELECT * FROM "{table}" ORDER BY 1')
                    cols = [d.name for d in cur.description or ()]
                    rows = [[_plain(v) for v in r] for r in cur.fetchall()]
                    if rows:
                        dump[table] = {"columns": cols, "rows": rows}
            out = args.out / f"{args.name}-postgres.json"
            out.write_text(json.dumps(dump, indent=1, sort_keys=True) + "\n")
            print("wrote", out)
        finally:
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
