"""Claiming a run under its queue's limits, atomically on every backend.

A queue's slots are not a counter: they are derived from the run rows (a run of the queue
holds a slot from its first claim, ``started_at_ms``, until it is ``finished``), so a worker
killed while holding one leaks nothing; whoever takes the run over (lease expiry, a dead owner
proven on its host) continues it in the same slot. Rate limits count the runs started within
their period.

- **SQLite**: ``claim_next`` is one statement that checks every limit, under the write lock of
  ``BEGIN IMMEDIATE``: no other process can claim between its count and its update.
- **PostgreSQL**: ``claim_next`` locks the best candidate (``FOR UPDATE SKIP LOCKED``) and claims
  it at once when no limit applies to it (no queue, a queue without limits, or a run that
  already holds its slot). Otherwise the counts it saw may be stale (two workers claiming two
  runs of one queue at once would both see room), so the candidate is claimed by
  ``claim_checked`` after ``lock_queue`` (a transaction-scoped advisory lock per queue): that
  statement's snapshot is taken after every earlier claim of the queue committed. A queue found
  full is skipped and the next candidate tried, a few times, in the same transaction.
"""

from __future__ import annotations

from typing import Any

from .. import serde
from .base import Driver

#: Queues found full that one claim skips before giving up until the next wakeup.
MAX_FULL_QUEUES = 8


def claim_in(
    driver: Driver, q: dict[str, str], cur: Any, params: dict[str, Any]
) -> tuple[Any, ...] | None:
    """Claim one run in the open transaction ``cur``: ``(run id, epoch, taken from)`` or None.

    ``params``: those of ``claim_next`` (owner, ttl_ms, accept, exclude, now_ms)."""
    full: list[str] = []
    for _ in range(MAX_FULL_QUEUES + 1):
        row = driver.fetchone(cur, q["claim_next"], {**params, "skip_queues": serde.dumps(full)})
        if row is None:
            return None
        run_id, epoch, taken_from, needs_check, queue = row
        if not needs_check:
            return (run_id, epoch, taken_from)
        driver.fetchone(cur, q["lock_queue"], {"queue": queue})
        got = driver.fetchone(cur, q["claim_checked"], {**params, "run_id": run_id})
        if got is not None:
            return tuple(got)
        full.append(str(queue))
    return None


__all__ = ["MAX_FULL_QUEUES", "claim_in"]
