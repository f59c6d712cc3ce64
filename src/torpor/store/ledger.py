"""Fact ledger rows (issue 30): the records a compaction wrote (:mod:`torpor.memory.ledger`
says what a record is), stored in the transaction that appends their ``context_compacted``
event, read back and searched within one run. A mixin of
:class:`~torpor.store.sqlstore.SQLStore` (the :class:`LedgerRows` part of its protocol).

Writing (:func:`write_ledger`, called by :mod:`.appends` inside the append's transaction): one
row per record, keyed by ``(run_id, seq, idx)`` — the event's seq and the record's place in it
— so the rows exist exactly when the event does (a process killed at any point leaves both or
neither). Rows are never updated; deleting a run deletes its rows.

Reading: :meth:`LedgerTables.ledger` (every record of a run, with its event seq and time),
:meth:`LedgerTables.ledger_index` (keys and supersessions: what dedup and supersession need),
:meth:`LedgerTables.search_ledger` (full text: FTS5 ``MATCH`` ranked by BM25 on SQLite,
``tsvector @@ to_tsquery`` ranked by ``ts_rank`` on PostgreSQL; :mod:`torpor.memory.recall`
re-ranks the candidates the same way on both). ``upto``: only records of compactions numbered
at most that (a run replaying from a checkpoint reads the ledger as it was then).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .base import Driver, load_queries
from .ledger_rows import LedgerRow, LedgerRows

__all__ = ["LedgerRow", "LedgerRows", "LedgerTables", "delete_ledger", "write_ledger"]


@functools.cache
def load_ledger_queries(dialect: str) -> dict[str, str]:
    """``{name: sql}`` from ``sql/ledger/<dialect>.sql``."""
    return load_queries(dialect, Path(__file__).parent / "sql" / "ledger")


_COLUMNS = (
    "key", "kind", "text", "ids", "subject", "turn", "step", "source", "compaction", "score",
    "supersedes", "body",
)  # fmt: skip
_TERM = re.compile(r"^[a-z0-9]+$")
_ALL = 2**31 - 1


def _row(r: Sequence[Any]) -> LedgerRow:
    data = dict(zip(_COLUMNS, r[: len(_COLUMNS)], strict=True))
    data["ids"] = json.loads(data["ids"])
    data["supersedes"] = json.loads(data["supersedes"])
    data["subject"] = data["subject"].split()
    data["score"] = float(data["score"])
    return LedgerRow(data, int(r[-2]), int(r[-1]))


def write_ledger(
    driver: Driver, cur: Any, run_id: str, seq: int, at_ms: int, records: Sequence[Any]
) -> None:
    """Inside an append's transaction: the rows of the ``records`` (JSON data) the event at
    ``seq`` carries."""
    q = load_ledger_queries(driver.dialect)
    for idx, rec in enumerate(records):
        driver.execute(
            cur,
            q["insert_record"],
            {
                "run_id": run_id,
                "seq": seq,
                "idx": idx,
                "compaction": int(rec.get("compaction", 0)),
                "key": str(rec["key"]),
                "kind": str(rec["kind"]),
                "text": str(rec["text"]),
                "body": str(rec.get("body", "")),
                "ids": json.dumps(rec.get("ids", [])),
                "subject": " ".join(rec.get("subject", [])),
                "turn": int(rec.get("turn", 0)),
                "step": rec.get("step"),
                "source": str(rec.get("source", "model")),
                "score": float(rec.get("score", 0.0)),
                "supersedes": json.dumps(rec.get("supersedes", [])),
                "at_ms": at_ms,
            },
        )
    if "index_records" in q:
        driver.execute(cur, q["index_records"], {"run_id": run_id, "seq": seq})


def delete_ledger(driver: Driver, cur: Any, run_id: str) -> None:
    """Inside a transaction deleting a run: its ledger rows (and their index entries)."""
    q = load_ledger_queries(driver.dialect)
    if "unindex_run" in q:
        driver.execute(cur, q["unindex_run"], {"run_id": run_id})
    driver.execute(cur, q["delete_run"], {"run_id": run_id})


class LedgerTables:
    """See :class:`LedgerRows` for each method."""

    driver: Driver

    @property
    def _lq(self) -> dict[str, str]:
        return load_ledger_queries(self.driver.dialect)

    def ledger(self, run_id: str, *, upto: int | None = None) -> list[LedgerRow]:
        params = {"run_id": run_id, "upto": _ALL if upto is None else upto}
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self._lq["records"], params)
        return [_row(r) for r in rows]

    def ledger_index(
        self, run_id: str, *, upto: int | None = None
    ) -> tuple[set[str], set[str], list[LedgerRow]]:
        params = {"run_id": run_id, "upto": _ALL if upto is None else upto}
        with self.driver.read() as cur:
            keys = self.driver.fetchall(cur, self._lq["keys"], params)
            live = self.driver.fetchall(cur, self._lq["supersedable"], params)
        known = {str(k) for k, _ in keys}
        gone = {str(x) for _, s in keys for x in json.loads(s)}
        return known, gone, [_row(r) for r in live]

    def ledger_output_facts(self, run_id: str, *, upto: int | None = None) -> list[str]:
        params = {"run_id": run_id, "upto": _ALL if upto is None else upto}
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self._lq["output_facts"], params)
        return [str(r[0]) for r in rows]

    def search_ledger(
        self, run_id: str, terms: Sequence[str], *, upto: int | None = None, limit: int = 200
    ) -> list[LedgerRow]:
        words = [t for t in dict.fromkeys(t.lower() for t in terms) if _TERM.match(t)]
        if not words:
            return []
        if self.driver.dialect == "sqlite":
            match = " OR ".join(f'"{w}"' for w in words)
        else:
            match = " | ".join(words)
        params = {
            "run_id": run_id,
            "upto": _ALL if upto is None else upto,
            "match": match,
            "limit": limit,
        }
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self._lq["search"], params)
        return [_row(r) for r in rows]
