"""Episode write rates (issue 31), part of ``bench/episodes.py``: the public write call
(:meth:`torpor.episodes.EpisodeStore.write`) against a raw INSERT of the same rows into the
same tables, measured in the same run on fresh stores, in batches of 1 and 100; and on
PostgreSQL 8 writers in different scopes against 1.

- **raw INSERT**: the DB-API connection itself, no torpor code: per batch one transaction with
  (SQLite) ``executemany`` of the row INSERT and one ``INSERT … SELECT`` into the FTS5 index for
  the batch's rows, or (PostgreSQL) one multi-row INSERT computing the same ``tsvector`` — the
  table's trigger keeping the per-scope word counters (migration 0021) fires for it as for the
  public call, once per statement.
- **public write**: ``EpisodeStore.write(batch)``: validation, the ``ON CONFLICT`` insert with
  ``RETURNING``, the index row, the supersession check against the scope's live episodes (the
  rows carry claims, as derived episodes do), the artifact references.
- **writers**: ``W`` threads, each writing its own scope's episodes one per transaction through
  the public call, total episodes per second (8 against 1).

Rows are the skewed workload's (:class:`episodes_workload.SkewedWorkload`), each with a claim
about one of 7 tools (so a later one may contradict an earlier one).
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from common import pg_schema
from episodes_workload import SkewedWorkload

from torpor.episodes import Episode, EpisodeStore
from torpor.episodes.model import tags_for
from torpor.store import open_store

COLUMNS = (
    "episode_id, run_id, boundary, scope, agent, task_type, kind, outcome, summary, lesson, "
    "conditions, refs, claims, tags, at_seq, created_at_ms"
)


def episodes(n: int, tag: str, *, scope: str | None = None, seed: int = 77) -> list[Episode]:
    out = []
    for r in SkewedWorkload(seed=seed).episodes(0, n):
        out.append(
            Episode(
                episode_id=f"{tag}{r.n}:ended@1",
                run_id=f"{tag}{r.n}",
                boundary="ended@1",
                scope=scope if scope is not None else r.scope,
                agent=r.agent,
                task_type=r.task_type,
                kind="ended",
                outcome=r.outcome,
                summary=r.summary,
                lesson=r.lesson,
                at_seq=1,
                created_at_ms=r.created_at_ms,
                conditions={"agent": r.agent, "task_type": r.task_type},
                refs={"events": [1], "artifacts": []},
                claims={f"tool-{r.n % 7}": "failed" if r.n % 3 else "succeeded"},
            )
        )
    return out


def _raw_values(ep: Episode) -> tuple[Any, ...]:
    import json

    return (
        ep.episode_id, ep.run_id, ep.boundary, ep.scope, ep.agent, ep.task_type, ep.kind,
        ep.outcome, ep.summary, ep.lesson, json.dumps(ep.conditions, sort_keys=True),
        json.dumps(ep.refs, sort_keys=True), json.dumps(ep.claims, sort_keys=True),
        " ".join(tags_for(ep.scope, ep.agent, ep.task_type, ep.outcome)), ep.at_seq,
        ep.created_at_ms,
    )  # fmt: skip


@contextmanager
def fresh(backend: str) -> Iterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            yield f"sqlite:///{tmp}/writes.db?synchronous=NORMAL"
    else:
        with pg_schema() as url:
            yield url


def raw_rate(backend: str, eps: list[Episode], batch: int) -> float:
    """Episodes per second through a plain DB-API INSERT (see the module docstring)."""
    with fresh(backend) as url:
        store = open_store(url)  # torpor's migrations make the tables
        try:
            rows = [_raw_values(e) for e in eps]
            if backend == "sqlite":
                conn = store.driver.conn()  # type: ignore[attr-defined]
                marks = ", ".join("?" * 16)
                t0 = time.perf_counter()
                for lo in range(0, len(rows), batch):
                    conn.execute("BEGIN IMMEDIATE")
                    last = conn.execute("SELECT coalesce(max(id), 0) FROM episodes").fetchone()[0]
                    conn.executemany(
                        f"INSERT INTO episodes ({COLUMNS}) VALUES ({marks})", rows[lo : lo + batch]
                    )
                    conn.execute(
                        "INSERT INTO episodes_fts (rowid, summary, lesson, tags) "
                        "SELECT id, summary, lesson, tags FROM episodes WHERE id > ?",
                        (last,),
                    )
                    conn.execute("COMMIT")
                return len(rows) / (time.perf_counter() - t0)
            import psycopg

            one = (
                "(" + ", ".join(["%s"] * 16) + ", setweight(to_tsvector('english', %s), 'A') "
                "|| setweight(to_tsvector('english', %s), 'B') "
                "|| array_to_tsvector(string_to_array(%s, ' ')))"
            )
            with psycopg.connect(url) as conn:
                t0 = time.perf_counter()
                for lo in range(0, len(rows), batch):
                    part = rows[lo : lo + batch]
                    # One multi-row statement per batch, as the public call's: the table's
                    # trigger (the per-scope word counters) fires once per statement.
                    sql = f"INSERT INTO episodes ({COLUMNS}, tsv) VALUES " + ", ".join(
                        [one] * len(part)
                    )
                    params = [x for r in part for x in (*r, r[9], r[8], r[13])]
                    with conn.transaction(), conn.cursor() as cur:
                        cur.execute(sql, params)
                return len(rows) / (time.perf_counter() - t0)
        finally:
            store.close()


def api_rate(backend: str, eps: list[Episode], batch: int) -> float:
    """Episodes per second through ``EpisodeStore.write`` in batches of ``batch``."""
    with fresh(backend) as url:
        store = open_store(url)
        try:
            es = EpisodeStore(store)
            t0 = time.perf_counter()
            for lo in range(0, len(eps), batch):
                es.write(eps[lo : lo + batch])
            rate = len(eps) / (time.perf_counter() - t0)
            assert es.count() == len(eps)
            return rate
        finally:
            store.close()


def writers_rate(backend: str, n_writers: int, per_writer: int) -> float:
    """Total episodes per second of ``n_writers`` threads, each in its own scope, one episode
    per transaction through the public call."""
    with fresh(backend) as url:
        store = open_store(url)
        try:
            es = EpisodeStore(store)
            work = [episodes(per_writer, f"w{i}-", scope=f"writer-{i}") for i in range(n_writers)]
            start = threading.Barrier(n_writers + 1)

            def write(eps: list[Episode]) -> None:
                start.wait()
                for e in eps:
                    es.write([e])

            threads = [threading.Thread(target=write, args=(w,)) for w in work]
            for t in threads:
                t.start()
            start.wait()
            t0 = time.perf_counter()
            for t in threads:
                t.join()
            rate = n_writers * per_writer / (time.perf_counter() - t0)
            assert es.count() == n_writers * per_writer
            return rate
        finally:
            store.close()


def write_rates(backend: str, n: int = 2000, repeats: int = 3) -> dict[str, Any]:
    """The figures of one backend (see the module docstring): ``n`` episodes per batch-of-100
    measurement, a quarter of it per batch-of-1 one; each measured ``repeats`` times, raw and
    public alternating (the machine's load moves), the median kept."""
    import statistics

    eps = episodes(n, "e")
    few = eps[: max(100, n // 4)]
    samples: dict[str, list[float]] = {}
    for _ in range(repeats):
        for name, fn, rows, batch in (
            ("raw_1", raw_rate, few, 1),
            ("api_1", api_rate, few, 1),
            ("raw_100", raw_rate, eps, 100),
            ("api_100", api_rate, eps, 100),
        ):
            samples.setdefault(name, []).append(fn(backend, rows, batch))
        if backend == "postgres":
            per = max(50, n // 16)
            samples.setdefault("writers_1", []).append(writers_rate(backend, 1, per))
            samples.setdefault("writers_8", []).append(writers_rate(backend, 8, per))
    out: dict[str, Any] = {"backend": backend, "episodes": n, "repeats": repeats}
    out.update({k: statistics.median(v) for k, v in samples.items()})
    out["api_1_vs_raw"] = out["api_1"] / out["raw_1"]
    out["api_100_vs_raw"] = out["api_100"] / out["raw_100"]
    if backend == "postgres":
        out["writers_8_vs_1"] = out["writers_8"] / out["writers_1"]
    out["samples"] = {k: [round(x, 1) for x in v] for k, v in samples.items()}
    return out


__all__ = ["api_rate", "episodes", "raw_rate", "write_rates", "writers_rate"]
