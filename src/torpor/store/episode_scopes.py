"""A scope's memory as a whole: which scopes hold episodes, a scope's episodes page by page
(``torpor memory ls`` / ``export``), and forgetting a scope (``torpor memory forget``). A mixin
of :class:`~torpor.store.sqlstore.SQLStore` (part of :class:`~torpor.store.domain.EpisodeRows`).

Forgetting is one transaction: the scope's episodes with their full-text index rows (SQLite
FTS5's own rows; PostgreSQL's ``tsvector`` is a column), the artifact references they held
(``blob_refs`` owners ``episode:<id>``), and the rows of every table registered in
:data:`SCOPED_TABLES` (another part of memory filed by scope, deleted when the table
exists). The runs of the scope are not memory: their history is the record, kept or deleted
by run retention — and so is each run's fact ledger (issue 30), which is derived from its
history and goes with the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import Driver
from .domain import EPISODE_OWNER_PREFIX, Row
from .episode_index import EPISODE_COLUMNS

#: Tables holding memory filed by scope, as ``(table, scope column)``: forgetting a scope deletes
#: their rows too (a table not in the schema is skipped). Add yours with
#: :func:`register_scoped_table`.
SCOPED_TABLES: list[tuple[str, str]] = []

_IDENT = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def register_scoped_table(table: str, column: str = "scope") -> None:
    """Have ``torpor memory forget`` delete ``table``'s rows whose ``column`` is the scope.
    ValueError for a name that is not a plain lower-case SQL identifier."""
    for name in (table, column):
        if not name or not set(name) <= _IDENT or name[0].isdigit():
            raise ValueError(f"scoped table: {name!r} is not a plain lower-case identifier")
    if (table, column) not in SCOPED_TABLES:
        SCOPED_TABLES.append((table, column))


def _exists(driver: Driver, cur: Any, table: str) -> bool:
    if driver.dialect == "sqlite":
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :t"
    else:
        sql = "SELECT 1 WHERE to_regclass(CAST(:t AS text)) IS NOT NULL"
    return driver.fetchone(cur, sql, {"t": table}) is not None


#: Columns of a ``ledger_conflicts`` row (schema v27), in the order rows are given and read.
CONFLICT_COLUMNS = (
    "scope, subject, older_run, older_seq, older_idx, older_at_ms, older_text, old_value, "
    "newer_run, newer_seq, newer_idx, newer_text, new_value, at_ms"
)


def insert_conflicts(driver: Driver, cur: Any, rows: Sequence[Row]) -> None:
    """Inside a transaction: the ``ledger_conflicts`` rows (:data:`CONFLICT_COLUMNS`), each
    once (``ON CONFLICT DO NOTHING`` on its primary key)."""
    names = [c.strip() for c in CONFLICT_COLUMNS.split(",")]
    sql = (
        f"INSERT INTO ledger_conflicts ({CONFLICT_COLUMNS}) VALUES "
        f"({', '.join(':' + n for n in names)}) ON CONFLICT DO NOTHING"
    )
    for r in rows:
        driver.execute(cur, sql, dict(zip(names, r, strict=True)))


class EpisodeScopeTables:
    """See :class:`~torpor.store.domain.EpisodeRows` for each method's rows."""

    driver: Driver

    def episode_scopes(self) -> list[Row]:
        """``[(scope, episodes)]`` of every scope holding episodes, by scope."""
        with self.driver.read() as cur:
            sql = "SELECT scope, count(*) FROM episodes GROUP BY scope ORDER BY scope"
            return self.driver.fetchall(cur, sql, {})

    def episode_scopes_in_use(self) -> bool:
        """Whether any episode is filed under a scope other than ``""`` (one index probe)."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(
                cur, "SELECT max(scope) FROM episodes WHERE 0 = :z", {"z": 0}
            )
        return bool(row and row[0])

    def scope_episode_rows(self, scope: str, *, after: int, limit: int) -> list[Row]:
        """Up to ``limit`` episode rows of ``scope`` (score 0.0) in the order written, after the
        row position ``after`` (0: from the first); each row ends with its position, the
        ``after`` of the next page."""
        sql = (
            f"SELECT {EPISODE_COLUMNS}, 0.0, id FROM episodes WHERE scope = :scope AND id > :after "
            "ORDER BY id LIMIT :limit"
        )
        with self.driver.read() as cur:
            params = {"scope": scope, "after": after, "limit": limit}
            return self.driver.fetchall(cur, sql, params)

    def scope_ledger_facts(self, scope: str, run_id: str, *, runs: int) -> list[Row]:
        """``[(run_id, seq, idx, at_ms, kind, text, key)]``: the fact-ledger records (not the
        ``unit`` ones) of run ``run_id`` and of the runs of ``scope``'s latest ``runs``
        episodes, in the order stated (at most 5,000); ``[]`` when ``run_id`` has none."""
        sql = (
            "SELECT run_id, seq, idx, at_ms, kind, text, key FROM ledger WHERE kind <> 'unit' "
            "AND run_id IN (SELECT CAST(:run_id AS text) UNION SELECT run_id FROM (SELECT "
            "run_id FROM episodes WHERE scope = :scope ORDER BY created_at_ms DESC LIMIT :runs) e) "
            "ORDER BY at_ms, run_id, seq, idx LIMIT 5000"
        )
        own = "SELECT 1 FROM ledger WHERE run_id = :run_id AND kind <> 'unit' LIMIT 1"
        with self.driver.read() as cur:
            if self.driver.fetchone(cur, own, {"run_id": run_id}) is None:
                return []
            params = {"scope": scope, "run_id": run_id, "runs": runs}
            return self.driver.fetchall(cur, sql, params)

    def scope_conflicts(self, scope: str, *, until_ms: int, limit: int) -> list[Row]:
        """Up to ``limit`` ``ledger_conflicts`` rows of ``scope`` (:data:`CONFLICT_COLUMNS`)
        recorded at or before ``until_ms``, newest first."""
        sql = (
            f"SELECT {CONFLICT_COLUMNS} FROM ledger_conflicts WHERE scope = :scope AND "
            "at_ms <= :until ORDER BY at_ms DESC, newer_run, newer_seq DESC, newer_idx DESC "
            "LIMIT :limit"
        )
        with self.driver.read() as cur:
            params = {"scope": scope, "until": until_ms, "limit": limit}
            return self.driver.fetchall(cur, sql, params)

    def forget_scope(self, scope: str) -> dict[str, int]:
        """Delete everything memory holds of ``scope`` in one transaction; returns
        ``{what: rows deleted}`` — ``episodes``, ``artifact_refs``, and each existing table of
        :data:`SCOPED_TABLES` by name."""
        d = self.driver
        p = {"scope": scope}
        out: dict[str, int] = {}
        with d.transaction() as cur:
            owners = (
                "SELECT :prefix || episode_id FROM episodes WHERE scope = :scope"
                if d.dialect == "sqlite"
                else "SELECT CAST(:prefix AS text) || episode_id FROM episodes WHERE scope = :scope"
            )
            refs = f"DELETE FROM blob_refs WHERE run_id IN ({owners})"
            out["artifact_refs"] = int(d.execute(cur, refs, {**p, "prefix": EPISODE_OWNER_PREFIX}))
            if d.dialect == "sqlite":
                d.execute(
                    cur,
                    "INSERT INTO episodes_fts (episodes_fts, rowid, summary, lesson, tags) "
                    "SELECT 'delete', id, summary, lesson, tags FROM episodes WHERE scope = :scope",
                    p,
                )
            if _exists(d, cur, "episode_vectors"):  # their vectors (issue 32), by episode id
                out["episode_vectors"] = int(
                    d.execute(
                        cur,
                        "DELETE FROM episode_vectors WHERE episode_id IN "
                        "(SELECT episode_id FROM episodes WHERE scope = :scope)",
                        p,
                    )
                )
            out["episodes"] = int(d.execute(cur, "DELETE FROM episodes WHERE scope = :scope", p))
            for table, column in SCOPED_TABLES:
                if _exists(d, cur, table):
                    sql = f"DELETE FROM {table} WHERE {column} = :scope"  # names checked
                    out[table] = int(d.execute(cur, sql, p))
        return {"episodes": out.pop("episodes"), **out}


register_scoped_table("ledger_conflicts")

__all__ = [
    "CONFLICT_COLUMNS",
    "SCOPED_TABLES",
    "EpisodeScopeTables",
    "insert_conflicts",
    "register_scoped_table",
]
