"""Schedules: start a workflow at the slots of a cron expression in a real time zone.

A schedule is stored with its zone name and its next fire as UTC epoch ms (see
:mod:`torpor.cron` for the syntax and the daylight-saving policy). Workers fire due schedules
(:func:`fire_due`, called from their loop about once a second):

- **one run per fire**, however many workers: the run id is the schedule's name and the slot's
  UTC time (``nightly@2026-03-08T22:00:00Z``) and starting a run is idempotent, so two workers
  firing the same slot make one run; the schedule's next fire then moves on with a
  compare-and-set (a worker that lost the race, or read a definition since edited, changes
  nothing). A worker killed between the two is harmless: the next one makes the same run id.
- **editing replaces** (``add`` again with the same name): the next fire is recomputed from
  the later of now and the last slot fired, so no slot fires twice — and a slot fired under the
  old definition keeps its run, whose id the new definition would give it too. An edit while a
  slot is due but not fired yet keeps it due: the edited definition's slots from the old due
  point on are caught up by its policy, as the same downtime without an edit would be.
- **catch-up after downtime** (slots missed while no worker ran), per schedule:
  ``one`` (default): the latest missed slot fires, once; ``all``: every missed slot fires, up to
  :data:`MAX_CATCHUP` (the latest ones); ``skip``: missed slots are dropped, a slot fires only
  while it is at most :data:`ON_TIME_S` late.
- ``pause`` stops firing; ``resume`` fires again from the next slot after now (slots of the
  paused period are not caught up).

Slots are judged by the store's clock (``store.now_ms()``, the one timers use).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from . import serde
from .cron import fires_between, next_fire_ms, parse_cron, zone
from .errors import BadInputError, CorruptRecordError, NotSerializable, TorporError
from .queues import check_name
from .workflows import accepted_versions

if TYPE_CHECKING:
    from .runtime import Runtime
    from .store.base import Store

log = logging.getLogger("torpor.schedules")

CATCHUP_POLICIES = ("one", "all", "skip")
#: ``all``: at most this many missed slots fire after a downtime (the latest ones).
MAX_CATCHUP = 1000
#: ``skip``: how late a slot may be and still fire.
ON_TIME_S = 60.0
#: A schedule that could not fire (its zone unknown on the worker's host, a stored cron that
#: does not parse, a damaged row) is tried again this much later (``retry_at_ms``), its
#: ``last_error`` recorded.
SCHEDULE_RETRY_S = 60.0
#: How much of an error a schedule records.
MAX_ERROR_CHARS = 500
#: (store, schedule, error) this process already logged: each is logged once.
_LOGGED: set[tuple[str, str, str]] = set()


@dataclass(frozen=True)
class Schedule:
    """A stored schedule. ``next_fire_ms``/``last_fire_ms``: UTC epoch ms; ``generation``
    grows with every edit, pause and resume."""

    name: str
    workflow: str
    input: Any
    cron: str
    tz: str
    catchup: str
    queue: str | None
    paused: bool
    next_fire_ms: int
    last_fire_ms: int | None
    generation: int
    last_error: str | None = None
    retry_at_ms: int | None = None

    @property
    def next_fire(self) -> datetime:
        """The next fire as an aware datetime in the schedule's zone (in UTC when that zone is
        unknown on this host: a listing still shows it, and ``last_error`` says why)."""
        at = datetime.fromtimestamp(self.next_fire_ms / 1000, UTC)
        try:
            return at.astimezone(zone(self.tz))
        except BadInputError:
            return at


#: The longest workflow name a schedule takes.
MAX_WORKFLOW_CHARS = 200


def check_workflow_name(schedule: str, workflow: object) -> str:
    """Refuse a schedule's workflow name that no registered workflow could have: not a string,
    empty, over :data:`MAX_WORKFLOW_CHARS`, with spaces at either end or characters that are
    not printable (control codes, terminal escapes). BadInputError naming the schedule."""
    if (
        not isinstance(workflow, str)
        or not 1 <= len(workflow) <= MAX_WORKFLOW_CHARS
        or workflow != workflow.strip()
        or not workflow.isprintable()
    ):
        shown = repr(workflow) if not isinstance(workflow, str) else repr(workflow[:60])
        raise BadInputError(
            f"schedule {schedule!r}: workflow name {shown} is not valid: use 1-"
            f"{MAX_WORKFLOW_CHARS} printable characters, a registered workflow's name"
        )
    return workflow


def slot_run_id(name: str, slot_ms: int) -> str:
    """The run id of a schedule's slot: ``NAME@YYYY-MM-DDTHH:MM:SSZ`` (UTC)."""
    stamp = datetime.fromtimestamp(slot_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{name}@{stamp}"


def _schedule(row: tuple[Any, ...]) -> Schedule:
    """A schedule from its row; CorruptRecordError naming the schedule and the column for a
    row that was damaged (edited by hand, written by something else)."""
    name, workflow, text, cron, tz, catchup, queue, paused, nxt, last, gen, error, retry = row

    def bad(column: str, value: object) -> CorruptRecordError:
        shown = repr(value)[:80]
        return CorruptRecordError(f"schedule {str(name)[:100]!r} is damaged: {column} {shown}")

    for column, value in (("workflow", workflow), ("cron", cron), ("tz", tz)):
        if not isinstance(value, str):
            raise bad(column, value)
    if catchup not in CATCHUP_POLICIES:
        raise bad("catchup", catchup)
    if queue is not None and not isinstance(queue, str):
        raise bad("queue", queue)
    for column, value in (
        ("next_fire_ms", nxt),
        ("last_fire_ms", last),
        ("generation", gen),
        ("retry_at_ms", retry),
    ):
        optional = column in ("last_fire_ms", "retry_at_ms")
        if not (isinstance(value, int) or (value is None and optional)):
            raise bad(column, value)
    if not isinstance(text, str):
        raise bad("input", text)
    try:
        data = serde.loads(text)
    except ValueError:
        raise bad("input", text) from None
    return Schedule(
        str(name),
        workflow,
        data,
        cron,
        tz,
        catchup,
        queue,
        bool(paused),
        nxt,
        last,
        gen,
        None if error is None else str(error),
        retry,
    )


class Schedules:
    """Add, list, pause, resume and remove schedules in a store (``Client(...).schedules``)."""

    def __init__(self, store: Store):
        self.store = store

    def add(
        self,
        name: str,
        *,
        cron: str,
        workflow: str,
        tz: str = "UTC",
        input: Any = None,
        catchup: str = "one",
        queue: str | None = None,
    ) -> Schedule:
        """Schedule runs of ``workflow`` with ``input`` at the slots of ``cron`` in zone ``tz``
        (an IANA name), replacing a schedule of that name. Runs start in ``queue`` when given.
        BadInputError for a malformed name, expression, zone, catch-up policy or input."""
        check_name("schedule", name)
        c = parse_cron(cron)
        z = zone(tz)
        if catchup not in CATCHUP_POLICIES:
            raise BadInputError(
                f"catch-up policy {catchup!r} is not one of {', '.join(CATCHUP_POLICIES)}"
            )
        if queue is not None:
            check_name("queue", queue)
        check_workflow_name(name, workflow)
        try:
            text = serde.dumps(serde.to_jsonable(input))
        except NotSerializable as exc:
            raise BadInputError(f"schedule {name!r}: input is not serializable: {exc}") from None
        now = self.store.now_ms()
        try:
            old = self.get(name)
        except CorruptRecordError:
            old = None  # a damaged schedule is replaced whole (its last fire is not known)
        self.store.put_schedule(
            name,
            workflow=workflow,
            input_json=text,
            cron=cron,
            tz=tz,
            catchup=catchup,
            queue=queue,
            next_fire_ms=_edited_next_fire(c, z, old, now),
            now_ms=now,
        )
        return self._must(name)

    def _must(self, name: str) -> Schedule:
        got = self.get(name)
        if got is None:
            raise BadInputError(f"no schedule named {name!r}")
        return got

    def get(self, name: str) -> Schedule | None:
        """The schedule, or None."""
        row = self.store.schedule_row(name)
        return None if row is None else _schedule(row)

    def list(self) -> list[Schedule]:
        """Every schedule, by name. CorruptRecordError naming the first damaged row."""
        return [_schedule(r) for r in self.store.schedule_rows()]

    def remove(self, name: str) -> bool:
        """Delete the schedule (runs it made stay); False if there was none."""
        return self.store.delete_schedule(name)

    def pause(self, name: str) -> Schedule:
        """Stop firing until :meth:`resume`. BadInputError for an unknown name."""
        self._must(name)
        self.store.pause_schedule(name, paused=True, next_fire_ms=None)
        return self._must(name)

    def resume(self, name: str) -> Schedule:
        """Fire again from the first slot after now (the paused period is not caught up)."""
        s = self._must(name)
        now = self.store.now_ms()
        nxt = next_fire_ms(parse_cron(s.cron), zone(s.tz), max(now, s.last_fire_ms or 0))
        self.store.pause_schedule(name, paused=False, next_fire_ms=nxt, now_ms=now)
        return self._must(name)

    def next_fire_ms(self) -> int | None:
        """The earliest next fire of the schedules not paused (UTC epoch ms), or None."""
        at = self.store.next_schedule_fire_ms()
        return at if isinstance(at, int) else None


def _edited_next_fire(c: Any, z: Any, old: Schedule | None, now: int) -> int:
    """The next fire of a schedule added at ``now`` (UTC epoch ms), replacing ``old`` if any.

    A new schedule fires from the first slot after now; an edit, never at a slot already fired
    (after the later of now and the last fire). An edit while a slot is due but not fired yet
    (no worker ran since; ``old.next_fire_ms <= now``, not paused) keeps the catch-up: the next
    fire is the edited definition's first slot from the old due point on (after the last fire),
    so the slots due meanwhile fire by the catch-up policy as they would have without the edit
    (issue 36, field card C33: the edit used to drop them for good)."""
    if old is None:
        return next_fire_ms(c, z, now)
    last = old.last_fire_ms or 0
    if not old.paused and old.next_fire_ms <= now:
        return next_fire_ms(c, z, max(old.next_fire_ms - 1, last))
    return next_fire_ms(c, z, max(now, last))


def note_damaged(store: Store) -> int:
    """Log, once per process, each schedule row that cannot be decoded (a worker's periodic
    check: such a row may never come due, e.g. a next fire that is not a number). Returns how
    many there are."""
    n = 0
    for row in store.schedule_rows():
        try:
            _schedule(row)
        except CorruptRecordError as exc:
            n += 1
            _log_once(store, str(row[0]), str(exc))
    return n


def schedule_problems(store: Store) -> list[tuple[str, str]]:
    """``(schedule, what is wrong)`` for each schedule that is damaged, whose cron or zone
    cannot be computed on this host, or that last failed to fire (``torpor doctor``)."""
    out: list[tuple[str, str]] = []
    for row in store.schedule_rows():
        try:
            s = _schedule(row)
            parse_cron(s.cron)
            zone(s.tz)
        except TorporError as exc:
            out.append((f"schedule {row[0]}", str(exc)))
            continue
        if s.last_error:
            out.append((f"schedule {s.name}", f"last failed to fire: {s.last_error}"))
    return out


def due_slots(s: Schedule, now_ms: int) -> list[int]:
    """The slots of a due schedule that fire at ``now_ms``, by its catch-up policy."""
    c, z = parse_cron(s.cron), zone(s.tz)
    after = s.next_fire_ms - 1  # next_fire_ms itself is a slot
    if s.catchup == "all":
        return fires_between(c, z, after, now_ms, MAX_CATCHUP)
    latest = fires_between(c, z, after, now_ms, 1)
    if s.catchup == "skip":
        return [t for t in latest if now_ms - t <= ON_TIME_S * 1000]
    return latest


def fire_due(runtime: Runtime, limit: int = 100) -> list[str]:
    """Fire the due schedules whose workflow this process has registered: start the run of
    each slot due (idempotently) and move the schedule on. Returns the run ids started (or
    found already started by another worker). Safe to call from any number of workers."""
    store = runtime.store
    now = store.now_ms()
    served = accepted_versions()
    rows = store.due_schedule_rows(now, limit)
    fired: list[str] = []
    for row in rows:
        try:
            s = _schedule(row)
        except CorruptRecordError as exc:
            _could_not_fire(store, row, now, str(exc))
            continue
        if s.workflow not in served:
            continue  # a worker that has it fires it
        try:
            slots = due_slots(s, now)
            ids = [slot_run_id(s.name, t) for t in slots]
            for rid in ids:
                runtime.start(s.workflow, s.input, run_id=rid, queue=s.queue)
            nxt = next_fire_ms(parse_cron(s.cron), zone(s.tz), max(now, s.next_fire_ms))
        except TorporError as exc:
            _could_not_fire(store, row, now, f"could not fire: {exc}")
            continue
        store.advance_schedule(
            s.name,
            generation=s.generation,
            prev_fire_ms=s.next_fire_ms,
            next_fire_ms=nxt,
            last_fire_ms=slots[-1] if slots else None,
            now_ms=now,
        )
        fired.extend(ids)
    return fired


def _log_once(store: Store, name: str, error: str) -> None:
    if (store.url, name, error) not in _LOGGED:
        _LOGGED.add((store.url, name, error))
        log.error("schedule %s: %s (retried every %gs until fixed; see torpor schedule ls)",
                  name, error, SCHEDULE_RETRY_S)  # fmt: skip


def _could_not_fire(store: Store, row: tuple[Any, ...], now: int, error: str) -> None:
    """Record on the schedule why it could not fire and retry it :data:`SCHEDULE_RETRY_S`
    later, its next fire kept: once it can fire, the slots missed meanwhile are caught up by its
    policy (compare-and-set on the values read, damaged or not). Logged once per process."""
    _log_once(store, str(row[0]), error)
    store.fail_schedule(
        row[0],
        generation=row[10],
        prev_fire_ms=row[8],
        retry_at_ms=now + int(SCHEDULE_RETRY_S * 1000),
        error=error[:MAX_ERROR_CHARS],
        now_ms=now,
    )


__all__ = [
    "CATCHUP_POLICIES",
    "MAX_CATCHUP",
    "ON_TIME_S",
    "SCHEDULE_RETRY_S",
    "Schedule",
    "Schedules",
    "due_slots",
    "fire_due",
    "note_damaged",
    "schedule_problems",
    "slot_run_id",
]
