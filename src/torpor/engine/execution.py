"""One execution of one run under one lease: load, take over, replay the workflow, and map
how it ended to an outcome — or leave the run waiting, holding nothing.

:class:`Execution` is what :meth:`torpor.Runtime.execute` runs once it holds the lease and has
loaded the state (latest checkpoint + the events after it):

1. a finished run takes only a person's resolution (which reopens it), nothing else;
2. inbox messages posted meanwhile are moved into the history;
3. in-flight effects with a registered reconcile are reconciled (a new owner's first duty);
4. the workflow function runs with a :class:`~torpor.Run` handle, a heartbeat renewing the
   lease; recorded steps return their results;
5. how it ended becomes the outcome (G5: ``succeeded`` only with every criterion verified);
   a wait leaves the run ``waiting``; an engine error (store, code version, replay divergence,
   an unrecordable payload) leaves the history intact and the run resumable.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import serde
from ..errors import (
    ApprovalDeniedError,
    ApprovalInvalidError,
    Cancelled,
    EffectUnresolved,
    InboxPendingError,
    LeaseLostError,
    NonDeterminismError,
    NotSerializable,
    PayloadError,
    RecordedValueError,
    ReleaseRun,
    RunStopped,
    StoreError,
    Suspended,
    TorporError,
    TransitionError,
    UnknownWorkflowError,
    VersionMismatchError,
)
from ..history import AttentionNeeded, Outcome, RunFinished, RunState, RunStatus
from ..store.base import Lease
from . import attempts, children, effects, inbox
from .cancel import CANCEL_GRACE_S, CancelWatch
from .journal import Host, Journal
from .lease import Heartbeat
from .replay import Replay
from .waits import GUARD_RETRIES

log = logging.getLogger("torpor.engine")

if TYPE_CHECKING:
    from ..workflows import WorkflowDef


@dataclass(frozen=True)
class RunResult:
    """Where an execution left the run. ``status`` is a RunStatus value; ``outcome`` an Outcome
    value once finished; ``wake_at_ms`` the deadline of the wait it is in (epoch ms)."""

    run_id: str
    status: str
    outcome: str | None = None
    reason: str = ""
    result: Any = None
    wake_at_ms: int | None = None
    wait_kind: str | None = None


#: Errors that stop an execution without an outcome: the history is intact and the run can
#: resume once the cause (the store, the code's version, a replay that diverged) is fixed.
#: A PayloadError is not one of them: the code produced a value that cannot be recorded, and
#: running it again produces it again — the run ends failed on the first attempt (G11). Its
#: subclass RecordedValueError (a recorded value this code cannot read back) is: it is noted
#: as needing attention and raised.
ENGINE_ERRORS = (
    StoreError,
    NonDeterminismError,
    VersionMismatchError,
    UnknownWorkflowError,
    TransitionError,
)

#: Longest outcome reason recorded (a longer one, e.g. from a huge exception message, is cut).
MAX_REASON_CHARS = 4000


async def _bound(watch: CancelWatch, coro: Any) -> Any:
    """Run an async workflow's coroutine as a task the cancel watch can interrupt."""
    task = asyncio.ensure_future(coro)
    watch.bind(asyncio.get_running_loop(), task)
    return await task


class Execution:
    """One execution of one run under one lease (internal; the workflow sees :class:`Run`).

    ``make_handle`` builds the workflow's handle from the journal (:class:`torpor.Run`);
    ``heartbeat_s`` is the lease renewal interval.
    """

    def __init__(
        self,
        host: Host,
        wf: WorkflowDef,
        lease: Lease,
        state: RunState,
        *,
        heartbeat_s: float,
        make_handle: Callable[[Journal], Any],
    ):
        self.wf = wf
        self.heartbeat_s = heartbeat_s
        self.make_handle = make_handle
        replay = Replay(host.store, state.run_id, wf.name, wf.version)
        self.journal = Journal(host, lease, state, replay)
        self.journal.sync_inbox = inbox.sync
        self.journal.crash_limit = wf.crash_limit
        self.journal.steerable = wf.steerable

    @property
    def state(self) -> RunState:
        return self.journal.state

    def run(self) -> RunResult:
        """Execute until the run finishes or waits (see the module docstring). An effect's
        observation still deferred when the execution ends (it rides on the next append:
        :meth:`Journal.defer`) is written before it returns or raises."""
        try:
            return self._run()
        finally:
            self._flush()

    def _flush(self) -> None:
        """Write the deferred observations, if any, while the lease is held. A failure is
        logged, not raised over the execution's own result or error: the effect then stays
        intended-not-observed in the record, and the next execution reconciles it."""
        j = self.journal
        if not j.pending or j.lost is not None:
            return
        try:
            j.flush()
        except TorporError as exc:
            log.warning("run %s: an effect's observation was not recorded: %s", j.run_id, exc)

    def _run(self) -> RunResult:
        j = self.journal
        if j.state.status is RunStatus.FINISHED:
            # A finished run accepts nothing but a person's resolution, which reopens it; that
            # must be recorded before the lease (a lease_acquired on a finished run is refused).
            j.sync()
            if j.state.status is RunStatus.FINISHED:
                # A reopening message that did not apply: keep the row's status honest.
                j.store.restore_status(j.lease, j.state)
                return self.result()
        j.sync()
        if j.state.status is RunStatus.FINISHED:
            return self.result()
        recorded_version = j.state.version
        if j.state.effects_in_doubt():
            effects.reconcile_at_takeover(j, self.reconcilers)
        j.replay.load(
            j.state.user_checkpoint_seq,
            j.state.steps_completed,
            # Concurrent steps of an async workflow may replay in another order: checked at
            # the end only.
            ordered=not inspect.iscoroutinefunction(self.wf.fn),
            from_version=recorded_version,
        )
        watch = CancelWatch(j, getattr(j.host, "cancel_grace_s", CANCEL_GRACE_S))
        hb = Heartbeat(j, self.heartbeat_s, watch)
        hb.start()
        handle = self.make_handle(j)
        try:
            if j.state.cancel_requested:
                raise Cancelled(j.state.cancel_reason or "cancelled before resuming")
            fn = self.wf.fn
            with attempts.watching(watch.started):
                if inspect.iscoroutinefunction(fn):
                    value = asyncio.run(_bound(watch, fn(handle, j.state.input)))
                else:
                    value = fn(handle, j.state.input)
            if children.spawned(j):
                children.join(j)  # a parent never finishes over an unfinished child (G14)
        except asyncio.CancelledError:
            if not j.state.cancel_requested:
                raise
            why = j.state.cancel_reason or "cancelled"
            doubt = j.state.effects_in_doubt()
            if doubt:  # interrupted with an effect in flight: it may have happened (G2)
                return self.finish(
                    Outcome.UNRESOLVED,
                    f"{why}: interrupted while effect {doubt[0]} was in flight; a person must "
                    f"settle it: torpor resolve {j.run_id} {doubt[0]} --applied/--absent --as NAME",
                )
            return self.finish(Outcome.CANCELLED, why)
        except Suspended as s:
            return self.result(reason=s.reason)
        except ReleaseRun as r:
            return self.result(reason=f"released: {r}")
        except Cancelled as c:
            return self.finish(Outcome.CANCELLED, str(c))
        except EffectUnresolved as u:
            return self.finish(
                Outcome.UNRESOLVED,
                f"{u}; a person must settle it: torpor resolve {j.run_id} {u.key} "
                "--applied/--absent --as NAME",
            )
        except RunStopped as s:
            j.replay.check_replayed(f"stopped ({s.outcome}: {s.reason})")
            return self.finish(Outcome(s.outcome), s.reason)
        except (ApprovalDeniedError, ApprovalInvalidError) as exc:
            return self.finish(Outcome.BLOCKED, str(exc))
        except RecordedValueError as exc:
            # A recorded value this code cannot read back (its class moved): the deploy's
            # problem, not the run's — it stays resumable once the class is found again.
            self.note_attention(f"a recorded value cannot be read: {exc}")
            raise
        except PayloadError as exc:
            j.replay.check_replayed(f"raised {type(exc).__name__}: {exc}", exc)
            return self.finish(Outcome.FAILED, f"a value could not be recorded: {exc}")
        except NonDeterminismError as exc:
            self.note_attention(f"replay diverged: {exc}")
            raise
        except ENGINE_ERRORS:
            raise  # the record is intact and the run stays resumable once the cause is fixed
        except Exception as exc:
            j.replay.check_replayed(f"raised {type(exc).__name__}: {exc}", exc)
            return self.finish(Outcome.FAILED, f"{type(exc).__name__}: {exc}")
        finally:
            hb.stop()
        return self.complete(value)

    @property
    def reconcilers(self) -> Mapping[str, effects.Reconcile]:
        """Reconciles this workflow registered by operation (an agent's tools)."""
        return self.wf.reconcilers

    def complete(self, value: Any) -> RunResult:
        """The workflow returned: the outcome follows the evidence (G5)."""
        self.journal.replay.check_replayed("returned")
        try:
            data = serde.to_jsonable(value)
        except NotSerializable as exc:
            return self.finish(Outcome.FAILED, f"workflow result is not serializable: {exc}")
        s = self.journal.state
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
        """Record the outcome at the boundary of finishing. Messages that arrived meanwhile are
        taken first: a cancel makes the outcome ``cancelled`` (unless an effect is in doubt:
        then the run is ``unresolved`` and ends cancelled once settled), its effects already
        performed standing. Buffered signals no wait took are refused on the record (a run
        that may be reopened keeps them). The outcome is appended only while no message is
        pending, so a message posted at the same instant is either taken here or refused by
        the store (the run is finished): never left unread. If the fold refuses the outcome,
        the honest fallback is recorded."""
        j = self.journal
        for _ in range(GUARD_RETRIES):
            j.sync()
            taken = self._taking_cancel(outcome, reason, result)
            children.cancel_unfinished(j, taken[0])
            try:
                self._record(*taken)
            except InboxPendingError:
                continue  # a message landed between the sync and the append: take it first
            return self.result()
        raise StoreError(f"run {j.run_id!r}: inbox messages keep arriving; no outcome recorded")

    def _taking_cancel(
        self, outcome: Outcome, reason: str, result: Any
    ) -> tuple[Outcome, str, Any]:
        """The outcome once the messages taken at the boundary of finishing are counted: a
        cancel, or a warning (a malformed message) that turns success into success with
        warnings."""
        s = self.journal.state
        if s.cancel_requested and outcome is not Outcome.CANCELLED and not s.effects_in_doubt():
            why = f"{s.cancel_reason} before the outcome was recorded (it was {outcome.value}"
            why += f": {reason})" if reason else ")"
            if s.effects_applied:
                why += (
                    f"; the {s.effects_applied} effect(s) performed before the cancel stand "
                    f"(torpor show {s.run_id})"
                )
            return Outcome.CANCELLED, why, None
        if outcome is Outcome.SUCCEEDED and s.warnings:
            return Outcome.SUCCEEDED_WITH_WARNINGS, "; ".join(s.warnings[-3:]), result
        return outcome, reason, result

    def _record(self, outcome: Outcome, reason: str, result: Any) -> None:
        """Append the outcome (and the refusal of signals left buffered) under the inbox guard;
        InboxPendingError when a message is pending."""
        j = self.journal
        if len(reason) > MAX_REASON_CHARS:
            reason = reason[:MAX_REASON_CHARS] + " …(truncated)"
        try:
            self._append_outcome(outcome, reason, result)
        except TransitionError as exc:
            fallback = Outcome.UNRESOLVED if j.state.effects_in_doubt() else Outcome.FAILED
            self._append_outcome(fallback, f"{reason} [{exc.rule}]")
        except PayloadError as exc:
            # The workflow's answer (its result, or a reason built from an exception) cannot
            # be recorded. Like a result that is not JSON, running the code again gives it
            # again: the run ends failed, not stuck resumable (nothing was written).
            fallback = Outcome.UNRESOLVED if j.state.effects_in_doubt() else Outcome.FAILED
            why = f"the outcome {outcome.value} could not be recorded: {exc}"[:2000]
            self._append_outcome(fallback, why)

    def _append_outcome(self, outcome: Outcome, reason: str, result: Any = None) -> None:
        j = self.journal
        left = inbox.unused_at_outcome(j.state, outcome)
        j.append(
            *left,
            RunFinished(outcome=outcome, reason=reason, result=result),
            by_code=False,
            if_inbox_empty=True,
        )

    def note_attention(self, detail: str) -> bool:
        """Record why the run cannot proceed (``attention_needed``), where ``ls`` and ``show``
        look — once: False when the history already says so (or the run finished, or the lease
        was lost meanwhile). Writes no lease record: an execution that cannot proceed did not
        take the run."""
        j = self.journal
        detail = detail.strip()[:MAX_REASON_CHARS]
        if j.state.status is RunStatus.FINISHED or j.state.attention == detail:
            return False
        try:
            j.append(AttentionNeeded(detail=detail, by=j.lease.owner), by_code=False, lease=False)
        except (LeaseLostError, TransitionError):
            return False
        return True

    def result(self, reason: str = "") -> RunResult:
        """Where the run is now, as a :class:`RunResult`."""
        s = self.journal.state
        wake = s.wake_due()
        return RunResult(
            s.run_id,
            s.status.value,
            s.outcome.value if s.outcome else None,
            s.outcome_reason or reason,
            s.result,
            wake,
            s.wait.kind if s.wait else None,
        )
