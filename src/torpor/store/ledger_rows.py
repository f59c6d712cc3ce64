"""The store's fact-ledger rows as the protocol names them (:mod:`.ledger` implements them):
kept apart so :mod:`.base` can name the protocol without importing the implementation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class LedgerRow:
    """A stored ledger record: the record's fields (``data``, JSON data as the event carried
    it, see :class:`torpor.memory.ledger.LedgerRecord`) and where it was recorded — the
    ``seq`` of its ``context_compacted`` event and that event's time ``at_ms``."""

    data: dict[str, Any]
    seq: int
    at_ms: int


@dataclass(frozen=True)
class LedgerEntry:
    """A ledger record as a reader sees it (``Client.ledger``, ``torpor context RUN
    --ledger``): the record (``kind``, ``text``, ``ids``, ``key``), its provenance — the run,
    the ``seq`` and time (``at_ms``) of the ``context_compacted`` event that wrote it, the
    buffer ``turn``, the recorded ``step`` it came from and the ``source`` in that unit
    (model, operator, note, args, result, error) — and, when a later record replaced it, that
    record's key (``superseded_by``), who said it (``superseded_source``, its step) and when
    (``superseded_seq``, ``superseded_at_ms``). Superseded records are kept."""

    run_id: str
    key: str
    kind: str
    text: str
    ids: tuple[str, ...]
    turn: int
    step: str | None
    source: str
    compaction: int
    seq: int
    at_ms: int
    supersedes: tuple[str, ...] = ()
    superseded_by: str | None = None
    superseded_source: str | None = None
    superseded_step: str | None = None
    superseded_seq: int | None = None
    superseded_at_ms: int | None = None

    def as_json(self) -> dict[str, Any]:
        out = dict(vars(self))
        out["ids"], out["supersedes"] = list(self.ids), list(self.supersedes)
        return out


def entries(run_id: str, rows: Sequence[LedgerRow]) -> list[LedgerEntry]:
    """The rows of a run's ledger as :class:`LedgerEntry` (in the order written), each
    superseded one naming the first later record that replaced it."""
    by: dict[str, LedgerRow] = {}
    for r in rows:
        for k in r.data.get("supersedes", []):
            by.setdefault(str(k), r)
    out = []
    for r in rows:
        d = r.data
        later = by.get(str(d["key"]))
        out.append(
            LedgerEntry(
                run_id=run_id,
                key=str(d["key"]),
                kind=str(d["kind"]),
                text=str(d["text"]),
                ids=tuple(d.get("ids", [])),
                turn=int(d.get("turn", 0)),
                step=d.get("step"),
                source=str(d.get("source", "")),
                compaction=int(d.get("compaction", 0)),
                seq=r.seq,
                at_ms=r.at_ms,
                supersedes=tuple(d.get("supersedes", [])),
                superseded_by=None if later is None else str(later.data["key"]),
                superseded_source=None if later is None else str(later.data.get("source")),
                superseded_step=None if later is None else later.data.get("step"),
                superseded_seq=None if later is None else later.seq,
                superseded_at_ms=None if later is None else later.at_ms,
            )
        )
    return out


class LedgerRows(Protocol):
    """The store's ledger operations (see the module doc)."""

    def ledger(self, run_id: str, *, upto: int | None = None) -> list[LedgerRow]:
        """Every record of ``run_id`` in the order written (compactions numbered at most
        ``upto``; None: all)."""
        ...

    def ledger_index(
        self, run_id: str, *, upto: int | None = None
    ) -> tuple[set[str], set[str], list[LedgerRow]]:
        """``(keys, superseded keys, supersedable records)`` of ``run_id``'s ledger."""
        ...

    def ledger_output_facts(self, run_id: str, *, upto: int | None = None) -> list[str]:
        """The texts of ``run_id``'s fact records found in tool outputs (source ``result`` or
        ``args``, not ``unit`` records), in the order written: what run-level novelty counts
        (:class:`torpor.memory.compaction.ExtractiveSummarizer`)."""
        ...

    def search_ledger(
        self, run_id: str, terms: Sequence[str], *, upto: int | None = None, limit: int = 200
    ) -> list[LedgerRow]:
        """Records of ``run_id`` holding any of ``terms``, best first by the backend's
        full-text rank, at most ``limit``."""
        ...
