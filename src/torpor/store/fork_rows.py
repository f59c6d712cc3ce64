"""The store's fork rows as the protocol names them (:mod:`.forks` implements them; issue 45):
kept apart so :mod:`.base` can name the protocol without importing the implementation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..history import Event, RunState
    from .base import RunRecord


class ForkRows(Protocol):
    """A fork's row and copied history (:mod:`torpor.forks` makes one)."""

    def create_fork(
        self, run_id: str, origin: str, at_seq: int, events: Sequence[Event], state: RunState
    ) -> bool:
        """Create run ``run_id`` as a fork of ``origin`` at its seq ``at_seq``, with the
        history ``events`` (the origin's 1..``at_seq`` as the fork's, then its
        ``run_forked``), folded by the caller into ``state`` (its checkpoint), in one
        transaction; False when ``run_id`` exists (nothing written). RunNotFoundError when
        ``origin`` does not exist."""
        ...

    def fork_origin(self, run_id: str) -> tuple[str, int] | None:
        """``(origin run id, seq copied up to)`` of a fork, None for a run that is not one."""
        ...

    def run_forks(self, origin: str, *, limit: int = 1000) -> list[RunRecord]:
        """The forks of ``origin``, oldest first (at most ``limit``)."""
        ...


__all__ = ["ForkRows"]
