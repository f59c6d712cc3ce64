"""The one recording seam of an execution. Every primitive — a step, an effect, a wait, an
approval, an artifact, a model call, an agent's plan — records through a :class:`Journal`, in
the same order:

1. :meth:`Journal.next_id` — a stable id: the primitive's name, ``name#2``, ``name#3`` … when
   one execution asks for it again (as Absurd does);
2. :meth:`Journal.boundary` — honour a lost lease, inbox messages, a cancel, a shutdown;
3. :meth:`Journal.recorded` — the recorded completion, if any: replay returns it (G1);
4. the work — the caller's;
5. :meth:`Journal.append` — fold the new facts into the state (G4) and append them in one
   transaction under the lease's fence.

:meth:`Journal.record` does all five for a step whose work yields a value and facts to record
(a patch marker, a verification, a warning, a model call, an agent's plan); steps, effects and
waits build on the same calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NamedTuple, Protocol

from .. import blobs, faults, serde
from ..artifacts import ArtifactStore
from ..errors import (
    Cancelled,
    CorruptRecordError,
    LeaseLostError,
    NonDeterminismError,
    NotDecodable,
    NotSerializable,
    PayloadError,
    RecordedValueError,
    ReleaseRun,
    RunStopped,
    StoreFileChangedError,
    TorporError,
    TransitionError,
)
from ..history import (
    Event,
    LeaseAcquired,
    Outcome,
    Payload,
    Policy,
    RunState,
    RunStatus,
    StepCompleted,
    StepStarted,
    WaitCompleted,
    WaitInfo,
    apply,
    crashed_attempts,
    type_of,
    utc_text,
)
from ..keys import Trust
from ..store.base import Completion, Lease, Store
from .replay import Replay

#: Crashed attempts of one step after which a run is parked ``blocked`` by default.
DEFAULT_CRASH_LIMIT = 5


class Observer(Protocol):
    """Watches an execution's records (:class:`torpor.telemetry.attempt.AttemptTrace`): told
    at each boundary and after each append. It must not raise."""

    def mark(self) -> None: ...

    def appended(self, events: list[Event], state: RunState) -> None: ...


class Host(Protocol):
    """What an execution needs from the runtime that hosts it (:class:`torpor.Runtime`)."""

    @property
    def store(self) -> Store: ...

    @property
    def artifacts(self) -> ArtifactStore: ...

    @property
    def signing_key(self) -> bytes:
        """The local shared key: keyed hashes of secret values (G12)."""
        ...

    @property
    def trust(self) -> Trust:
        """Verifies approval decisions against the trusted keyring (G6)."""
        ...

    @property
    def auto_approve(self) -> str | None:
        """The approver name of this process's ``--auto-approve`` flag (policy decisions)."""
        ...

    @property
    def stopping(self) -> threading.Event:
        """Set to make executions release their run at the next boundary (shutdown)."""
        ...

    @property
    def on_event(self) -> Callable[[Event], None] | None: ...


#: True while a step's own work runs (a step's or an effect's function, a recorded step's
#: ``work``): the step records its outcome as a whole, so a primitive used inside it — a draw
#: (``run.now()`` in ``run.step("t0", run.now)``) — is not recorded on its own (on replay the
#: step's function does not run, and its inner records would shift every later id). A
#: ContextVar: per asyncio task, and copied into the thread of an attempt under a timeout.
_IN_WORK: ContextVar[bool] = ContextVar("torpor_in_work", default=False)


@contextmanager
def step_work(j: Journal | None = None, sid: str = "") -> Iterator[None]:
    """Mark the code run inside it as a step's own work (see :func:`in_step_work`); given the
    journal, the executing thread is noted busy in step ``sid`` meanwhile (:func:`busy_in`)."""
    token = _IN_WORK.set(True)
    mark = j is not None and j.busy is None  # (inline: this runs around every step)
    if mark:
        j.busy = (sid, time.monotonic())  # type: ignore[union-attr]
    try:
        yield
    finally:
        _IN_WORK.reset(token)
        if mark:
            j.busy = None  # type: ignore[union-attr]


@contextmanager
def busy_in(j: Journal, sid: str) -> Iterator[None]:
    """Note the executing thread busy in step ``sid`` (:attr:`Journal.busy`; the outermost
    step of nested ones): the heartbeat records a cancel meanwhile (:mod:`.cancel`)."""
    if j.busy is not None:
        yield
        return
    j.busy = (sid, time.monotonic())
    try:
        yield
    finally:
        j.busy = None


def in_step_work() -> bool:
    """Whether the caller runs inside a step's own work (its outcome recorded by the step)."""
    return _IN_WORK.get()


class Recorded(NamedTuple):
    """What :meth:`Journal.record` gives back: the step's id, its (recorded) result, and
    whether it was recorded just now (False: replayed from the history)."""

    step_id: str
    result: Any
    new: bool


class Journal:
    """The recording seam of one execution of one run under one lease (see the module
    docstring). ``state`` is the folded state after every event appended so far."""

    def __init__(self, host: Host, lease: Lease, state: RunState, replay: Replay):
        #: The size of the value :meth:`jsonable` encoded last (bytes; 0 when not measured).
        self.last_size = 0
        self.host = host
        self.store = host.store
        self.lease = lease
        self.state = state
        self.replay = replay
        self.run_id = state.run_id
        #: Uses of each id base in this execution (``name``, ``name#2`` …).
        self.counters: dict[str, int] = {}
        #: The id of the primitive being executed (named by a divergence error).
        self.asked: str | None = None
        #: Set by the heartbeat when the lease was lost; raised at the next boundary or write.
        self.lost: LeaseLostError | StoreFileChangedError | None = None
        #: Set when inbox messages may be pending (at start, and by the heartbeat).
        self.inbox_dirty = True
        #: Applies pending inbox messages (:func:`torpor.engine.inbox.sync`, set by the
        #: execution: the inbox converts messages with the engine's rules).
        self.sync_inbox: Callable[[Journal], None] = lambda j: None
        #: The lease goes into the history with this execution's first write, so an execution
        #: that writes nothing (a wait not yet due, a refused replay) leaves the history as is.
        self.lease_recorded = False
        #: Set when this execution took over a lease its holder never released (the last
        #: execution died): step starts are recorded before the body runs until the first new
        #: step completes, so a step that kills its process is seen and parked.
        self.careful = lease.taken_from is not None
        #: Crashed attempts of one step after which the run is parked ``blocked`` (the
        #: workflow's ``crash_limit``; 0: no limit).
        self.crash_limit = DEFAULT_CRASH_LIMIT
        #: Whether the workflow takes steering messages (its ``steerable``, set by the
        #: execution): when not, the inbox refuses one on the record as it arrives.
        self.steerable = True
        #: Told of every boundary and append (telemetry); None when nothing watches.
        self.observer: Observer | None = None
        #: Events folded into the state but not yet written (:meth:`defer`): an effect's plain
        #: observation, which rides on the next append (:meth:`flush` at the latest).
        self.pending: list[Event] = []
        #: Held while events are folded and written: the heartbeat thread writes deferred
        #: events of an execution busy elsewhere (:meth:`flush_idle`).
        self.writing = threading.RLock()
        #: ``(step id, monotonic start)`` while the executing thread runs a step's own work
        #: (:func:`step_work`): the heartbeat records a cancel meanwhile (:mod:`.cancel`).
        self.busy: tuple[str, float] | None = None
        #: The store's identity as this host pinned it (:mod:`torpor.engine.highwater`): what
        #: signed decisions must name (G16); "" until the runtime checked it.
        self.store_identity = ""
        #: After a restore a person accepted: new effects are reconciled with the outside
        #: world before they are called while the history is before this seq (0: never).
        self.reconcile_until = 0
        #: Called by the heartbeat after each renewal (the runtime advances this host's
        #: high-water mark there); None: nothing to do.
        self.on_renewed: Callable[[Journal], None] | None = None
        #: The highest seq of this run's history known committed: loaded, or written by an
        #: append the store acknowledged (what the high-water mark advances to; never a seq
        #: folded into the state by an append that failed).
        self.committed_seq = state.seq

    # ------------------------------------------------------------------ the seam

    def next_id(self, name: str) -> str:
        """The step id for this use of ``name`` in this execution."""
        n = self.counters.get(name, 0) + 1
        self.counters[name] = n
        sid = name if n == 1 else f"{name}#{n}"
        self.asked = sid
        return sid

    def boundary(self) -> None:
        """Called before every primitive: honour a lost lease, inbox messages, a cancel
        (:class:`Cancelled`) and a shutdown (:class:`ReleaseRun`)."""
        if self.lost is not None:
            raise self.lost
        if self.inbox_dirty:
            self.sync()
        if self.state.cancel_requested:
            raise Cancelled(self.state.cancel_reason or "cancelled")
        if self.host.stopping.is_set():
            raise ReleaseRun("worker shutting down")
        if self.observer is not None:
            self.observer.mark()

    def sync(self) -> None:
        """Move pending inbox messages into the history now (from the executing thread, or
        the heartbeat's while that thread is busy in a step: one at a time)."""
        with self.writing:
            self.inbox_dirty = False
            self.sync_inbox(self)

    def recorded(self, sid: str, policy: Policy) -> Completion | None:
        """The recorded completion of step ``sid`` (NonDeterminismError if it was recorded
        under another policy), or None."""
        return self.replay.matching(sid, policy)

    def append(
        self,
        *payloads: Payload,
        wake_at_ms: int | None = None,
        if_inbox_empty: bool = False,
        consumes: list[tuple[str, int]] | None = None,
        by_code: bool = True,
        lease: bool = True,
    ) -> list[Event]:
        """Fold ``payloads`` into the state (TransitionError, state unchanged, for an impossible
        one) and append them in one transaction under the lease (see
        :meth:`torpor.store.base.Store.append` for the keyword arguments). The execution's
        first write also records its lease. A write ``by_code`` (a primitive the workflow asked
        for, as opposed to the engine's own: inbox messages, a takeover's verdicts, the
        outcome) passes the replay gate first: after a replay, the code must have caught up
        with the history, and the first such write carries the version change. ``lease=False``:
        a note that does not take the run (why it cannot proceed) records no lease."""
        with self.writing:
            return self._append(payloads, wake_at_ms, if_inbox_empty, consumes, by_code, lease)

    def _append(
        self,
        payloads: tuple[Payload, ...],
        wake_at_ms: int | None,
        if_inbox_empty: bool,
        consumes: list[tuple[str, int]] | None,
        by_code: bool,
        lease: bool,
    ) -> list[Event]:
        if self.lost is not None:
            raise self.lost
        first = self.replay.before_write(self.asked) if by_code else None
        w = self.state.wait
        mine = w is None or f"{self.asked}/".startswith(f"{w.wait_id}/")  # (/…: its escalation)
        if by_code and w is not None and not mine and not _ends(payloads, w):
            # The history has the run waiting; code that asks for anything else first left the
            # recorded path (a step inserted before the wait, say): nothing is written. A wait
            # a primitive started on its own (an effect's approval) it may end itself.
            raise NonDeterminismError(
                f"run {self.run_id!r}: the code asked for step {self.asked!r} where the history "
                f"has the run waiting ({w.wait_id}); the code no longer matches this run at "
                "that point. Resume it with the code it was recorded under, or keep recorded "
                'runs on the old path with `if run.patched("<change>"):`. Nothing was recorded.'
            )
        batch = list(payloads) if not first else [*first, *payloads]
        record_lease = (
            lease and not self.lease_recorded and self.state.status is not RunStatus.FINISHED
        )
        if record_lease:
            # (A finished run takes only its reopening first; the lease follows in the next
            # write, because the fold refuses a lease record on a finished run.)
            batch.insert(0, LeaseAcquired(owner=self.lease.owner, epoch=self.lease.epoch))
            consumes = [(mid, seq + 1) for mid, seq in consumes or ()]
        events = self._fold(batch)
        if self.state.status is RunStatus.WAITING and wake_at_ms is None and self.state.wait:
            wake_at_ms = self.state.wake_due()
        self._write([*self.pending, *events], wake_at_ms, consumes, if_inbox_empty)
        if first is not None:
            self.replay.passed()
        if record_lease:
            self.lease_recorded = True
            faults.point("lease.acquired")
        return events

    def defer(self, *payloads: Payload) -> list[Event]:
        """Fold ``payloads`` into the state now and write them with the next append, in its
        statement and transaction (an effect's plain observation: so an effect costs one
        durable append, its intent, with its observation riding on the next one). At the
        latest they are written by :meth:`flush`, which the execution calls before it ends
        (a return, a wait, a release, an error). Until then they exist only in this process:
        a process killed meanwhile leaves the effect intended but not observed, reconciled
        on recovery (README, "When things go wrong")."""
        if self.lost is not None:
            raise self.lost
        with self.writing:
            events = self._fold(list(payloads))
            self.pending.extend(events)
        faults.point("append.deferred")
        return events

    def flush(self) -> None:
        """Write the deferred events (:meth:`defer`) now, if any: one plain append."""
        if not self.pending:
            return
        if self.lost is not None:
            raise self.lost
        with self.writing:
            if self.pending:
                self._write(list(self.pending), None, None, False)

    def flush_idle(self) -> None:
        """From the heartbeat thread: write the deferred events when the execution is not
        writing at that moment (it would carry them itself), so work that records nothing
        after an effect leaves its observation in this process for at most one heartbeat.
        Reaches no fault point: those count the executing thread's writes, in order."""
        if not self.pending or self.lost is not None or not self.writing.acquire(blocking=False):
            return
        try:
            if self.pending:
                self._write(list(self.pending), None, None, False, points=False)
        finally:
            self.writing.release()

    def _write(
        self,
        events: list[Event],
        wake_at_ms: int | None,
        consumes: list[tuple[str, int]] | None,
        if_inbox_empty: bool,
        points: bool = True,
    ) -> None:
        """Append ``events`` (the deferred ones first), folded into the state already."""
        if points:
            faults.point("append.before")
        try:
            self.store.append(
                self.lease,
                events,
                self.state,
                wake_at_ms=wake_at_ms,
                consumes=consumes or (),
                if_inbox_empty=if_inbox_empty,
                new_steps=self.replay.proven_new(events),
            )
        except BaseException:
            if self.lost is None:
                self._reload()
            raise
        self.pending = []
        self.committed_seq = max(self.committed_seq, events[-1].seq if events else 0)
        if points:
            faults.point("append.after")
        self.replay.appended(events)
        if self.observer is not None:
            self.observer.appended(events, self.state)
        on_event = self.host.on_event
        if on_event is not None:
            for ev in events:
                on_event(ev)

    def _reload(self) -> None:
        """The state as recorded, with the deferred events folded again (nothing was written:
        they are still to be written)."""
        state = self.store.load(self.run_id)
        self.committed_seq = max(self.committed_seq, state.seq)
        for ev in self.pending:
            apply(state, ev)
        self.state = state

    def _fold(self, payloads: list[Payload]) -> list[Event]:
        """The events of ``payloads``, folded into the state; on a refused one the state is
        reloaded (nothing was written) and the TransitionError raised."""
        now = self.now_ms()
        events: list[Event] = []
        state, epoch = self.state, self.lease.epoch
        try:
            for p in payloads:
                ev = Event(
                    run_id=self.run_id,
                    seq=state.seq + 1,
                    type=type_of(p),
                    payload=p,
                    at_ms=now,
                    epoch=epoch,
                )
                apply(state, ev)
                events.append(ev)
        except TransitionError:
            self._reload()  # undo the partial application
            raise
        return events

    # ------------------------------------------------------------------ recording helpers

    def record(
        self,
        name: str,
        work: Callable[[str], tuple[Any, list[Payload]]],
        *,
        policy: Policy = Policy.READ,
        purpose: str = "",
        input_hash: str | None = None,
        boundary: bool = True,
    ) -> Recorded:
        """A whole step through the seam: a fresh id for ``name``, the boundary (skipped with
        ``boundary=False``: the outcome of calls recorded while a run is being cancelled), the
        recorded result on replay (a compute step's only while its ``input_hash`` matches), or
        else ``work(step_id) -> (result, facts)`` and one append of the step's start, the facts
        and its completion with the result (recorded in the typed encoding, PayloadError naming
        the step; the result given back is the recorded value read back: the same before and
        after a replay)."""
        sid = self.next_id(name)
        if boundary:
            self.boundary()
        comp = self.recorded(sid, policy)
        if comp is not None and (policy is not Policy.COMPUTE or comp.input_hash == input_hash):
            return Recorded(sid, self.value(sid, comp.result), False)
        with step_work(self, sid):
            result, facts = work(sid)
        data = self.jsonable(sid, result)
        self.append(*self.step_events(sid, policy, data, facts, purpose, input_hash))
        return Recorded(sid, self.value(sid, data), True)

    def step_events(
        self,
        sid: str,
        policy: Policy,
        result: Any,
        facts: Sequence[Payload] = (),
        purpose: str = "",
        input_hash: str | None = None,
    ) -> list[Payload]:
        """The events of a step that ran here with ``result``: one ``step_completed`` recording
        the whole attempt (a read/compute step with nothing else to record), else its
        ``step_started``, the ``facts``, and its completion."""
        attempt = self.next_attempt(sid)
        if not facts and policy in (Policy.READ, Policy.COMPUTE):
            return [
                StepCompleted(
                    step_id=sid,
                    result=result,
                    policy=policy,
                    input_hash=input_hash,
                    attempt=attempt,
                    purpose=purpose,
                )
            ]
        return [
            StepStarted(
                step_id=sid, policy=policy, input_hash=input_hash, purpose=purpose, attempt=attempt
            ),
            *facts,
            StepCompleted(step_id=sid, result=result, policy=policy, input_hash=input_hash),
        ]

    def jsonable(
        self, sid: str | None, value: Any, what: str = "result", *, offload: bool = True
    ) -> Any:
        """``value`` as JSON data to record for step ``sid``, in the typed encoding
        (:func:`torpor.serde.encode`; PayloadError naming the step, the path and the type
        otherwise, or when it is over the hard maximum ``TORPOR_MAX_PAYLOAD_BYTES``). Read it
        back with :meth:`value`. With ``offload``, a value over ``TORPOR_INLINE_VALUE_BYTES``
        is stored in the artifact store and recorded as its reference (:mod:`torpor.blobs`).
        Leaves the value's size in :attr:`last_size` (0 when it is too small to measure)."""
        try:
            out = serde.encode(value)
        except NotSerializable as exc:
            raise PayloadError(self.run_id, sid, f"{what} is not serializable: {exc}") from None
        kind = type(out)
        self.last_size = 0
        if out is None or kind is int or kind is bool or kind is float:
            return out  # a scalar is far below the limit: no need to encode it to measure
        limit = min(serde.MAX_PAYLOAD_BYTES, serde.INLINE_VALUE_BYTES)
        if kind is str and len(out) * 6 < limit:
            return out  # (a JSON string is at most 6 bytes per character)
        text = serde.dumps(out)
        size = self.last_size = len(text) if text.isascii() else len(text.encode())
        if size > serde.MAX_PAYLOAD_BYTES:
            raise PayloadError(
                self.run_id,
                sid,
                f"{what} ({type(value).__name__}) is {size} bytes, over the "
                f"{serde.MAX_PAYLOAD_BYTES}-byte limit (TORPOR_MAX_PAYLOAD_BYTES); store it with "
                "run.artifact() and return the reference",
            )
        if not offload:
            return out
        run_id, store = self.run_id, self.store
        return blobs.offload(
            out, text, size, self.host.artifacts, lambda h, n: store.pin_blob(run_id, h, n)
        )

    def value(self, sid: str | None, data: Any, what: str = "result") -> Any:
        """The value recorded as ``data`` for step ``sid`` (:func:`torpor.serde.decode`): what
        went in, type included. RecordedValueError naming the step and the path when a
        recorded class cannot be found (nothing is written; the run stays resumable). A value
        offloaded to the artifact store is read back hash-checked (:meth:`unblob`)."""
        kind = data.__class__
        if kind is not dict and kind is not list:
            return data  # a scalar is itself
        data = self.unblob(sid, data, what)
        try:
            return serde.decode(data)
        except NotDecodable as exc:
            raise RecordedValueError(self.run_id, sid, f"recorded {what}: {exc}") from None

    def unblob(self, sid: str | None, data: Any, what: str = "result") -> Any:
        """``data``, or the JSON data of the offloaded value it refers to (hash-checked);
        CorruptRecordError naming the run and the step when the blob is missing or altered."""
        if not blobs.is_ref(data):
            return data
        try:
            return blobs.load(data, self.host.artifacts)
        except TorporError as exc:
            raise CorruptRecordError(
                f"run {self.run_id!r} step {sid!r}: recorded {what}: {exc}", run_id=self.run_id
            ) from None

    def next_attempt(self, sid: str) -> int:
        """The attempt number a new start of step ``sid`` gets."""
        info = self.state.steps.get(sid)
        return info.attempt + 1 if info is not None else 1

    def guard_crashes(self, sid: str, limit: int | None = None) -> None:
        """Park the run ``blocked`` (RunStopped) when step ``sid`` crashed its process
        ``limit`` times (default: the workflow's ``crash_limit``) since a person last retried
        it; the reason names the step, the count, when it was last seen and the command that
        reopens the run after a fix."""
        limit = self.crash_limit if limit is None else limit
        n = crashed_attempts(self.state, sid)
        if limit <= 0 or n < limit:
            return
        info = self.state.steps.get(sid)
        seen = f"; last seen {utc_text(info.started_at_ms)}" if info and info.started_at_ms else ""
        raise RunStopped(
            Outcome.BLOCKED,
            f"step {sid!r} crashed its process {n} times{seen}; fix the cause, then: "
            f"torpor retry {self.run_id} --step {sid}",
        )

    def failure_of(self, sid: str) -> str:
        """The recorded error of failed step ``sid``."""
        for ev in reversed(self.store.step_events(self.run_id, sid)):
            if ev.type == "step_failed":
                return str(getattr(ev.payload, "error", "failed"))
        return "failed"

    def now_ms(self) -> int:
        """The store clock, epoch milliseconds."""
        return self.store.now_ms()


def _ends(payloads: tuple[Payload, ...], wait: WaitInfo) -> bool:
    """Whether ``payloads`` complete ``wait``."""
    return any(isinstance(p, WaitCompleted) and p.wait_id == wait.wait_id for p in payloads)
