"""Cost that stays flat as the work grows (issue 48 item 1), SQLite or PostgreSQL
(``--backend``; a fresh schema of ``TORPOR_BENCH_DATABASE_URL``/``TORPOR_TEST_DATABASE_URL``):
a store of ``--finished`` finished runs (default 1,000,000) and ``--waiting`` waiting runs
(default 100,000) against a near-empty store, the same four operations on each, each as a
ratio big/empty (goal <= 1.5x):

- ``ls``: the newest page (``Client.runs(limit=50)``, what ``torpor ls`` reads);
- ``show``: the report of one finished run (``torpor.report.run.gather``, what ``torpor show``
  reads);
- ``claim``: a ready run started through the API, then ``Store.claim_next`` takes it (with the
  ``accept`` of the workflows registered, as a worker claims);
- ``wake``: a signal sent to one waiting run (``Client.signal``), then ``claim_next`` takes it.

How the big store is made: through the public API, one run of each kind is executed (a one-step
run that finishes; a run that waits for a signal with a 30-day timeout); then SQL copies their
``runs`` and ``events`` rows into ``--finished`` and ``--waiting`` rows with new run ids, older
creation times (one millisecond apart, before the templates) and nothing else changed, in one
transaction per table (a recursive CTE counting 1..N on SQLite, ``generate_series`` and then
``ANALYZE`` on PostgreSQL; a million runs take one or two minutes here, the public API would
take hours). The baseline ("empty") store is made the same way with 60
finished and 10 waiting runs: one full page for ``ls``, so both stores list the same 50 rows.
Each operation is then timed ``--reps`` times on each store, alternating the two stores, and the
median of each is reported; the ratio is of the medians. ``EXPLAIN QUERY PLAN`` of the
queries they run is printed beside (``tests/test_store_plans.py`` checks the same plans on a
small store in the suite).

    uv run python bench/scale.py                     # 1,000,000 finished + 100,000 waiting
    uv run python bench/scale.py --finished 100000 --waiting 10000 --reps 15  # a quick try
    uv run python bench/scale.py --drain [--drain-runs 20000]  # PostgreSQL drain (bench/drain.py)

Results: ``bench/results/scale.json`` and the table on stdout (and in ``python -m bench``'s
report, section ``scale``).
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import save, table

GOAL = 1.5
#: The baseline store ("empty"): a page of finished runs and a few waiting ones.
BASE_F, BASE_W = 60, 10
OPS = ("ls", "show", "claim", "wake")


def _workflows() -> tuple[Any, Any]:
    import torpor

    @torpor.workflow(name="bench.scale.done", version="1")
    def done(run: torpor.Run, n: int) -> int:
        return int(run.step("s", int, n))

    @torpor.workflow(name="bench.scale.wait", version="1")
    def wait(run: torpor.Run, n: int) -> Any:
        return run.wait_for("go", timeout=timedelta(days=30))

    return done, wait


def _copy(db: sqlite3.Connection, tbl: str, template: str, prefix: str, n: int) -> None:
    """Copy ``template``'s rows of ``tbl`` ``n`` times as runs ``prefix0000001``...; their
    times moved back by the copy's number of milliseconds (older than the template)."""
    cols = [r[1] for r in db.execute(f"PRAGMA table_info({tbl})")]
    shifted = {"created_at_ms", "updated_at_ms", "at_ms", "started_at_ms"}
    expr = []
    for c in cols:
        if c == "run_id":
            expr.append(f"'{prefix}' || printf('%07d', k.i)")
        elif c in shifted:
            expr.append(f"t.{c} - k.i")
        else:
            expr.append(f"t.{c}")
    db.execute(
        f"INSERT INTO {tbl} ({', '.join(cols)}) "
        "WITH RECURSIVE k(i) AS (SELECT 1 WHERE :n > 0 UNION ALL SELECT i + 1 FROM k WHERE i < :n) "
        f"SELECT {', '.join(expr)} FROM k, {tbl} t WHERE t.run_id = :t",
        {"n": n, "t": template},
    )


def build(url: str, finished: int, waiting: int, probes: int) -> dict[str, Any]:
    """A store at ``url`` (SQLite or PostgreSQL) with ``finished`` + ``waiting`` bulk runs;
    returns the probe runs: one finished run to show, ``probes`` waiting runs to wake. Seconds
    the SQL copy took in ``load_s``."""
    import torpor

    done, wait = _workflows()
    rt = torpor.Runtime(url)
    shown = rt.run(done, 1).run_id
    waiters = [rt.run(wait, i, follow_timers=False).run_id for i in range(probes)]
    tmpl_w = waiters[0]
    rt.close()
    t0 = time.perf_counter()
    if url.startswith("sqlite"):
        db = sqlite3.connect(url.removeprefix("sqlite:///"))
        with db:
            for tbl in ("runs", "events"):
                _copy(db, tbl, shown, "f", finished)
                _copy(db, tbl, tmpl_w, "w", waiting)
        db.close()
    else:
        import psycopg

        with psycopg.connect(url) as pg:
            for tbl in ("runs", "events"):
                _copy_pg(pg, tbl, shown, "f", finished)
                _copy_pg(pg, tbl, tmpl_w, "w", waiting)
            pg.commit()
            pg.execute("ANALYZE runs")  # autovacuum would, soon after a load this size
            pg.execute("ANALYZE events")
            pg.commit()
    return {"url": url, "shown": shown, "waiters": waiters, "load_s": time.perf_counter() - t0}


def _copy_pg(pg: Any, tbl: str, template: str, prefix: str, n: int) -> None:
    """:func:`_copy` on PostgreSQL (``generate_series``)."""
    cols = [
        r[0]
        for r in pg.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
            "AND table_schema = current_schema() ORDER BY ordinal_position",
            (tbl,),
        )
    ]
    shifted = {"created_at_ms", "updated_at_ms", "at_ms", "started_at_ms"}
    expr = [
        f"'{prefix}' || lpad(k.i::text, 7, '0')"
        if c == "run_id"
        else f"t.{c} - k.i"
        if c in shifted
        else f"t.{c}"
        for c in cols
    ]
    pg.execute(
        f"INSERT INTO {tbl} ({', '.join(cols)}) SELECT {', '.join(expr)} "
        f"FROM generate_series(1, %(n)s) AS k(i), {tbl} t WHERE t.run_id = %(t)s",
        {"n": n, "t": template},
    )


def plans(url: str) -> dict[str, list[str]]:
    """``EXPLAIN QUERY PLAN`` (SQLite) or ``EXPLAIN`` (PostgreSQL) of the named queries the
    four operations run."""
    from torpor.store import open_store

    params: dict[str, Any] = {
        "limit": 50, "run_id": "x", "now_ms": 0, "owner": "o", "ttl_ms": 1, "exclude": "[]",
        "message_id": "m", "kind": "signal", "body": "{}", "top_k": 8, "skip_queues": "[]",
    }  # fmt: skip
    sqlite = url.startswith("sqlite")
    store = open_store(url, read_only=sqlite)
    out = {}
    try:
        with store.driver.transaction() if not sqlite else store.driver.read() as cur:
            for name in ("list_runs", "get_run", "claim_next", "wake_run", "insert_inbox"):
                sql = store.q[name]  # type: ignore[attr-defined]
                p = {k: params.get(k) for k in re.findall(r"(?<!:):(\w+)", sql)}
                prefix = "EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN "
                rows = store.driver.fetchall(cur, prefix + sql, p)  # type: ignore[attr-defined]
                out[name] = [str(r[-1]).strip() for r in rows]
    finally:
        store.close()
    return out


def profile(url: str, names: list[str]) -> dict[str, list[str]]:
    """PostgreSQL: ``EXPLAIN (ANALYZE, BUFFERS)`` of the named queries with real arguments (the
    store's clock), in a transaction rolled back: where the time of an operation that does not
    hold goes."""
    from torpor.store import open_store

    store = open_store(url)
    out = {}
    try:
        args: dict[str, Any] = {
            "limit": 50, "run_id": "x", "now_ms": store.now_ms(), "owner": "profile",
            "ttl_ms": 1000, "exclude": "[]", "top_k": 8, "skip_queues": "[]",
        }  # fmt: skip
        d = store.driver  # type: ignore[attr-defined]
        for name in names:
            sql = store.q[name]  # type: ignore[attr-defined]
            p = {k: args.get(k) for k in re.findall(r"(?<!:):(\w+)", sql)}
            try:
                with d.transaction() as cur:
                    rows = d.fetchall(cur, "EXPLAIN (ANALYZE, BUFFERS) " + sql, p)
                    raise _Rollback(rows)
            except _Rollback as rb:
                out[name] = [str(r[-1]) for r in rb.rows]
    finally:
        store.close()
    return out


class _Rollback(Exception):
    def __init__(self, rows: list[Any]) -> None:
        super().__init__("rollback")
        self.rows = rows


def measure(stores: dict[str, dict[str, Any]], reps: int) -> dict[str, dict[str, list[float]]]:
    """Milliseconds of each operation on each store, ``reps`` times, alternating stores."""
    import torpor
    from torpor.report.run import gather
    from torpor.workflows import accepted_versions

    _workflows()
    accept = accepted_versions()  # what a worker's claim passes
    ms: dict[str, dict[str, list[float]]] = {k: {op: [] for op in OPS} for k in stores}
    open_ = {k: torpor.Runtime(s["url"]) for k, s in stores.items()}
    try:
        for rep in range(reps):
            for key, s in stores.items():
                rt = open_[key]
                client = torpor.Client(rt.store)
                owner = f"bench-{uuid.uuid4().hex[:6]}"

                t = time.perf_counter()
                page = client.runs(limit=50)
                ms[key]["ls"].append((time.perf_counter() - t) * 1e3)
                assert len(page) == 50

                t = time.perf_counter()
                gather(client, s["shown"])
                ms[key]["show"].append((time.perf_counter() - t) * 1e3)

                rid = rt.start("bench.scale.done", rep)
                t = time.perf_counter()
                lease = rt.store.claim_next(owner, 300, accept=accept)
                ms[key]["claim"].append((time.perf_counter() - t) * 1e3)
                assert lease is not None and lease.run_id == rid, (key, lease, rid)

                waiter = s["waiters"][rep]
                t = time.perf_counter()
                client.signal(waiter, "go", rep)
                lease = rt.store.claim_next(owner, 300, accept=accept)
                ms[key]["wake"].append((time.perf_counter() - t) * 1e3)
                assert lease is not None and lease.run_id == waiter, (key, lease, waiter)
    finally:
        for rt in open_.values():
            rt.close()
    return ms


def run(finished: int, waiting: int, reps: int, backend: str = "sqlite") -> dict[str, Any]:
    """Build both stores, measure, and return the figures (what ``python -m bench`` shows)."""
    from contextlib import ExitStack

    from common import pg_schema

    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-scale-")))
        stores = {}
        # The baseline holds one full page of finished runs (and a few waiting), so both
        # stores list the same 50 rows: what grows is the store, not the page.
        for key, (f, w) in {"empty": (BASE_F, BASE_W), "big": (finished, waiting)}.items():
            url = (
                f"sqlite:///{tmp / f'{key}.db'}"
                if backend == "sqlite"
                else stack.enter_context(pg_schema())
            )
            stores[key] = build(url, f, w, reps)
            print(f"[scale] {backend} {key}: {f} finished + {w} waiting loaded in "
                  f"{stores[key]['load_s']:.1f} s", flush=True)  # fmt: skip
        ms = measure(stores, reps)
        big = tmp / "big.db"
        res: dict[str, Any] = {
            "backend": backend,
            "finished": finished,
            "waiting": waiting,
            "reps": reps,
            "load_s": stores["big"]["load_s"],
            "db_mb": big.stat().st_size / 1e6 if backend == "sqlite" else None,
            "plans": plans(stores["big"]["url"]),
            "ops": {},
        }
        for op in OPS:
            e, b = (statistics.median(ms[k][op]) for k in ("empty", "big"))
            res["ops"][op] = {"empty_ms": e, "big_ms": b, "ratio": b / e, "holds": b / e <= GOAL}
        res["samples_ms"] = ms
        queries = {"ls": ["list_runs"], "claim": ["claim_next"], "wake": ["claim_next"]}
        short = sorted({q for op, o in res["ops"].items() if not o["holds"]
                        for q in queries.get(op, [])})  # fmt: skip
        if backend == "postgres" and short:
            res["profile"] = profile(stores["big"]["url"], short)
    return res


def lines(res: dict[str, Any]) -> list[str]:
    """The report's text: the table of ratios and the plans."""
    rows = [
        [op, f"{o['empty_ms']:.2f}", f"{o['big_ms']:.2f}", f"{o['ratio']:.2f}x",
         "yes" if o["holds"] else "NO"]
        for op, o in res["ops"].items()
    ]  # fmt: skip
    size = f"{res['db_mb']:.0f} MB, " if res.get("db_mb") else ""
    out = [
        f"{'PostgreSQL' if res.get('backend') == 'postgres' else 'SQLite'}, "
        f"{res['finished']:,} finished + {res['waiting']:,} waiting runs "
        f"({size}bulk-loaded by SQL in {res['load_s']:.0f} s) against an empty "
        f"store ({BASE_F} + {BASE_W}: one full page); median of {res['reps']} each, "
        f"goal <= {GOAL}x.",
        "",
        table(["operation", "empty ms", "big ms", "big/empty", "holds"], rows),
        "",
        "Plans on the big store (EXPLAIN QUERY PLAN):",
        "",
    ]
    pg = res.get("backend") == "postgres"
    for name, p in res["plans"].items():
        # PostgreSQL's plans are long: the lines that read a table of runs (scan kind, index)
        shown = [x for x in p if "Scan" in x and " runs" in x] if pg else p
        out.append(f"- `{name}`: " + "; ".join(re.sub(r"  \(cost=.*", "", x) for x in shown))
    for name, p in (res.get("profile") or {}).items():
        out += ["", f"Profile of `{name}` (EXPLAIN ANALYZE on the big store):", "", "```"]
        out += [*p, "```"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--finished", type=int, default=1_000_000)
    ap.add_argument("--waiting", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument(
        "--drain", action="store_true", help="PostgreSQL: 8 workers x 4 drain --drain-runs runs"
    )
    ap.add_argument(
        "--drain-runs", type=int, default=2_000, help="default 2,000; the issue's size: 20000"
    )
    args = ap.parse_args(argv)
    if args.drain:
        import drain

        got = drain.drain(args.drain_runs)
        print("\n".join(drain.lines(got)))
        print(save("scale_drain", got))
        return 0
    res = run(args.finished, args.waiting, args.reps, args.backend)
    print("\n".join(lines(res)))
    print(save("scale" if args.backend == "sqlite" else "scale_postgres", res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
