"""Storage against unique content (issue 22): does the database grow with new content, or with
steps?

    uv run python -m bench.storage                      # 30 runs x 300 steps, both backends
    uv run python -m bench.storage --runs 3 --steps 60  # a quick look
    uv run python -m bench.storage --backends sqlite

The shape: each run keeps a 200 KB context blob of its own in its checkpoint state plus a
message list that grows by one model turn (300-900 characters) per step; every 25th step's
turn is a 50 KB tool result. Every step is a ``run.step`` whose result is the turn, followed by
``run.checkpoint(state)``. *Unique content* is the blob plus every turn's text, counted once.

Measured: SQLite — the database file after a WAL checkpoint (``page_count * page_size``, free
pages included); PostgreSQL — ``pg_total_relation_size`` of torpor's tables (heap, TOAST,
indexes) in the run's own schema, after a plain ``VACUUM`` (as autovacuum would do). The same
workload with chunking switched off (every record stored whole, as before issue 22) runs in
the same invocation at ``--baseline-runs`` x ``--baseline-steps`` (its size grows with the
square of the steps, so it is kept small) as the baseline ratio.
"""

from __future__ import annotations

import argparse
import random
import string
import tempfile
import time
from pathlib import Path
from typing import Any

import torpor
from torpor.store import chunks

from .common import pg_schema, save, table

BLOB_CHARS = 200_000
TOOL_CHARS = 50_000
TOOL_EVERY = 25


def _text(rnd: random.Random, n: int) -> str:
    return "".join(rnd.choices(string.ascii_letters + string.digits + " ", k=n))


@torpor.workflow(name="bench.storage", version="1")
def conversation(run: torpor.Run, spec: dict[str, Any]) -> int:
    seed, steps = spec["seed"], spec["steps"]
    st = run.restore(None)
    if st is None:
        st = {"blob": _text(random.Random(seed), BLOB_CHARS), "messages": []}
    while len(st["messages"]) < steps:
        i = len(st["messages"])

        def turn(i: int = i) -> dict[str, str]:
            rnd = random.Random(seed * 100_003 + i)
            if i % TOOL_EVERY == TOOL_EVERY - 1:
                return {"role": "tool", "content": _text(rnd, TOOL_CHARS)}
            return {"role": "assistant", "content": _text(rnd, rnd.randint(300, 900))}

        st["messages"].append(run.step("turn", turn))
        run.checkpoint(st)
    return len(st["messages"])


def unique_bytes(runs: int, steps: int) -> int:
    """The blob and every turn's text, once."""
    total = runs * BLOB_CHARS
    for seed in range(runs):
        for i in range(steps):
            rnd = random.Random(seed * 100_003 + i)
            total += TOOL_CHARS if i % TOOL_EVERY == TOOL_EVERY - 1 else rnd.randint(300, 900)
    return total


TABLES = ("runs", "events", "inbox", "chunks", "blob_refs", "retention", "torpor_schema")


def db_bytes(rt: torpor.Runtime) -> int:
    store: Any = rt.store
    drv = store.driver
    if drv.dialect == "sqlite":
        conn = drv.conn()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        return int(pages * conn.execute("PRAGMA page_size").fetchone()[0])
    import psycopg

    with psycopg.connect(store.url, autocommit=True) as c:
        for t in TABLES:
            c.execute(f"VACUUM {t}")
        row = c.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname = ANY(%s)",
            (list(TABLES),),
        ).fetchone()
    return int(row[0])


def measure(url: str, runs: int, steps: int, chunked: bool) -> dict[str, Any]:
    saved = chunks.CHUNK_MIN_BYTES
    if not chunked:
        chunks.CHUNK_MIN_BYTES = 1 << 62
    try:
        t0 = time.perf_counter()
        with torpor.Runtime(url) as rt:
            for seed in range(runs):
                res = rt.run(conversation, {"seed": seed, "steps": steps}, run_id=f"r{seed}")
                assert res.outcome == "succeeded" and res.result == steps, res
            size = db_bytes(rt)
        elapsed = time.perf_counter() - t0
    finally:
        chunks.CHUNK_MIN_BYTES = saved
    unique = unique_bytes(runs, steps)
    return {
        "runs": runs,
        "steps": steps,
        "chunked": chunked,
        "db_bytes": size,
        "unique_bytes": unique,
        "ratio": size / unique,
        "seconds": elapsed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--baseline-runs", type=int, default=2)
    ap.add_argument("--baseline-steps", type=int, default=100)
    ap.add_argument("--backends", default="sqlite,postgres")
    args = ap.parse_args()
    results = []
    for backend in args.backends.split(","):
        for chunked, runs, steps in (
            (True, args.runs, args.steps),
            (False, args.baseline_runs, args.baseline_steps),
        ):
            if backend == "sqlite":
                with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
                    url = f"sqlite:///{Path(tmp) / 'bench.db'}?synchronous=NORMAL"
                    r = measure(url, runs, steps, chunked)
            else:
                with pg_schema() as url:
                    r = measure(url, runs, steps, chunked)
            r["backend"] = backend
            results.append(r)
            print(r, flush=True)
    print(
        table(
            ["backend", "stored", "runs x steps", "database", "unique content", "ratio", "s"],
            [
                [
                    r["backend"],
                    "chunked" if r["chunked"] else "whole (baseline)",
                    f"{r['runs']} x {r['steps']}",
                    f"{r['db_bytes'] / 1e6:.1f} MB",
                    f"{r['unique_bytes'] / 1e6:.1f} MB",
                    f"{r['ratio']:.2f}x",
                    f"{r['seconds']:.0f}",
                ]
                for r in results
            ],
        )
    )
    save("storage", {"results": results})


if __name__ == "__main__":
    main()
