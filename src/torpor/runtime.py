"""Executes runs: lease, load, replay the workflow, record boundaries, decide the outcome.

One :class:`Runtime` per process (it owns a lease-owner id); each :meth:`Runtime.execute` takes
the run's lease, loads its state (latest checkpoint + the events after it), moves inbox messages
(signals, decisions, cancels, resolutions) into the history, runs the workflow function with a
:class:`~torpor.run.Run` handle, and records the outcome — or leaves the run waiting, holding
nothing. A heartbeat thread renews the lease while the workflow works.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import faults, serde, signing
from .artifacts import ArtifactStore
from .config import Settings
from .errors import (
    ApprovalDeniedError,
    ApprovalInvalidError,
    Cancelled,
    ConfigError,
    InboxError,
    LeaseLostError,
    NonDeterminismError,
    PayloadError,
    ReleaseRun,
    StoreError,
    Suspended,
    TransitionError,
    UnknownWorkflowError,
    VersionMismatchError,
)
from .history import (
    ApprovalDecided,
    ApprovalRevoked,
    BudgetSet,
    CancelRequested,
    EffectReconciled,
    Event,
    LeaseAcquired,
    Outcome,
    Payload,
    Policy,
    RunFinished,
    RunReopened,
    RunStarted,
    RunState,
    RunStatus,
    SignalReceived,
    StepCompleted,
    Verdict,
    VersionAccepted,
    WarningRecorded,
    apply,
    starts_step,
    type_of,
)
from .run import EffectUnresolved, Run, RunStopped
from .store import SQLStore, new_owner_id, open_store
from .store.base import Completion, InboxMessage, Lease
from .workflows import WorkflowDef, get_workflow


@dataclass(frozen=True)
class RunResult:
    """Where an execution left the run. ``status`` is a RunStatus value."""

    run_id: str
    status: str
    outcome: str | None = None
    reason: str = ""
    result: Any = None
    wake_at_ms: int | None = None
    wait_kind: str | None = None


#: Errors that stop an execution without an outcome: the history is intact and the run can
#: resume once the cause (store, code version, non-determinism, bad payload) is fixed.
_ENGINE_ERRORS = (
    StoreError,
    NonDeterminismError,
    VersionMismatchError,
    UnknownWorkflowError,
    PayloadError,
    TransitionError,
)


#: Longest outcome reason recorded (a longer one, e.g. from a huge exception message, is cut).
MAX_REASON_CHARS = 4000

#: Longest run id accepted (it is part of every default idempotency key).
MAX_RUN_ID_CHARS = 200


def _check_run_id(run_id: object) -> None:
    """Refuse a run id that cannot serve as one (ConfigError naming what is wrong): empty or
    blank, not a string, over :data:`MAX_RUN_ID_CHARS`, control characters, or ``/`` — the
    default idempotency key is ``<run_id>/<step_id>``, so a ``/`` in a run id could give two
    runs' effects the same key (run ``a`` step ``b/c`` and run ``a/b`` step ``c``), and the
    outside world would take one for the other."""
    if not isinstance(run_id, str):
        raise ConfigError(f"run_id must be a string, not {type(run_id).__name__}")
    if not run_id.strip():
        raise ConfigError(f"run_id {run_id!r} is empty; omit it to have one generated")
    if len(run_id) > MAX_RUN_ID_CHARS:
        raise ConfigError(f"run_id is {len(run_id)} characters, over {MAX_RUN_ID_CHARS}")
    bad = next((c for c in run_id if c == "/" or not c.isprintable()), None)
    if bad is not None:
        raise ConfigError(
            f"run_id {run_id!r} contains {bad!r}; run ids may not contain '/' (it separates "
            "run and step in default idempotency keys) or control characters"
        )


class Execution:
    """One execution of one run under one lease (internal; the workflow sees :class:`Run`)."""

    def __init__(self, runtime: Runtime, wf: WorkflowDef, lease: Lease, state: RunState):
        self.runtime = runtime
        self.store = runtime.store
        self.wf = wf
        self.lease = lease
        self.state = state
        self.cache: dict[str, Completion] = {}
        self.lookups = True
        #: Steps found to have no recorded completion (a miss in the complete replay cache, or
        #: an indexed lookup that found none): their start needs no rerun probe in the store.
        self._never_completed: set[str] = set()
        #: Steps completed by this execution (their results are read back if asked again).
        self._done_here: set[str] = set()
        self._inbox_dirty = True
        self._lost: LeaseLostError | None = None
        self._stop = threading.Event()
        #: The lease goes into the history with this execution's first write, so an execution
        #: that writes nothing (a wait not yet due, a refused replay) leaves the history as is.
        self._lease_recorded = False
        #: Replay under changed code (issue 5): the code must ask for every completion recorded
        #: after the restore point (up to seq ``replay_end``) before it writes anything new;
        #: ``replay_at`` is how far it has replayed (the Run handle moves it). ``gate`` is up
        #: until the first new write passed that check; a version change is recorded with it.
        self.replay_end = 0
        self.replay_at = 0
        self.ordered = True
        self.gate = False
        self.pending_version: VersionAccepted | None = None

    # ------------------------------------------------------------ recording

    def now_ms(self) -> int:
        return self.store.now_ms()

    def append(
        self,
        payloads: list[Payload],
        *,
        wake_at_ms: int | None = None,
        guard_inbox: bool = False,
        consumed: list[tuple[str, int]] | None = None,
    ) -> list[Event]:
        """Validate ``payloads`` against the state (G4) and append them in one transaction."""
        if self._lost is not None:
            raise self._lost
        record_lease = not self._lease_recorded and self.state.status is not RunStatus.FINISHED
        if record_lease:
            # (A finished run takes only its reopening first; the lease follows in the next
            # write, because the fold refuses a lease record on a finished run.)
            payloads = [LeaseAcquired(owner=self.lease.owner, epoch=self.lease.epoch), *payloads]
            consumed = [(mid, seq + 1) for mid, seq in consumed or ()]
        now = self.now_ms()
        events: list[Event] = []
        run_id, epoch = self.state.run_id, self.lease.epoch
        try:
            for p in payloads:
                ev = Event(
                    run_id=run_id,
                    seq=self.state.seq + 1,
                    type=type_of(p),
                    payload=p,
                    at_ms=now,
                    epoch=epoch,
                )
                apply(self.state, ev)
                events.append(ev)
        except TransitionError:
            self.state = self.store.load(self.state.run_id)  # undo partial application
            raise
        if self.state.status is RunStatus.WAITING and wake_at_ms is None and self.state.wait:
            wake_at_ms = self.state.wait.deadline_ms
        faults.point("append.before")
        never = self._never_completed
        proven = [
            sid
            for ev in events
            if (sid := ev.step_id) is not None
            and sid in never
            and sid not in self.cache
            and starts_step(ev)
        ]
        try:
            self.store.append(
                self.lease,
                events,
                self.state,
                wake_at_ms=wake_at_ms,
                consumed=consumed or (),
                guard_inbox=guard_inbox,
                proven_new=proven,
            )
        except BaseException:
            self.state = self.store.load(self.state.run_id) if self._lost is None else self.state
            raise
        faults.point("append.after")
        if record_lease:
            self._lease_recorded = True
            faults.point("lease.acquired")
        on_event = self.runtime.on_event
        for ev in events:
            if ev.type == "step_completed":
                # Only the id: a result is held in memory only while it is still to be replayed
                # (a long run's results would otherwise pile up in the process).
                sid = ev.payload.step_id  # type: ignore[attr-defined]
                self._done_here.add(sid)
                never.discard(sid)
            if on_event is not None:
                on_event(ev)
        return events

    def completion(self, sid: str) -> Completion | None:
        comp = self.cache.get(sid)
        if comp is None and (self.lookups or sid in self._done_here):
            comp = self.store.step_completion(self.state.run_id, sid)
            if comp is not None:
                self.cache[sid] = comp
        if comp is None:
            # Proved under this lease: the cache (with the ids completed by this execution)
            # holds every completion when lookups are off, and the lookup read the history
            # otherwise; nothing else writes while we hold it.
            self._never_completed.add(sid)
        return comp

    def failure_of(self, sid: str) -> str:
        for ev in reversed(self.store.step_events(self.state.run_id, sid)):
            if ev.type == "step_failed":
                return str(getattr(ev.payload, "error", "failed"))
        return "failed"

    def next_attempt(self, sid: str) -> int:
        info = self.state.steps.get(sid)
        return info.attempt + 1 if info is not None else 1

    def boundary(self) -> None:
        """Called before every primitive: honour lease loss, inbox messages and cancellation."""
        if self._lost is not None:
            raise self._lost
        if self._inbox_dirty:
            self.sync_inbox(force=True)
        if self.state.cancel_requested:
            raise Cancelled(self.state.cancel_reason or "cancelled")
        if self.runtime.stopping.is_set():
            raise ReleaseRun("worker shutting down")

    # ------------------------------------------------------------ inbox

    def sync_inbox(self, force: bool = False) -> None:
        """Move pending inbox messages into the history (each validated; refused ones become
        warnings, so a bad message never blocks the run)."""
        if not force and not self._inbox_dirty:
            return
        self._inbox_dirty = False
        msgs = self.store.pending_inbox(self.state.run_id)
        if not msgs:
            return
        payloads: list[Payload] = []
        consumed: list[tuple[str, int]] = []
        trial = self.state.model_copy(deep=True)
        for m in msgs:
            snapshot = trial.model_copy(deep=True)
            try:
                # A malformed body (missing fields, unknown kind, wrong types) is refused like an
                # impossible transition: a warning, never an error that blocks the run for good.
                try:
                    converted = self._convert(m, trial)
                except (InboxError, KeyError, TypeError, ValueError) as bad:
                    detail = f"malformed: {type(bad).__name__}: {bad}".splitlines()[0]
                    raise TransitionError(trial.run_id, trial.seq + 1, m.kind, detail) from bad
                seq = trial.seq
                for p in converted:
                    seq += 1
                    ev = Event(
                        run_id=trial.run_id,
                        seq=seq,
                        type=type_of(p),
                        payload=p,
                        at_ms=0,
                        epoch=self.lease.epoch,
                    )
                    apply(trial, ev)
                    try:
                        self.store.encode(ev)  # a record that cannot be stored blocks the run
                    except PayloadError as big:
                        raise TransitionError(trial.run_id, seq, ev.type, str(big)) from big
            except TransitionError as exc:
                trial = snapshot
                if trial.status is RunStatus.FINISHED:
                    continue  # stays pending; a finished run takes only resolutions
                converted = [
                    WarningRecorded(message=f"ignored {m.kind} message {m.message_id}: {exc.rule}")
                ]
                apply(
                    trial,
                    Event(
                        run_id=trial.run_id,
                        seq=trial.seq + 1,
                        type="warning_recorded",
                        payload=converted[0],
                        at_ms=0,
                        epoch=self.lease.epoch,
                    ),
                )
            payloads.extend(converted)
            consumed.append((m.message_id, trial.seq))
        if payloads:
            self.append(payloads, consumed=consumed)

    def _convert(self, m: InboxMessage, state: RunState) -> list[Payload]:
        b = m.body
        if m.kind == "signal":
            return [
                SignalReceived(signal_id=m.message_id, name=b["name"], payload=b.get("payload"))
            ]
        if m.kind == "decision":
            return [ApprovalDecided(**b)]
        if m.kind == "revoke":
            return [ApprovalRevoked(**b)]
        if m.kind == "cancel":
            return [CancelRequested(**b)]
        if m.kind == "resolve":
            out: list[Payload] = []
            if state.status is RunStatus.FINISHED:
                out.append(RunReopened(by=b["by"], reason=f"effect {b['key']} resolved"))
            verdict = Verdict(b["verdict"])
            out.append(
                EffectReconciled(
                    key=b["key"],
                    verdict=verdict,
                    result=b.get("result"),
                    reason=b.get("reason", ""),
                    by=b["by"],
                )
            )
            if verdict is Verdict.APPLIED:
                info = state.effects.get(b["key"])
                if info is not None:
                    out.append(
                        StepCompleted(
                            step_id=info.step_id, result=b.get("result"), policy=Policy.EFFECT
                        )
                    )
            return out
        if m.kind == "reopen":
            # A person reopens a blocked run, optionally with new budget limits (which a
            # running run also takes, without reopening).
            reopen: list[Payload] = []
            if state.status is RunStatus.FINISHED or not b.get("budget"):
                reopen.append(RunReopened(by=b["by"], reason=b.get("reason", "")))
            if b.get("budget"):
                reopen.append(BudgetSet(**b["budget"], by=b["by"], reason=b.get("reason", "")))
            return reopen
        raise InboxError(f"unknown inbox message kind {m.kind!r}")

    # ------------------------------------------------------------ heartbeat

    def _heartbeat(self) -> None:
        interval = self.runtime.heartbeat_s
        while not self._stop.wait(interval):
            try:
                faults.point("lease.renewing")
                self.lease = self.store.renew_lease(self.lease)
                faults.point("lease.renewed")
                if self.store.count_pending_inbox(self.state.run_id):
                    self._inbox_dirty = True
            except LeaseLostError as exc:
                self._lost = exc
                return
            except Exception:  # a transient store error: the next renewal retries
                continue

    # ------------------------------------------------------------ the run

    def run(self) -> RunResult:
        st = self.state
        if st.status is RunStatus.FINISHED:
            # A finished run accepts nothing but a person's resolution, which reopens it; that
            # must be recorded before the lease (a lease_acquired on a finished run is refused).
            self.sync_inbox(force=True)
            if self.state.status is RunStatus.FINISHED:
                # A reopening message that did not apply: keep the row's status honest.
                self.store.restore_status(self.lease, self.state)
                return self.result()
        if st.version != self.wf.version:
            # Recorded with the first new write, once the replay has matched the history: code
            # that does not match leaves the run at its version, resumable by its own code.
            self.pending_version = VersionAccepted(
                from_version=st.version, to_version=self.wf.version
            )
        self.sync_inbox(force=True)
        if self.state.status is RunStatus.FINISHED:
            return self.result()
        self.cache = self.store.completions_after(st.run_id, self.state.user_checkpoint_seq)
        self.lookups = self.state.steps_completed > len(self.cache)
        self.replay_end = max(
            (c.seq for c in self.cache.values() if not c.step_id.startswith("patch:")), default=0
        )
        # Concurrent steps of an async workflow may replay in another order: checked at the end.
        self.ordered = not inspect.iscoroutinefunction(self.wf.fn)
        self.gate = self.replay_end > 0 or self.pending_version is not None
        hb = threading.Thread(target=self._heartbeat, daemon=True, name=f"lease-{st.run_id}")
        hb.start()
        handle = Run(self)
        try:
            if self.state.cancel_requested:
                raise Cancelled(self.state.cancel_reason or "cancelled before resuming")
            fn = self.wf.fn
            if inspect.iscoroutinefunction(fn):
                value = asyncio.run(fn(handle, self.state.input))
            else:
                value = fn(handle, self.state.input)
        except Suspended as s:
            return self.result(reason=s.reason)
        except ReleaseRun as r:
            return self.result(reason=f"released: {r}")
        except Cancelled as c:
            return self.finish(Outcome.CANCELLED, str(c))
        except EffectUnresolved as u:
            return self.finish(
                Outcome.UNRESOLVED,
                f"{u}; a person must settle it: torpor resolve {st.run_id} {u.key} "
                "--applied/--absent",
            )
        except RunStopped as s:
            self.check_replayed(f"stopped ({s.outcome}: {s.reason})")
            return self.finish(Outcome(s.outcome), s.reason)
        except (ApprovalDeniedError, ApprovalInvalidError) as exc:
            return self.finish(Outcome.BLOCKED, str(exc))
        except _ENGINE_ERRORS:
            raise  # the record is intact and the run stays resumable once the cause is fixed
        except Exception as exc:
            self.check_replayed(f"raised {type(exc).__name__}: {exc}", exc)
            return self.finish(Outcome.FAILED, f"{type(exc).__name__}: {exc}")
        finally:
            self._stop.set()
            hb.join(timeout=5)
        return self.complete(value)

    # ------------------------------------------------------------ replay under changed code

    @property
    def replaying(self) -> bool:
        """True while completions recorded by earlier executions lie ahead of what the code
        has asked for (the code has not yet caught up with the history)."""
        return self.replay_at < self.replay_end

    def diverged(self, asked: str | None, what: str) -> NonDeterminismError:
        """The error for code that left the recorded path: names the step it asked for, the
        recorded step it should have asked for next, and what to do."""
        ahead = sorted(
            (c for c in self.cache.values() if c.seq > self.replay_at),
            key=lambda c: c.seq,
        )
        nxt = next((c for c in ahead if not c.step_id.startswith("patch:")), None)
        recorded = f"step {nxt.step_id!r} (seq {nxt.seq})" if nxt else "more steps"
        v = self.pending_version
        under = f" (recorded under version {v.from_version!r})" if v else ""
        return NonDeterminismError(
            f"run {self.state.run_id!r} of workflow {self.wf.name!r}: the code {what} where "
            f"the history{under} has {recorded} next; version {self.wf.version!r} of the code "
            "no longer matches this run at that point. Resume it with the code it was recorded "
            'under, or keep recorded runs on the old path with `if run.patched("<change>"):` '
            "around the new code. Nothing was recorded."
        )

    def gate_new_write(self, asked: str | None) -> list[Payload]:
        """Before the code's first new write in this execution: refuse it while recorded steps
        lie ahead (NonDeterminismError, nothing written), else return what must go first (the
        version change)."""
        if self.ordered and self.replaying:
            raise self.diverged(asked, f"asked for new step {asked!r}")
        return [self.pending_version] if self.pending_version is not None else []

    def check_replayed(self, what: str, cause: BaseException | None = None) -> None:
        """Raise NonDeterminismError when the workflow ends (returns, raises, stops) before
        it has replayed what earlier executions recorded: deterministic code given the same
        recorded results would have gone on."""
        if self.replaying:
            raise self.diverged(None, what) from cause

    def complete(self, value: Any) -> RunResult:
        """The workflow returned: the outcome follows the evidence (G5)."""
        self.check_replayed("returned")
        try:
            data = serde.to_jsonable(value)
        except serde.NotSerializable as exc:
            return self.finish(Outcome.FAILED, f"workflow result is not serializable: {exc}")
        s = self.state
        missing, failing = s.unmet_criteria()
        if missing or failing:
            parts = []
            if failing:
                parts.append(f"failing: {', '.join(failing)}")
            if missing:
                parts.append(f"never verified: {', '.join(missing)}")
            return self.finish(
                Outcome.FAILED, "completion criteria not met (" + "; ".join(parts) + ")", data
            )
        if s.warnings:
            return self.finish(Outcome.SUCCEEDED_WITH_WARNINGS, "; ".join(s.warnings[-3:]), data)
        return self.finish(
            Outcome.SUCCEEDED, "all completion criteria verified" if s.criteria else "", data
        )

    def finish(self, outcome: Outcome, reason: str, result: Any = None) -> RunResult:
        """Record the outcome; if the fold refuses it, record the honest fallback."""
        if len(reason) > MAX_REASON_CHARS:
            reason = reason[:MAX_REASON_CHARS] + " …(truncated)"
        try:
            self.append([RunFinished(outcome=outcome, reason=reason, result=result)])
        except TransitionError as exc:
            fallback = Outcome.UNRESOLVED if self.state.effects_in_doubt() else Outcome.FAILED
            self.append([RunFinished(outcome=fallback, reason=f"{reason} [{exc.rule}]")])
        except PayloadError as exc:
            # The workflow's answer (its result, or a reason built from an exception) cannot
            # be recorded. Like a result that is not JSON, running the code again gives it
            # again: the run ends failed, not stuck resumable (nothing was written).
            fallback = Outcome.UNRESOLVED if self.state.effects_in_doubt() else Outcome.FAILED
            self.append(
                [
                    RunFinished(
                        outcome=fallback,
                        reason=f"the outcome {outcome.value} could not be recorded: {exc}"[:2000],
                    )
                ]
            )
        return self.result()

    def result(self, reason: str = "") -> RunResult:
        s = self.state
        wake = s.wait.deadline_ms if s.wait else None
        return RunResult(
            s.run_id,
            s.status.value,
            s.outcome.value if s.outcome else None,
            s.outcome_reason or reason,
            s.result,
            wake,
            s.wait.kind if s.wait else None,
        )


class Runtime:
    """Executes runs of registered workflows against a store.

    ``lease_ttl_s``: lease lifetime in seconds; ``heartbeat_s`` (default a third of it) must be
    at most half the ttl (ConfigError otherwise) so one missed renewal does not lose the lease.
    ``auto_approve``: approver name to grant approvals automatically (recorded, signed and
    attributed like any decision). ``on_event``: called with each appended event (progress).
    """

    def __init__(
        self,
        store: SQLStore | str | None = None,
        artifacts: ArtifactStore | str | None = None,
        *,
        settings: Settings | None = None,
        owner: str | None = None,
        lease_ttl_s: float = 30.0,
        heartbeat_s: float | None = None,
        auto_approve: str | None = None,
        on_event: Callable[[Event], None] | None = None,
        clock: Callable[[], float] | None = None,
    ):
        self.settings = settings or Settings.from_env(
            store if isinstance(store, str) else None,
            artifacts if isinstance(artifacts, str) else None,
        )
        self.store = (
            store
            if isinstance(store, SQLStore)
            else open_store(self.settings.database_url, clock=clock or time.time)
        )
        #: How this runtime waits for a timer: ``clock.sleep`` when the clock has one (a fake
        #: clock advances instead of sleeping), else ``time.sleep``.
        self.sleep: Callable[[float], None] = getattr(clock, "sleep", None) or time.sleep
        self.fake_clock = self.sleep is not time.sleep
        self.artifacts = (
            artifacts
            if isinstance(artifacts, ArtifactStore)
            else ArtifactStore(self.settings.artifacts_url)
        )
        self.owner = owner or new_owner_id()
        self.lease_ttl_s = lease_ttl_s
        self.heartbeat_s = heartbeat_s if heartbeat_s is not None else lease_ttl_s / 3
        if self.heartbeat_s <= 0 or self.heartbeat_s > lease_ttl_s / 2:
            raise ConfigError(
                f"heartbeat_s={self.heartbeat_s} must be > 0 and at most half of "
                f"lease_ttl_s={lease_ttl_s}, or one late renewal loses the lease"
            )
        self.auto_approve = auto_approve
        #: Set to make executions release their run at the next boundary (graceful shutdown).
        self.stopping = threading.Event()
        self.on_event = on_event
        self.signing_key = self.settings.signing_key()

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ lifecycle

    def start(
        self, workflow: str | Callable[..., Any], input: Any = None, *, run_id: str | None = None
    ) -> str:
        """Create a run (not executed yet). Idempotent: an existing ``run_id`` is returned
        as is (ConfigError if it belongs to another workflow)."""
        import uuid

        wf = get_workflow(workflow)
        if run_id is not None:
            _check_run_id(run_id)
        rid = run_id if run_id is not None else uuid.uuid4().hex[:16]
        try:
            data = serde.to_jsonable(input)
        except serde.NotSerializable as exc:
            from .errors import PayloadError

            raise PayloadError(rid, None, f"run input is not serializable: {exc}") from None
        created = self.store.create_run(
            rid,
            RunStarted(
                workflow=wf.name,
                version=wf.version,
                input=data,
                criteria=list(wf.criteria),
                goal=wf.goal,
                module=getattr(wf.fn, "__module__", "") or "",
            ),
        )
        if not created:
            rec = self.store.get_run(rid)
            if rec.workflow != wf.name:
                raise ConfigError(f"run {rid!r} exists and belongs to workflow {rec.workflow!r}")
        return rid

    def execute(self, run_id: str, *, lease: Lease | None = None) -> RunResult:
        """Execute the run once under a fresh lease until it finishes or waits.

        ``lease``: one already taken (a worker's ``claim_next``); it is released at the end.
        Raises LeaseHeldError if another live process holds it, VersionMismatchError /
        NonDeterminismError (run left untouched and resumable) for code that does not match.
        """
        if lease is None:
            lease = self.store.acquire_lease(run_id, self.owner, self.lease_ttl_s)
        try:
            state = self.store.load(run_id)
            wf = get_workflow(state.workflow, state.module)
            wf.check_version(run_id, state.version)
            if state.status is RunStatus.FINISHED and not self.store.count_pending_inbox(run_id):
                return Execution(self, wf, lease, state).result()
            return Execution(self, wf, lease, state).run()
        finally:
            with contextlib.suppress(Exception):
                self.store.release_lease(lease)

    def run(
        self,
        workflow: str | Callable[..., Any],
        input: Any = None,
        *,
        run_id: str | None = None,
        follow_timers: bool = True,
        poll_s: float = 0.05,
    ) -> RunResult:
        """Start (or rejoin) a run and execute it; see :meth:`resume` for ``follow_timers``."""
        rid = self.start(workflow, input, run_id=run_id)
        return self.resume(rid, follow_timers=follow_timers, poll_s=poll_s)

    def resume(self, run_id: str, *, follow_timers: bool = True, poll_s: float = 0.05) -> RunResult:
        """Execute the run; while it sleeps on a timer (``run.sleep``) and ``follow_timers`` is
        set, stay in this process (holding no lease) and execute again when it is due or woken.
        Waits for a signal or a person return at once with status ``waiting``."""
        while True:
            res = self.execute(run_id)
            if res.status != RunStatus.WAITING.value or not follow_timers:
                return res
            if res.wait_kind != "timer":
                return res
            rec = self.store.get_run(run_id)
            if rec.wake_at_ms is None:
                return res  # waits on a person or a signal: nothing to hold the process for
            while True:
                rec = self.store.get_run(run_id)
                if rec.status != RunStatus.WAITING.value:
                    break
                if rec.wake_at_ms is not None and rec.wake_at_ms <= self.store.now_ms():
                    break
                if rec.wake_at_ms is None:
                    return res
                due_s = max(0.0, (rec.wake_at_ms - self.store.now_ms()) / 1000)
                # A fake clock jumps to the deadline; the real one is polled for early wakes.
                self.sleep(due_s if self.fake_clock else min(poll_s, due_s))

    # ------------------------------------------------------------ decisions

    def decide(
        self,
        run_id: str,
        approval_id: str,
        decision: str,
        approver: str,
        hashes: list[str],
        comment: str = "",
    ) -> ApprovalDecided:
        """A signed decision payload (G6)."""
        at = self.store.now_ms()
        body = signing.decision_body(run_id, approval_id, decision, approver, hashes, at)
        return ApprovalDecided(
            approval_id=approval_id,
            decision=decision,
            approver=approver,
            hashes=sorted(hashes),
            signature=signing.sign(self.signing_key, body),
            comment=comment,
            decided_at_ms=at,
        )
