"""Claiming a run under its queue's limits, atomically on every backend.

A queue's slots are not a counter: they are derived from the run rows (a run of the queue
holds a slot from its first claim, ``started_at_ms``, until it is ``finished``), so a worker
killed while holding one leaks nothing; whoever takes the run over (lease expiry, a dead owner
proven on its host) continues it in the same slot. Rate limits count the runs started within
their period, a takeover being a start (it waits for room among the other runs' starts and
restamps ``started_at_ms``; migration 0016 on PostgreSQL).

- **SQLite**: ``claim_next`` is one statement that checks every limit, under the write lock of
  ``BEGIN IMMEDIATE``: no other process can claim between its count and its update.
- **PostgreSQL**: ``claim_next`` locks the best candidate (``FOR UPDATE SKIP LOCKED``) and claims
  it at once when no limit applies to it (no queue, a queue without limits, or a run that
  already holds its slot). Otherwise the counts it saw may be stale (two workers claiming two
  runs of one queue at once would both see room), so it calls ``torpor_claim_checked``
  (migration 0005): that function takes the queue's transaction-scoped advisory lock, then
  counts with a fresh snapshot — one taken after every earlier claim of the queue committed —
  and claims, all in the same statement (one round trip, as a claim without a queue). A queue
  found full is skipped and the next candidate tried, a few times, each in a transaction of
  its own (so a claim never holds two queues' locks). Only the first :data:`TOP_K` runnable
  runs are checked against their limits, once per queue and once per (queue, key); all of
  them only when none of those can be claimed.
"""

from __future__ import annotations

from typing import Any

from .. import serde
from .base import Driver

#: Queues found full that one claim skips before giving up until the next wakeup.
MAX_FULL_QUEUES = 8
#: PostgreSQL: how many runs, first in claim order, a claim checks against their queue's limits
#: before it looks further (only when none of those could be claimed).
TOP_K = 16
_ALL = 1 << 62


def claim(driver: Driver, q: dict[str, str], params: dict[str, Any]) -> tuple[Any, ...] | None:
    """Claim one run: ``(run id, epoch, taken from)``, or None when none can be.

    Each attempt is one statement committed on its own (:meth:`.Driver.fetch_one`): on
    PostgreSQL the queue's lock is released as the statement commits, without a round trip to
    this process in between, and an attempt that found its candidate's queue full holds no lock
    when the next one skips the queue (a claim never holds two queues' locks).
    ``params``: those of ``claim_next`` (owner, ttl_ms, accept, exclude, now_ms)."""
    full: list[str] = []
    top_k = TOP_K
    for _ in range(MAX_FULL_QUEUES + 2):
        row = driver.fetch_one(
            _with_top_k(q["claim_next"], top_k),
            {**params, "skip_queues": serde.dumps(full), "top_k": top_k},
        )
        if row is None:
            return None
        considered, run_id, epoch, taken_from, needs_check, queue = row
        if run_id is None:
            if considered < top_k:
                return None  # every runnable run was looked at
            top_k = _ALL  # the first ones are all held back: look at every runnable run
            continue
        if epoch is not None:
            return (run_id, epoch, taken_from)
        assert needs_check  # a candidate that needs no check is claimed
        full.append(str(queue))
    return None


_TOP_K_SQL: dict[tuple[str, int], str] = {}


def _with_top_k(sql: str, top_k: int) -> str:
    """``claim_next`` with ``LIMIT :top_k`` written as the number: one statement text per
    :data:`TOP_K` and "all", each prepared on its own. A generic plan (no argument values;
    the appender's plans, :mod:`torpor.store.postgres`) would estimate ``LIMIT $n`` as a tenth
    of the runnable runs (1,700 on the scale bench's store, not 16) and plan the queue checks
    after it for that many. (SQLite's query has no such limit: unchanged.)"""
    key = (sql, top_k)
    got = _TOP_K_SQL.get(key)
    if got is None:
        got = _TOP_K_SQL[key] = sql.replace("LIMIT :top_k", f"LIMIT {int(top_k)}")
    return got


__all__ = ["MAX_FULL_QUEUES", "TOP_K", "claim"]
