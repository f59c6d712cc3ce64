"""Cost that stays flat as the work grows (issue 48 item 1), SQLite: a store of ``--finished``
finished runs (default 1,000,000) and ``--waiting`` waiting runs (default 100,000) against an
near-empty store, the same four operations on each, each as a ratio big/empty (goal <= 1.5x):

- ``ls``: the newest page (``Client.runs(limit=50)``, what ``torpor ls`` reads);
- ``show``: the report of one finished run (``torpor.report.run.gather``, what ``torpor show``
  reads);
- ``claim``: a ready run started through the API, then ``Store.claim_next`` takes it;
- ``wake``: a signal sent to one waiting run (``Client.signal``), then ``claim_next`` takes it.

How the big store is made: through the public API, one run of each kind is executed (a one-step
run that finishes; a run that waits for a signal with a 30-day timeout); then SQL copies their
``runs`` and ``events`` rows into ``--finished`` and ``--waiting`` rows with new run ids, older
creation times (one millisecond apart, before the templates) and nothing else changed, in one
transaction per table (a recursive CTE counting 1..N; a million runs take about a minute here,
the public API would take hours). The baseline ("empty") store is made the same way with 60
finished and 10 waiting runs: one full page for ``ls``, so both stores list the same 50 rows.
Each operation is then timed ``--reps`` times on each store, alternating the two stores, and the
median of each is reported; the ratio is of the medians. ``EXPLAIN QUERY PLAN`` of the
queries they run is printed beside (``tests/test_store_plans.py`` checks the same plans on a
small store in the suite).

    uv run python bench/scale.py                     # 1,000,000 finished + 100,000 waiting
    uv run python bench/scale.py --finished 100000 --waiting 10000 --reps 15  # a quick try

Results: ``bench/results/scale.json`` and the table on stdout (and in ``python -m bench``'s
report, section ``scale``).
"""

from __future__ import annotations

import argparse
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


def build(path: Path, finished: int, waiting: int, probes: int) -> dict[str, Any]:
    """A store at ``path`` with ``finished`` + ``waiting`` bulk runs; returns the probe runs:
    one finished run to show, ``probes`` waiting runs to wake. Seconds taken in ``load_s``."""
    import torpor

    done, wait = _workflows()
    url = f"sqlite:///{path}"
    rt = torpor.Runtime(url)
    shown = rt.run(done, 1).run_id
    waiters = [rt.run(wait, i, follow_timers=False).run_id for i in range(probes)]
    tmpl_w = waiters[0]
    rt.close()
    t0 = time.perf_counter()
    db = sqlite3.connect(path)
    with db:
        for tbl in ("runs", "events"):
            _copy(db, tbl, shown, "f", finished)
            _copy(db, tbl, tmpl_w, "w", waiting)
    db.close()
    return {"url": url, "shown": shown, "waiters": waiters, "load_s": time.perf_counter() - t0}


def plans(path: Path) -> dict[str, list[str]]:
    """``EXPLAIN QUERY PLAN`` of the named queries the four operations run."""
    from torpor.store import open_store

    store = open_store(f"sqlite:///{path}", read_only=True)
    q = store.q  # type: ignore[attr-defined]
    store.close()
    params: dict[str, Any] = {
        "status": None, "outcome": None, "workflow": None, "attention": None, "limit": 50,
        "run_id": "x", "now_ms": 0, "owner": "o", "ttl_ms": 1, "accept": None, "exclude": "[]",
        "message_id": "m", "kind": "signal", "body": "{}",
    }  # fmt: skip
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    out = {}
    for name in ("list_runs", "get_run", "claim_next", "wake_run", "insert_inbox"):
        rows = db.execute("EXPLAIN QUERY PLAN " + q[name], params).fetchall()
        out[name] = [r[-1] for r in rows]
    db.close()
    return out


def measure(stores: dict[str, dict[str, Any]], reps: int) -> dict[str, dict[str, list[float]]]:
    """Milliseconds of each operation on each store, ``reps`` times, alternating stores."""
    import torpor
    from torpor.report.run import gather

    _workflows()
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
                lease = rt.store.claim_next(owner, 300)
                ms[key]["claim"].append((time.perf_counter() - t) * 1e3)
                assert lease is not None and lease.run_id == rid, (key, lease, rid)

                waiter = s["waiters"][rep]
                t = time.perf_counter()
                client.signal(waiter, "go", rep)
                lease = rt.store.claim_next(owner, 300)
                ms[key]["wake"].append((time.perf_counter() - t) * 1e3)
                assert lease is not None and lease.run_id == waiter, (key, lease, waiter)
    finally:
        for rt in open_.values():
            rt.close()
    return ms


def run(finished: int, waiting: int, reps: int) -> dict[str, Any]:
    """Build both stores, measure, and return the figures (what ``python -m bench`` shows)."""
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        stores = {}
        # The baseline holds one full page of finished runs (and a few waiting), so both
        # stores list the same 50 rows: what grows is the store, not the page.
        for key, (f, w) in {"empty": (BASE_F, BASE_W), "big": (finished, waiting)}.items():
            path = Path(tmp) / f"{key}.db"
            stores[key] = {**build(path, f, w, reps), "path": path}
            print(f"[scale] {key}: {f} finished + {w} waiting loaded in "
                  f"{stores[key]['load_s']:.1f} s", flush=True)  # fmt: skip
        ms = measure(stores, reps)
        res: dict[str, Any] = {
            "finished": finished,
            "waiting": waiting,
            "reps": reps,
            "load_s": stores["big"]["load_s"],
            "db_mb": stores["big"]["path"].stat().st_size / 1e6,
            "plans": plans(stores["big"]["path"]),
            "ops": {},
        }
        for op in OPS:
            e, b = (statistics.median(ms[k][op]) for k in ("empty", "big"))
            res["ops"][op] = {"empty_ms": e, "big_ms": b, "ratio": b / e, "holds": b / e <= GOAL}
        res["samples_ms"] = ms
    return res


def lines(res: dict[str, Any]) -> list[str]:
    """The report's text: the table of ratios and the plans."""
    rows = [
        [op, f"{o['empty_ms']:.2f}", f"{o['big_ms']:.2f}", f"{o['ratio']:.2f}x",
         "yes" if o["holds"] else "NO"]
        for op, o in res["ops"].items()
    ]  # fmt: skip
    out = [
        f"SQLite, {res['finished']:,} finished + {res['waiting']:,} waiting runs "
        f"({res['db_mb']:.0f} MB, bulk-loaded by SQL in {res['load_s']:.0f} s) against an empty "
        f"store ({BASE_F} + {BASE_W}: one full page); median of {res['reps']} each, "
        f"goal <= {GOAL}x.",
        "",
        table(["operation", "empty ms", "big ms", "big/empty", "holds"], rows),
        "",
        "Plans on the big store (EXPLAIN QUERY PLAN):",
        "",
    ]
    for name, p in res["plans"].items():
        out.append(f"- `{name}`: " + "; ".join(p))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--finished", type=int, default=1_000_000)
    ap.add_argument("--waiting", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=21)
    args = ap.parse_args(argv)
    res = run(args.finished, args.waiting, args.reps)
    print("\n".join(lines(res)))
    print(save("scale", res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
