"""The stream rows' types and the :class:`StreamRows` part of the store protocol (issue 40;
the operations are :mod:`.streams`), apart so that :mod:`.base` can name them without a cycle."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

__all__ = ["StreamRow", "StreamRows", "StreamTail"]


class StreamRow(NamedTuple):
    """One stored item: ``offset`` (dense per stream, from 1), ``kind`` (``data``, ``end``,
    ``retract``), ``part`` ('' for a workflow's own write), ``data`` (JSON text), ``at_ms``."""

    offset: int
    kind: str
    part: str
    data: str
    at_ms: int


class StreamTail(NamedTuple):
    """What a writer opening a stream needs: the last offset, the last workflow write's
    ordinal, and the parts that have items but neither an ``end`` nor a ``retract``."""

    offset: int
    wseq: int
    open_parts: list[str]


class StreamRows(Protocol):
    """The stream operations of :class:`~torpor.store.base.Store` (see :mod:`.streams`)."""

    def append_stream_items(
        self,
        run_id: str,
        stream: str,
        rows: Sequence[dict[str, Any]],
        *,
        owner: str,
        epoch: int,
    ) -> None:
        """Insert ``rows`` (each with ``stream_offset``, ``part``, ``kind``, ``wseq``,
        ``data``, ``at_ms``) in one transaction under the lease ``(owner, epoch)``.
        LeaseLostError (nothing written) when the run row no longer names that lease."""
        ...

    def stream_tail(self, run_id: str, stream: str) -> StreamTail: ...

    def stream_items(
        self, run_id: str, stream: str, *, after: int = 0, limit: int = 1000
    ) -> list[StreamRow]:
        """Items with an offset above ``after``, in offset order, at most ``limit``."""
        ...

    def stream_names(self, run_id: str) -> list[tuple[str, int]]:
        """``[(stream, last offset)]`` of the run's streams, by name."""
        ...

    def stream_token(self, run_id: str, stream: str) -> Any:
        """Taken before a read; :meth:`wait_stream` returns at once if a batch of the stream
        may have committed since."""
        ...

    def wait_stream(self, run_id: str, stream: str, token: Any, timeout_s: float) -> bool:
        """Block until a batch of the stream may have committed since ``token`` was taken
        (True) or ``timeout_s`` passed (False)."""
        ...
