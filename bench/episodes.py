"""Episodic retrieval at 10k, 100k and 1M episodes, and the day-three scenario (issue 18).

    uv run python bench/episodes.py                          # 10k, 100k, 1M on both backends
    uv run python bench/episodes.py --sizes 10000,100000 --backends sqlite
    uv run python bench/episodes.py --day-three-only

**Retrieval.** The workload of :mod:`episodes_workload` (Zipf vocabulary, 2-4 word queries,
scope and task type narrowing to 1 %) is bulk-loaded into a fresh store made by torpor's own
migrations — SQLite under ``/var/tmp`` (``executemany``, then one ``INSERT … SELECT`` into the
FTS5 index) or a fresh PostgreSQL schema (``COPY`` into a staging table 50,000 rows at a time,
one ``INSERT … SELECT`` each computing the ``tsvector`` — the table's trigger keeping the
per-scope word counters of migration 0021 fires once per statement — the GIN index rebuilt
after each load, ``VACUUM ANALYZE``) — grown 10k → 100k → 1M. At each size every query runs
through :meth:`torpor.episodes.EpisodeStore.search` (top 10, scope and task type filters; 20
warm-up queries first) and its wall time is recorded: p50/p95 over ``--queries``.

Two references, measured in the same run on the same data: the index's own ranking with the
filters in the index (FTS5 ``bm25()`` / ``ts_rank``, "native rank": what torpor's search
replaced, see :mod:`torpor.episodes.search`), and the baseline, the same top-10 query with the
filters *outside* the index: the full-text index answers the words alone, and scope and task
type are compared on the rows it returns (on PostgreSQL the columns are wrapped so that no
b-tree index answers them either) — what a store without filter tokens in its index does.

**Day three.** The scripted agent of ``tests/episodes_kit.py`` (a planner that tries approach A
unless its context says A failed) runs on a real Runtime: run 1 fails A with a reason and
succeeds with B; run 2 of the same agent and task type starts with an episodes section naming
A as failed and why, and does not try A; a control run in another scope (no lessons) tries A.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from common import percentile, pg_schema, save, table  # noqa: E402
from episodes_workload import SkewedWorkload, Workload  # noqa: E402
from episodes_writes import write_rates  # noqa: E402

from torpor.episodes import EpisodeStore  # noqa: E402
from torpor.episodes.model import tags_for, terms  # noqa: E402
from torpor.episodes.search import Filters, fts5_expr  # noqa: E402
from torpor.store import SQLStore, open_store  # noqa: E402

COLUMNS = (
    "episode_id, run_id, boundary, scope, agent, task_type, kind, outcome, summary, lesson, "
    "conditions, refs, claims, tags, at_seq, created_at_ms"
)


def _values(row: Any) -> tuple[Any, ...]:
    return (
        f"b{row.n}:ended@1",
        f"b{row.n}",
        "ended@1",
        row.scope,
        row.agent,
        row.task_type,
        "ended",
        row.outcome,
        row.summary,
        row.lesson,
        "{}",
        "{}",
        "{}",
        " ".join(tags_for(row.scope, row.agent, row.task_type, row.outcome)),
        1,
        row.created_at_ms,
    )


# ------------------------------------------------------------------ bulk loads


def load_sqlite(store: SQLStore, wl: Workload, start: int, stop: int) -> None:
    conn = store.driver.conn()  # type: ignore[attr-defined]
    marks = ", ".join("?" * 16)
    batch = 20_000
    conn.execute("BEGIN IMMEDIATE")
    last = conn.execute("SELECT coalesce(max(id), 0) FROM episodes").fetchone()[0]
    for lo in range(start, stop, batch):
        rows = [_values(r) for r in wl.episodes(lo, min(stop, lo + batch))]
        conn.executemany(f"INSERT INTO episodes ({COLUMNS}) VALUES ({marks})", rows)
    conn.execute(
        "INSERT INTO episodes_fts (rowid, summary, lesson, tags) "
        "SELECT id, summary, lesson, tags FROM episodes WHERE id > ?",
        (last,),
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA optimize")


def load_postgres(url: str, wl: Workload, start: int, stop: int) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '256MB'")
        conn.execute("DROP INDEX IF EXISTS episodes_tsv")
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS stage (episode_id text, run_id text, boundary text, "
            "scope text, agent text, task_type text, kind text, outcome text, summary text, "
            "lesson text, conditions text, refs text, claims text, tags text, at_seq bigint, "
            "created_at_ms bigint)"
        )
        # The per-scope word counters (migration 0021) are kept by the table's own trigger,
        # one aggregated upsert per INSERT statement: one statement per 50,000 rows.
        conn.execute("SET work_mem = '256MB'")
        batch = 50_000
        for lo in range(start, stop, batch):
            conn.execute("TRUNCATE stage")
            with conn.cursor().copy(f"COPY stage ({COLUMNS}) FROM STDIN") as cp:
                for r in wl.episodes(lo, min(stop, lo + batch)):
                    cp.write_row(_values(r))
            conn.execute(
                f"INSERT INTO episodes ({COLUMNS}, tsv) SELECT {COLUMNS}, "
                "setweight(to_tsvector('english', lesson), 'A') "
                "|| setweight(to_tsvector('english', summary), 'B') "
                "|| array_to_tsvector(string_to_array(tags, ' ')) FROM stage"
            )
        conn.execute("CREATE INDEX episodes_tsv ON episodes USING gin (tsv)")
        conn.execute("VACUUM (ANALYZE) episodes")
        conn.execute("VACUUM (ANALYZE) episode_terms")


# ------------------------------------------------------------------ the baseline


BASELINE_SQLITE = """
SELECT e.episode_id FROM episodes_fts JOIN episodes e ON e.id = episodes_fts.rowid
WHERE episodes_fts MATCH :match AND e.scope = :scope
  AND (:task_type IS NULL OR e.task_type = :task_type) AND e.superseded_by IS NULL
ORDER BY episodes_fts.rank LIMIT 10
"""

NATIVE_SQLITE = """
SELECT rowid FROM episodes_fts WHERE episodes_fts MATCH :match ORDER BY rank LIMIT 10
"""

NATIVE_PG = """
SELECT id FROM episodes
WHERE tsv @@ (CAST(:filters AS tsquery) && to_tsquery('english', CAST(:words AS text)))
ORDER BY ts_rank(tsv, to_tsquery('english', CAST(:words AS text))) DESC LIMIT 10
"""

BASELINE_PG = """
SELECT episode_id FROM episodes
WHERE tsv @@ to_tsquery('english', CAST(:words AS text))
  AND scope || '' = :scope
  AND (CAST(:task_type AS text) IS NULL OR task_type || '' = CAST(:task_type AS text))
  AND superseded_by IS NULL
ORDER BY ts_rank(tsv, to_tsquery('english', CAST(:words AS text))) DESC LIMIT 10
"""


def native_query(store: SQLStore, text: str, scope: str, task_type: str | None) -> int:
    """The index's own ranking (FTS5 ``bm25()`` / ``ts_rank``) with the filter tokens in the
    index: what torpor's search replaced (its IDF pass or its scoring reads every match)."""
    f = Filters(scope=scope, task_type=task_type)
    words = terms(text)
    d = store.driver
    with d.read() as cur:
        if d.dialect == "sqlite":
            rows = d.fetchall(cur, NATIVE_SQLITE, {"match": fts5_expr(f, words)})
        else:
            rows = d.fetchall(
                cur, NATIVE_PG, {"filters": " & ".join(f.tags()), "words": " | ".join(words)}
            )
    return len(rows)


def baseline_query(store: SQLStore, text: str, scope: str, task_type: str | None) -> int:
    """Filters outside the index: the words alone from the index, scope and task type
    compared on its rows."""
    words = terms(text)
    d = store.driver
    with d.read() as cur:
        if d.dialect == "sqlite":
            match = "{summary lesson} : (" + " OR ".join(f'"{w}"' for w in words) + ")"
            rows = d.fetchall(
                cur, BASELINE_SQLITE, {"match": match, "scope": scope, "task_type": task_type}
            )
        else:
            rows = d.fetchall(
                cur,
                BASELINE_PG,
                {"words": " | ".join(words), "scope": scope, "task_type": task_type},
            )
    return len(rows)


# ------------------------------------------------------------------ measuring


def filter_sizes(store: SQLStore) -> dict[tuple[str, str | None], int]:
    """Episodes per scope (key ``(scope, None)``) and per scope and task type."""
    d = store.driver
    with d.read() as cur:
        by_pair = d.fetchall(
            cur, "SELECT scope, task_type, count(*) FROM episodes WHERE 0 = :z "
            "GROUP BY scope, task_type", {"z": 0},
        )  # fmt: skip
    out: dict[tuple[str, str | None], int] = {}
    for scope, tt, n in by_pair:
        out[(scope, tt)] = int(n)
        out[(scope, None)] = out.get((scope, None), 0) + int(n)
    return out


def measure(store: SQLStore, wl: Workload, n_queries: int, n_baseline: int) -> dict[str, Any]:
    es = EpisodeStore(store)
    sizes = filter_sizes(store)
    queries = wl.queries(n_queries + 20)
    for text, scope, tt in queries[:20]:
        es.search(text, scope=scope, task_type=tt, limit=10)
    lat: list[float] = []
    small: list[float] = []
    hits: list[int] = []
    for text, scope, tt in queries[20:]:
        t0 = time.perf_counter()
        res = es.search(text, scope=scope, task_type=tt, limit=10)
        ms = (time.perf_counter() - t0) * 1000
        lat.append(ms)
        if sizes.get((scope, tt), 0) < 1000:
            small.append(ms)
        hits.append(len(res))
        assert all(h.scope == scope and (tt is None or h.task_type == tt) for h in res)
    base: list[float] = []
    native: list[float] = []
    mine: list[float] = []
    for text, scope, tt in queries[20 : 20 + n_baseline]:
        # The three in turn on each query (the machine's load moves): torpor, then the others.
        t0 = time.perf_counter()
        es.search(text, scope=scope, task_type=tt, limit=10)
        mine.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        baseline_query(store, text, scope, tt)
        base.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        native_query(store, text, scope, tt)
        native.append((time.perf_counter() - t0) * 1000)
    return {
        "p50_ms": percentile(lat, 50),
        "p95_ms": percentile(lat, 95),
        "max_ms": max(lat),
        "small_filter_p95_ms": percentile(small, 95) if small else None,
        "small_filter_queries": len(small),
        "mean_hits": sum(hits) / len(hits),
        "paired_p50_ms": percentile(mine, 50),
        "baseline_p50_ms": percentile(base, 50),
        "baseline_p95_ms": percentile(base, 95),
        "native_p50_ms": percentile(native, 50),
        "native_p95_ms": percentile(native, 95),
        "p50_vs_native": percentile(mine, 50) / max(percentile(native, 50), 1e-9),
        "queries": len(lat),
        "baseline_queries": len(base),
        "samples_ms": [round(x, 3) for x in lat],
    }


def db_bytes(store: SQLStore, url: str) -> int:
    if store.driver.dialect == "sqlite":
        path = url.split("://", 1)[1].split("?", 1)[0][1:]
        return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    with store.driver.read() as cur:
        row = store.driver.fetchone(
            cur, "SELECT pg_total_relation_size('episodes') + 0 * length(:x)", {"x": ""}
        )
    return int(row[0]) if row else 0


def retrieval(
    backend: str, sizes: list[int], n_queries: int, n_baseline: int, workload: str = "skewed"
) -> list[dict]:
    wl = SkewedWorkload() if workload == "skewed" else Workload()
    out = []
    with ExitStack() as stack:
        if backend == "sqlite":
            tmp = stack.enter_context(tempfile.TemporaryDirectory(dir="/var/tmp"))
            url = f"sqlite:///{tmp}/episodes.db?synchronous=NORMAL"
        else:
            url = stack.enter_context(pg_schema())
        store = open_store(url)
        stack.callback(store.close)
        loaded = 0
        for size in sizes:
            t0 = time.perf_counter()
            if backend == "sqlite":
                load_sqlite(store, wl, loaded, size)
            else:
                load_postgres(url, wl, loaded, size)
            build_s = time.perf_counter() - t0
            loaded = size
            m = measure(store, wl, n_queries, n_baseline if size < 1_000_000 else n_baseline // 2)
            m.update(
                backend=backend,
                episodes=size,
                workload=workload,
                load_s=build_s,
                bytes=db_bytes(store, url),
            )
            print(
                f"{backend:9} {size:>9,}: p50 {m['p50_ms']:.2f} ms, p95 {m['p95_ms']:.2f} ms, "
                f"small-filter p95 {m['small_filter_p95_ms'] or float('nan'):.2f} ms "
                f"({m['small_filter_queries']} queries); p50 {m['p50_vs_native']:.2f}x native "
                f"rank; baseline p95 {m['baseline_p95_ms']:.1f} ms; load {build_s:.0f} s",
                flush=True,
            )
            out.append(m)
    return out


# ------------------------------------------------------------------ day three


def day_three(backend: str) -> dict[str, Any]:
    import episodes_kit as kit
    import torpor

    with ExitStack() as stack:
        if backend == "sqlite":
            tmp = stack.enter_context(tempfile.TemporaryDirectory(dir="/var/tmp"))
            url = f"sqlite:///{tmp}/day3.db"
        else:
            url = stack.enter_context(pg_schema())
        rt = torpor.Runtime(url)
        stack.callback(rt.close)
        kit.WORLD.update(a_works=False, log=[])
        agent, model = kit.scripted_agent()
        r1 = rt.run(agent, {"target": "prod"}, run_id="day1", scope="acme")
        tried1 = kit.tried(kit.WORLD["log"])
        kit.WORLD["log"] = []
        n_calls = len(model.calls)
        r3 = rt.run(agent, {"target": "prod"}, run_id="day3", scope="acme")
        tried3 = kit.tried(kit.WORLD["log"])
        section = kit.system_text(model.calls[n_calls])
        kit.WORLD["log"] = []
        control = rt.run(agent, {"target": "prod"}, run_id="control", scope="another-team")
        tried_control = kit.tried(kit.WORLD["log"])
    lesson = section[section.find("Episodes:") :]
    return {
        "backend": backend,
        "run1": {"outcome": r1.outcome, "tried": tried1},
        "run2": {"outcome": r3.outcome, "tried": tried3, "context_section": lesson},
        "control_other_scope": {"outcome": control.outcome, "tried": tried_control},
        "holds": tried1 == ["a", "b"]
        and tried3 == ["b"]
        and tried_control[:1] == ["a"]
        and "approach_a" in lesson
        and kit.A_ERROR in lesson,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--baseline-queries", type=int, default=40)
    ap.add_argument("--day-three-only", action="store_true")
    ap.add_argument("--workload", choices=["skewed", "uniform"], default="skewed")
    ap.add_argument("--writes", type=int, default=2000, help="episodes per write measurement")
    ap.add_argument("--no-writes", action="store_true")
    args = ap.parse_args(argv)
    backends = args.backends.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    os.environ.setdefault("TORPOR_HOME", tempfile.mkdtemp(prefix="torpor-bench-home-"))
    os.environ.setdefault("TORPOR_SIGNING_KEY", "bench-signing-key")
    days = [day_three(b) for b in backends]
    for d in days:
        print(f"day three on {d['backend']}: holds={d['holds']}", json.dumps(d, indent=1))
    writes = [] if args.no_writes or args.day_three_only else [
        write_rates(b, args.writes) for b in backends
    ]  # fmt: skip
    for w in writes:
        print(
            f"writes on {w['backend']}: batch 1 {w['api_1']:.0f}/s = {w['api_1_vs_raw']:.2f}x raw "
            f"INSERT; batch 100 {w['api_100']:.0f}/s = {w['api_100_vs_raw']:.2f}x raw"
            + (
                f"; 8 writers {w['writers_8']:.0f}/s = {w['writers_8_vs_1']:.1f}x 1 writer"
                if "writers_8" in w
                else ""
            ),
            flush=True,
        )
    rows: list[dict] = []
    if not args.day_three_only:
        for b in backends:
            rows += retrieval(b, sizes, args.queries, args.baseline_queries, args.workload)
    report = io.StringIO()
    if rows:
        report.write(
            table(
                [
                    "backend",
                    "episodes",
                    "p50 ms",
                    "p95 ms",
                    "small-filter p95 ms",
                    "p50 / native p50",
                    "native rank p95 ms",
                    "filters-outside p95 ms",
                    "filters-outside / torpor (p95)",
                    "mean hits",
                    "load s",
                    "MB",
                ],
                [
                    [
                        r["backend"],
                        f"{r['episodes']:,}",
                        r["p50_ms"],
                        r["p95_ms"],
                        r["small_filter_p95_ms"],
                        f"{r['p50_vs_native']:.2f}x",
                        r["native_p95_ms"],
                        r["baseline_p95_ms"],
                        f"{r['baseline_p95_ms'] / r['p95_ms']:.1f}x",
                        r["mean_hits"],
                        round(r["load_s"]),
                        round(r["bytes"] / 1e6),
                    ]
                    for r in rows
                ],
            )
        )
    print(report.getvalue())
    path = save("episodes", {"retrieval": rows, "writes": writes, "day_three": days})
    print(f"results: {path}")
    return 0 if all(d["holds"] for d in days) else 1


if __name__ == "__main__":
    sys.exit(main())
