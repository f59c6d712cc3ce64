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

    def search_ledger(
        self, run_id: str, terms: Sequence[str], *, upto: int | None = None, limit: int = 200
    ) -> list[LedgerRow]:
        """Records of ``run_id`` holding any of ``terms``, best first by the backend's
        full-text rank, at most ``limit``."""
        ...
