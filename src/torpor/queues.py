"""Queues: named limits on how many runs start and run at once.

A run started with ``queue=`` is claimed by workers only while every limit of its queue has
room (see :mod:`torpor.store.claims` for how that is atomic on each backend):

- ``concurrency``: at most this many runs of the queue hold a slot at once;
- ``key_concurrency``: at most this many per concurrency key (one customer, one repository);
- ``rate_limit`` per ``rate_period_s``: at most this many runs of the queue *start* per period
  (a sliding window), and ``key_rate_limit`` per ``key_rate_period_s`` per key. A start is a
  run's first claim, or a worker's takeover of it after its holder died without releasing it
  (its work happens then): the takeover waits for room among the other runs' starts (not for
  its own earlier one) and restamps the run's start, so the runs after it count it (issue 36).

A run holds a slot from its first claim until it is finished — while it runs, and while it
waits (for a timer, a signal, an approval): "one active run per customer" means one *unfinished*
run. Slots are derived from the runs themselves, never counted separately, so a worker killed
while a run holds one leaks nothing: the run keeps its slot until whoever takes it over (lease
recovery) finishes it, and a run that already holds its slot is taken over whatever the
concurrency limits say (no deadlock behind them).

"Queued" is not a run status but a detail computed when read (:func:`why_not_running`): a
queued run is ``pending`` and unstarted; which limit holds it back changes whenever another run
starts or finishes, and recording it would mean writing to every queued run at each such
change (a second source of truth that could go stale).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .errors import BadInputError, CorruptRecordError
from .store.base import Dispatch

if TYPE_CHECKING:
    from .store.base import Store

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")

#: How many holders and recent starts a reason looks at (a queue's limits are small numbers).
_SCAN_LIMIT = 10_000


def check_name(what: str, name: str) -> str:
    """Refuse a queue or schedule name that is empty, too long or has odd characters."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise BadInputError(
            f"{what} name {name!r} is not valid: use 1-100 letters, digits, '_', '.', ':' or "
            "'-', starting with a letter or digit"
        )
    return name


def dispatch_for(
    queue: str | None,
    key: str | None,
    priority: int = 0,
    start_at: datetime | float | None = None,
) -> Dispatch:
    """A new run's :class:`~torpor.store.base.Dispatch` from ``Runtime.start``'s arguments.

    ``start_at``: an aware datetime, or epoch seconds. BadInputError for a key without a
    queue, a naive datetime, a priority that is not an integer within :data:`MAX_PRIORITY`
    either way, epoch seconds outside 0..:data:`MAX_START_AT_S`, or a malformed queue name."""
    if queue is not None:
        check_name("queue", queue)
    if key is not None and queue is None:
        raise BadInputError(f"concurrency key {key!r} given without a queue: keys are per queue")
    if key is not None and (not isinstance(key, str) or not key or len(key) > 200):
        raise BadInputError(f"concurrency key {key!r} must be a string of 1-200 characters")
    if (
        not isinstance(priority, int)
        or isinstance(priority, bool)
        or not -MAX_PRIORITY <= priority <= MAX_PRIORITY
    ):
        raise BadInputError(
            f"priority must be an integer from {-MAX_PRIORITY} to {MAX_PRIORITY}, not {priority!r}"
        )
    not_before_ms = None
    if isinstance(start_at, datetime):
        if start_at.tzinfo is None:
            raise BadInputError(
                f"start_at {start_at.isoformat()} has no time zone; give an aware datetime"
            )
        not_before_ms = int(start_at.timestamp() * 1000)
    elif isinstance(start_at, int | float) and not isinstance(start_at, bool):
        if not 0 <= start_at <= MAX_START_AT_S:  # (NaN fails too)
            raise BadInputError(
                f"start_at {start_at!r} is not epoch seconds from 0 to {MAX_START_AT_S} (year 9999)"
            )
        not_before_ms = int(start_at * 1000)
    elif start_at is not None:
        raise BadInputError(
            f"start_at must be an aware datetime or epoch seconds, not {start_at!r}"
        )
    return Dispatch(queue=queue, key=key, priority=priority, not_before_ms=not_before_ms)


@dataclass(frozen=True)
class QueueLimits:
    """A queue's limits; None: that limit does not apply. Periods in seconds."""

    name: str
    concurrency: int | None = None
    key_concurrency: int | None = None
    rate_limit: int | None = None
    rate_period_s: float | None = None
    key_rate_limit: int | None = None
    key_rate_period_s: float | None = None

    def describe(self) -> str:
        """``concurrency 2, per key 1, 10 starts per 60s`` (``unlimited`` when none)."""
        parts = []
        if self.concurrency is not None:
            parts.append(f"concurrency {self.concurrency}")
        if self.key_concurrency is not None:
            parts.append(f"per key {self.key_concurrency}")
        if self.rate_limit is not None:
            parts.append(f"{self.rate_limit} starts per {_secs(self.rate_period_s)}")
        if self.key_rate_limit is not None:
            per = _secs(self.key_rate_period_s)
            parts.append(f"{self.key_rate_limit} starts per key per {per}")
        return ", ".join(parts) or "unlimited"


def _secs(s: float | None) -> str:
    return f"{s:g}s" if s is not None else "?"


#: The largest limit a queue takes (a count of runs; larger means "no limit": omit it).
MAX_LIMIT = 1_000_000_000
#: A rate period's bounds in seconds: a millisecond (the store's clock resolution; a shorter
#: period would round to 0 and silently turn the limit off) to a year.
MIN_PERIOD_S = 0.001
MAX_PERIOD_S = 365 * 24 * 3600.0
#: The largest priority, either way.
MAX_PRIORITY = 1_000_000_000
#: The latest ``start_at`` (epoch seconds): 9999-12-31T23:59:59Z.
MAX_START_AT_S = 253_402_300_799


def _limit(what: str, n: int | None) -> int | None:
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_LIMIT):
        raise BadInputError(f"queue {what} must be an integer from 1 to {MAX_LIMIT}, not {n!r}")
    return n


def _period(what: str, limit: int | None, period_s: float | None) -> int | None:
    if limit is None:
        if period_s is not None:
            raise BadInputError(f"queue {what} period given without its limit")
        return None
    if not isinstance(period_s, int | float) or isinstance(period_s, bool) or not period_s > 0:
        raise BadInputError(f"queue {what} of {limit} needs a period in seconds > 0")
    if period_s < MIN_PERIOD_S:
        raise BadInputError(
            f"queue {what} period {period_s!r}s is below a millisecond: give at least "
            f"{MIN_PERIOD_S}s"
        )
    if period_s > MAX_PERIOD_S:
        raise BadInputError(
            f"queue {what} needs a period of at most {MAX_PERIOD_S:g}s (a year), not {period_s!r}"
        )
    return round(period_s * 1000)


class Queues:
    """Define, list and remove queues in a store (``Client(...).queues``)."""

    def __init__(self, store: Store):
        self.store = store

    def set(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        key_concurrency: int | None = None,
        rate_limit: int | None = None,
        rate_period_s: float | None = None,
        key_rate_limit: int | None = None,
        key_rate_period_s: float | None = None,
    ) -> QueueLimits:
        """Define queue ``name`` with these limits, replacing any it had (an omitted limit no
        longer applies). Takes effect at the next claim. BadInputError for a limit outside
        1..:data:`MAX_LIMIT`, or a rate limit without a period from :data:`MIN_PERIOD_S` to
        :data:`MAX_PERIOD_S` seconds."""
        check_name("queue", name)
        self.store.set_queue(
            name,
            concurrency=_limit("concurrency", concurrency),
            key_concurrency=_limit("key_concurrency", key_concurrency),
            rate_limit=_limit("rate_limit", rate_limit),
            rate_period_ms=_period("rate_limit", rate_limit, rate_period_s),
            key_rate_limit=_limit("key_rate_limit", key_rate_limit),
            key_rate_period_ms=_period("key_rate_limit", key_rate_limit, key_rate_period_s),
        )
        got = self.get(name)
        assert got is not None
        return got

    def get(self, name: str) -> QueueLimits | None:
        """The queue's limits, or None when it is not defined (its runs are not limited)."""
        row = self.store.queue_row(name)
        return None if row is None else _limits(row)

    def list(self) -> list[QueueLimits]:
        """Every defined queue, by name. CorruptRecordError naming the first damaged row."""
        return [_limits(r) for r in self.store.queue_rows()]

    def remove(self, name: str) -> bool:
        """Forget the queue's limits (its runs are then unlimited); False if it was unknown."""
        return self.store.delete_queue(name)


_LIMIT_COLUMNS = (
    "concurrency",
    "key_concurrency",
    "rate_limit",
    "rate_period_ms",
    "key_rate_limit",
    "key_rate_period_ms",
)


def _limits(row: tuple[object, ...]) -> QueueLimits:
    """A queue's limits from its row; CorruptRecordError naming the queue and the column for a
    damaged row (a limit that is not a positive integer)."""
    name, *values = row
    for column, v in zip(_LIMIT_COLUMNS, values, strict=True):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise CorruptRecordError(
                f"queue {str(name)[:100]!r} is damaged: {column} {repr(v)[:80]}"
            )
    conc, kconc, rate, rate_ms, krate, krate_ms = values

    def opt_s(v: object) -> float | None:
        return None if v is None else int(str(v)) / 1000

    return QueueLimits(
        str(name),
        conc,  # type: ignore[arg-type]
        kconc,  # type: ignore[arg-type]
        rate,  # type: ignore[arg-type]
        opt_s(rate_ms),
        krate,  # type: ignore[arg-type]
        opt_s(krate_ms),
    )


def _run_row(run_id: str, row: tuple[Any, ...]) -> tuple[Any, ...]:
    """The queue columns of a run's row (status, queue, key, priority, not_before_ms,
    started_at_ms) checked: CorruptRecordError naming the run and the column when damaged."""
    _status, queue, key, priority, not_before_ms, started_at_ms = row
    checks = (
        ("queue", queue, str),
        ("concurrency_key", key, str),
        ("not_before_ms", not_before_ms, int),
        ("started_at_ms", started_at_ms, int),
    )
    for column, v, kind in checks:
        if v is not None and (not isinstance(v, kind) or isinstance(v, bool)):
            raise CorruptRecordError(
                f"run {run_id!r} is damaged: {column} {repr(v)[:80]}", run_id=run_id
            )
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise CorruptRecordError(
            f"run {run_id!r} is damaged: priority {repr(priority)[:80]}", run_id=run_id
        )
    return row


def _holder(queue: str, r: tuple[Any, ...]) -> tuple[str, str | None, int]:
    """A row of a run holding a slot of ``queue`` (or started recently)."""
    run_id, key, started = r
    if not isinstance(started, int) or (key is not None and not isinstance(key, str)):
        raise CorruptRecordError(
            f"run {str(run_id)!r} of queue {queue!r} is damaged: started_at_ms "
            f"{repr(started)[:80]}, concurrency_key {repr(key)[:80]}",
            run_id=str(run_id),
        )
    return (str(run_id), key, started)


# --------------------------------------------------------------------------- why not running


@dataclass(frozen=True)
class QueueSnapshot:
    """What decides whether an unstarted run may start now, read in one snapshot: the run's
    queue, key and delayed start, its queue's limits, the runs holding a slot (first started
    first) and the starts within the longest rate period (latest first), as
    ``(run id, key, started_at_ms)``."""

    run_id: str
    queue: str | None
    key: str | None
    not_before_ms: int | None
    limits: QueueLimits | None
    active: tuple[tuple[str, str | None, int], ...] = ()
    recent: tuple[tuple[str, str | None, int], ...] = ()


def queue_reason(snap: QueueSnapshot, now_ms: int) -> str | None:
    """Why the unstarted run of ``snap`` is not running at ``now_ms`` (None: nothing holds it
    back but a free worker). Pure: the one place the wording comes from, for ``ls``, ``show``
    and the console. The first limit that binds is named, in the order the claim checks them:
    the delayed start, the queue's concurrency, the per-key concurrency, the queue's rate, the
    per-key rate."""
    if snap.not_before_ms is not None and snap.not_before_ms > now_ms:
        return f"delayed until {_utc(snap.not_before_ms)}"
    lim = snap.limits
    if lim is None:
        return None
    if lim.concurrency is not None and len(snap.active) >= lim.concurrency:
        holders = _holders(snap.active)
        return f"queued behind {holders} (queue {lim.name} limit {lim.concurrency})"
    if lim.key_concurrency is not None and snap.key is not None:
        same = tuple(a for a in snap.active if a[1] == snap.key)
        if len(same) >= lim.key_concurrency:
            return f"queued behind {_holders(same)} (per-key limit {lim.key_concurrency})"
    for limit, period_s, per_key in (
        (lim.rate_limit, lim.rate_period_s, False),
        (lim.key_rate_limit, lim.key_rate_period_s, True),
    ):
        if limit is None or period_s is None or (per_key and snap.key is None):
            continue
        period_ms = int(period_s * 1000)
        starts = [
            s[2]
            for s in snap.recent
            if s[2] > now_ms - period_ms and (not per_key or s[1] == snap.key)
        ]
        if len(starts) >= limit:
            until = starts[limit - 1] + period_ms  # when the limit-th latest start leaves
            scope = "per-key rate limit" if per_key else f"queue {lim.name} rate limit"
            return f"rate limited until {_utc(until)} ({scope} {limit} per {_secs(period_s)})"
    return None


#: How many of the runs holding the slots a reason names (then "and N more").
_NAMED_HOLDERS = 5


def _holders(active: tuple[tuple[str, str | None, int], ...]) -> str:
    """``run A`` / ``runs A, B`` / ``runs A, B, … and 3 more``: the runs holding the slots."""
    ids = [a[0] for a in active[:_NAMED_HOLDERS]]
    more = len(active) - len(ids)
    head = f"run {ids[0]}" if len(active) == 1 else "runs " + ", ".join(ids)
    return head + (f" and {more} more" if more else "")


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def queue_snapshot(store: Store, run_id: str) -> QueueSnapshot | None:
    """The :class:`QueueSnapshot` of an unstarted pending run; None for any other run (it is
    not held back by its queue). Read in one snapshot (:meth:`~torpor.store.base.Store.
    queue_view`); CorruptRecordError naming the run, or the queue, and the damaged column."""
    view = store.queue_view(run_id, _SCAN_LIMIT)
    if view is None:
        return None
    status, queue, key, _priority, not_before_ms, started_at_ms = _run_row(run_id, view.run)
    if status != "pending" or started_at_ms is not None:
        return None
    if queue is None:
        return QueueSnapshot(run_id, None, None, not_before_ms, None)
    limits = None if view.queue is None else _limits(view.queue)
    active: tuple[tuple[str, str | None, int], ...] = ()
    recent: tuple[tuple[str, str | None, int], ...] = ()
    if limits is not None:
        active = tuple(_holder(queue, r) for r in view.active)
        recent = tuple(_holder(queue, r) for r in view.recent)
    return QueueSnapshot(run_id, queue, key, not_before_ms, limits, active, recent)


def dispatch_of(store: Store, run_id: str) -> Dispatch | None:
    """The queue, key, priority and delayed start a run was started with (None: unknown run)."""
    row = store.run_queue_row(run_id)
    if row is None:
        return None
    _status, queue, key, priority, not_before_ms, _started = _run_row(run_id, row)
    return Dispatch(queue, key, priority, not_before_ms)


def left_to_workers(store: Store, run_id: str) -> bool:
    """True for a run started with a queue or a delayed start: only a worker starts it, under
    its queue's limits and not before its time (or ``torpor resume``, the documented override).
    Starting it again (same run id) only returns it, never executes it."""
    d = dispatch_of(store, run_id)
    return d is not None and (d.queue is not None or d.not_before_ms is not None)


def damaged_rows(store: Store, limit: int = 100_000) -> list[tuple[str, str]]:
    """``(row, what is wrong)`` for each damaged queue row and run whose queue columns are
    damaged (``torpor doctor``); empty when all are sound."""
    out: list[tuple[str, str]] = []
    queues, runs = store.queue_rows(), store.runs_queue_columns(limit)
    for row in queues:
        try:
            _limits(row)
        except CorruptRecordError as exc:
            out.append((f"queue {row[0]}", str(exc)))
    for run_id, *cols in runs:
        try:
            _run_row(str(run_id), tuple(cols))
        except CorruptRecordError as exc:
            out.append((f"run {run_id}", str(exc)))
    return out


def damaged_pending(store: Store, limit: int = 100) -> list[tuple[str, str]]:
    """``(run id, what is wrong)`` for pending runs whose queue columns are damaged (cheap
    enough for a worker to ask now and then: only such rows are read)."""
    rows = store.damaged_pending_queue_columns(limit)
    out: list[tuple[str, str]] = []
    for run_id, *cols in rows:
        try:
            _run_row(str(run_id), tuple(cols))
        except CorruptRecordError as exc:
            out.append((str(run_id), str(exc)))
    return out


def describe_dispatch(d: Dispatch) -> str:
    """``deploys (key api, priority 10, not before …)``; ``-`` for a run of no queue."""
    extra = []
    if d.key is not None:
        extra.append(f"key {d.key}")
    if d.priority:
        extra.append(f"priority {d.priority}")
    if d.not_before_ms is not None:
        extra.append(f"not before {_utc(d.not_before_ms)}")
    head = d.queue or "-"
    return f"{head} ({', '.join(extra)})" if extra else head


def why_not_running(store: Store, run_id: str) -> str | None:
    """Why run ``run_id`` is not running because of its queue or its delayed start ("queued
    behind run X (per-key limit 1)", "rate limited until …", "delayed until …"), or None."""
    snap = queue_snapshot(store, run_id)
    return None if snap is None else queue_reason(snap, store.now_ms())


__all__ = [
    "MAX_LIMIT",
    "MAX_PERIOD_S",
    "MAX_PRIORITY",
    "MAX_START_AT_S",
    "MIN_PERIOD_S",
    "QueueLimits",
    "QueueSnapshot",
    "Queues",
    "check_name",
    "damaged_pending",
    "damaged_rows",
    "describe_dispatch",
    "dispatch_for",
    "dispatch_of",
    "left_to_workers",
    "queue_reason",
    "queue_snapshot",
    "why_not_running",
]
