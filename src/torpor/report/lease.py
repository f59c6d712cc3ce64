"""What a run's lease says, in words: its own module, light enough for ``torpor ls`` (no models,
no engine: issue 48); :mod:`.run` re-exports it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..history.kinds import RunStatus
from ..owners import owner_is_dead

if TYPE_CHECKING:
    from ..store.base import RunRecord


def lease_text(r: RunRecord, now_ms: int) -> str:
    """A run's status with what its lease says: ``(leased)`` while a live holder has it,
    ``(holder dead)`` for a holder on this machine proven dead (``resume`` takes it over at
    once), ``(resumable: holder gone)`` once an unreleased lease expired."""
    if not r.lease_owner or r.status == RunStatus.FINISHED.value:
        return r.status
    if r.lease_expires_at_ms <= now_ms:
        return f"{r.status} (resumable: holder gone)"
    return r.status + (" (holder dead)" if owner_is_dead(r.lease_owner) else " (leased)")


__all__ = ["lease_text"]
