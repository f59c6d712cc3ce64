"""The handle a workflow receives: durable steps, effects, artifacts, waits and approvals.

Every primitive has a stable id (its name; a repeated name in one execution gets ``#2``,
``#3`` …, as Absurd does). On resume the workflow function runs again from the top — or from
the state restored by :meth:`Run.restore` — and every primitive whose record exists returns the
recorded result instead of executing again (G1). Recovery follows each step's policy:

- ``read``: repeated if it never completed;
- ``compute``: the recorded result is reused while its input hash is unchanged;
- ``effect``: the intent is committed *before* the call and the observation after; an intent
  without an observation is *reconciled* — applied, absent (perform now) or unknown (the run
  ends ``unresolved``) — never retried blindly (G2);
- ``decision``: a person's approval, bound to the content hashes decided on (G6).

Each method is a few lines over the engine (:mod:`torpor.engine`), which records everything
through one seam, the run's :class:`~torpor.engine.journal.Journal`.
"""

from __future__ import annotations

import inspect
import random as _random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from . import queues
from .engine import approvals, children, draws, effects, steps, waits
from .engine.approvals import Approval
from .engine.attempts import Retry, Timeout
from .engine.children import Child, ChildResult
from .engine.effects import Reconcile
from .engine.escalation import Escalation
from .engine.journal import Journal
from .errors import NonDeterminismError, RunStopped
from .history import ArtifactRef, Outcome, Policy, RunState
from .streams import RunStream


class Run:
    """The handle passed to a workflow function ``fn(run, input)``.

    Public attributes: ``run_id``, ``input``, and ``journal`` — the engine's recording seam,
    for extensions that record steps of their own (the agent loop, model calls). Read-only
    view: :attr:`state`.
    """

    def __init__(self, journal: Journal):
        self.journal = journal
        self.run_id: str = journal.run_id
        self.input: Any = journal.state.input
        self._id_tasks: dict[str, Any] = {}

    @property
    def state(self) -> RunState:
        """The current folded state (do not mutate)."""
        return self.journal.state

    # ------------------------------------------------------------- steps

    def step(
        self,
        step_id: str,
        fn: Callable[..., Any],
        *args: Any,
        policy: Policy | str = Policy.READ,
        purpose: str = "",
        crash_limit: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` as a durable step; return its (recorded) result.

        ``policy`` is ``read`` (default; repeated if it never completed) or ``compute`` (the
        result is reused while the hash of ``(args, kwargs)`` is unchanged). The result is
        recorded in the typed encoding of :mod:`torpor.serde` and comes back as it went in,
        type included (JSON data, tz-aware datetimes, Decimals, UUIDs, bytes, tuples, sets,
        dataclasses, pydantic models, enums …; a value that cannot be recorded ends the run
        ``failed`` naming the step, the path and the type). An exception from ``fn`` is
        recorded and raised as :class:`~torpor.StepError`, also on replay. ``crash_limit``:
        after this many attempts that killed their process, the run is parked ``blocked``
        (default: the workflow's, 5); ``torpor retry`` reopens it.
        """
        return steps.run_step(self.journal, step_id, fn, args, kwargs, policy, purpose, crash_limit)

    async def astep(
        self,
        step_id: str,
        fn: Callable[..., Any],
        *args: Any,
        policy: Policy | str = Policy.READ,
        purpose: str = "",
        crash_limit: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """Async twin of :meth:`step` for async workflows (``fn`` may be sync or async)."""
        with self._concurrent(step_id):
            return await steps.arun_step(
                self.journal, step_id, fn, args, kwargs, policy, purpose, crash_limit
            )

    def compute(
        self, step_id: str, fn: Callable[..., Any], *args: Any, purpose: str = "", **kwargs: Any
    ) -> Any:
        """Shorthand for ``step(..., policy="compute")``."""
        return self.step(step_id, fn, *args, policy=Policy.COMPUTE, purpose=purpose, **kwargs)

    def patched(self, change: str) -> bool:
        """Whether this run takes the new path of a code change named ``change``.

        True for a run that reaches this point under code that has the check (a new run, or an
        old one that had not got this far): a marker is recorded, so the answer stays True on
        every replay. False for a run that recorded steps past this point without the marker
        (it took the old path; keep it there)::

            if run.patched("send-receipt"):
                run.effect("receipt", send_receipt, order)   # new runs only

        Once no run recorded before the change is left, drop the check and keep the new path.
        """
        return steps.patched(self.journal, change)

    @contextmanager
    def _concurrent(self, step_id: str) -> Iterator[None]:
        """Refuse one id base used from two asyncio tasks (e.g. items of ``asyncio.gather``):
        repeated ids are numbered in call order (``x``, ``x#2``), and across tasks that order
        depends on timing, so a replay could hand one call's record to another (one customer
        charged twice, another never). Reuse within one task (a sequential loop) is fine.
        Raises NonDeterminismError before anything is recorded for the call."""
        import asyncio  # (only async workflows come here)

        try:
            task: Any = asyncio.current_task()
        except RuntimeError:
            task = None
        owner = self._id_tasks.setdefault(step_id, task)
        if owner is not task:
            raise NonDeterminismError(
                f"run {self.run_id!r}: the step id {step_id!r} is used from two concurrent "
                "asyncio tasks; repeated ids are numbered in call order, which concurrency "
                f"makes timing-dependent. Give each concurrent call its own id "
                f"(e.g. f'{step_id}:{{item}}')"
            )
        yield

    # ------------------------------------------------------------- effects

    def effect(
        self,
        step_id: str,
        fn: Callable[..., Any],
        *args: Any,
        reconcile: Reconcile | None = None,
        key: str | None = None,
        approval: Approval | None = None,
        artifacts: Sequence[ArtifactRef | str] = (),
        operation: str | None = None,
        purpose: str = "",
        crash_limit: int | None = None,
        timeout: float | timedelta | Timeout | None = None,
        retry: Retry | None = None,
        **kwargs: Any,
    ) -> Any:
        """Perform an external effect at most once per idempotency key (G2).

        ``key`` defaults to ``"<run_id>/<step_id>"``. If ``fn`` accepts an ``idempotency_key``
        parameter it is passed in, so the outside world can carry it (a commit trailer, a
        Message-ID, an API idempotency header) and ``reconcile`` can look for it. If it accepts
        ``fencing_token``, the lease epoch (an int that only grows) is passed in too.
        ``approval`` must be an approval granted on content covering ``artifacts`` (their
        hashes); it is consumed atomically with the intent (G6). ``fn`` declared with
        :func:`torpor.effect` brings its operation name, reconcile, timeout and retry.

        ``timeout`` bounds each attempt: seconds, a timedelta, or a :class:`~torpor.Timeout`
        (with the grace and ``kill``). Two attempts of one effect are never in flight at once:
        a timed-out attempt is reconciled (``applied`` settles it); otherwise the run waits for
        it up to the grace (default 30 s) — a late return is the result, a late error is
        reconciled again — and one still running after the grace leaves the run
        ``unresolved`` with the reason. ``Timeout(kill=True)`` runs attempts in a child
        process, killed at the timeout and reconciled at once. ``retry`` (a
        :class:`~torpor.Retry`) starts another attempt after a failure only when that cannot
        duplicate the effect: reconcile (or EffectNotApplied) says absent, or ``fn`` takes the
        ``idempotency_key``. Each attempt's intent is recorded.

        Cost and window: the intent is a durable append before the call; the observation is
        written with the run's next append (the next effect's intent, a step, a wait, the
        outcome), at the latest when the execution ends or at the next lease heartbeat if the
        workflow records nothing meanwhile. A process killed after the call returned and before
        that write leaves the effect intended, not observed: on recovery ``reconcile`` settles
        it (an effect without one leaves the run ``unresolved``), as for a crash during the
        call (README, "When things go wrong").

        Returns the recorded result (as it went in: see :mod:`torpor.serde`). Raises StepError
        when the effect failed and reconcile confirmed it absent; the run ends ``unresolved``
        when the outcome cannot be known. ``crash_limit`` as for :meth:`step` (a call that
        kills its process every time).
        """
        return effects.perform(
            self.journal,
            step_id,
            fn,
            args,
            kwargs,
            reconcile=reconcile,
            key=key,
            approval=approval,
            artifacts=artifacts,
            operation=operation,
            purpose=purpose,
            crash_limit=crash_limit,
            timeout=timeout,
            retry=retry,
        )

    async def aeffect(
        self,
        step_id: str,
        fn: Callable[..., Any],
        *args: Any,
        reconcile: Reconcile | None = None,
        key: str | None = None,
        approval: Approval | None = None,
        artifacts: Sequence[ArtifactRef | str] = (),
        operation: str | None = None,
        purpose: str = "",
        crash_limit: int | None = None,
        timeout: float | timedelta | Timeout | None = None,
        retry: Retry | None = None,
        **kwargs: Any,
    ) -> Any:
        """Async twin of :meth:`effect` (an async ``fn``'s timed-out attempt is cancelled)."""
        with self._concurrent(step_id):
            return await effects.aperform(
                self.journal,
                step_id,
                fn,
                args,
                kwargs,
                reconcile=reconcile,
                key=key,
                approval=approval,
                artifacts=artifacts,
                operation=operation,
                purpose=purpose,
                crash_limit=crash_limit,
                timeout=timeout,
                retry=retry,
            )

    # ------------------------------------------------------------- approvals, artifacts

    def approval(
        self,
        name: str,
        artifacts: Sequence[ArtifactRef | str],
        *,
        summary: str = "",
        timeout: timedelta | None = None,
        approvers: Sequence[str] = (),
        required: int = 1,
        escalate: Sequence[Escalation] = (),
    ) -> Approval:
        """Ask a person to approve exactly this content; wait durably for the decision.

        The approval id is ``<name>@<hash of the content hashes>``: different content is a
        different approval. Returns an :class:`~torpor.Approval` to pass to :meth:`effect`.
        Decisions are signed by each approver's own key and verified against the trusted
        keyring (:mod:`torpor.keys`); one that does not verify is recorded as refused and the
        run keeps waiting. ``approvers`` (names in the keyring): only they may decide, and
        ``required`` distinct ones of them must approve (N-of-M; ConfigError unless
        ``1 <= required <= len(approvers)``); any one of them denying denies.
        Raises ApprovalDeniedError when denied (or when ``timeout`` passes first).
        ``escalate``: what happens when nobody answers — stages made with
        :func:`torpor.engine.escalation.after` (notify by an effect, hand to other approvers,
        then deny or cancel), recorded as they are reached (``wait_escalated``).
        """

        def perform(sid: str, fn: Callable[..., Any], info: dict[str, Any]) -> Any:
            stage = next((x for x in escalate if x.notify is fn), None)
            rec = stage.reconcile if stage is not None else None
            return self.effect(sid, fn, info, reconcile=rec, purpose=f"escalation of {name}")

        return approvals.request(
            self.journal,
            name,
            artifacts,
            summary=summary,
            timeout=timeout,
            approvers=approvers,
            required=required,
            escalate=escalate,
            perform=perform,
        )

    def artifact(
        self, name: str, data: bytes | str, *, media_type: str = "application/octet-stream"
    ) -> ArtifactRef:
        """Store ``data`` content-addressed (sha256) and record it as artifact ``name``.

        Returns an :class:`~torpor.ArtifactRef` (hash, version, size) — the only thing
        checkpoints hold. On replay with the same content the recorded reference is returned;
        new content makes a new version.
        """
        return steps.artifact(self.journal, name, data, media_type)

    def read_artifact(self, ref: ArtifactRef | str) -> bytes:
        """The bytes of an artifact (by reference or sha256), hash-verified."""
        digest = ref.sha256 if isinstance(ref, ArtifactRef) else ref
        return self.journal.host.artifacts.get(digest)

    # ------------------------------------------------------------- waits

    def wait_for(self, signal: str, *, timeout: timedelta | None = None) -> Any:
        """Wait durably for a signal named ``signal``; return its payload.

        The deadline (``timeout`` from when the wait *began*) is recorded and survives
        restarts. The run holds no lease and no process while it waits. A signal sent before
        the wait began is kept and consumed here. Raises WaitTimeout at the deadline.
        """
        return waits.wait_for(self.journal, signal, timeout)

    def sleep(
        self, duration: timedelta | float | None = None, *, until: datetime | None = None
    ) -> None:
        """Sleep durably: ``duration`` (timedelta or seconds) or ``until`` (aware datetime).

        The deadline is fixed when the sleep begins; after a restart the run wakes at that
        original deadline, once.
        """
        waits.sleep(self.journal, duration, until)

    # ------------------------------------------------------------- child runs

    def spawn(
        self,
        workflow: str | Callable[..., Any],
        input: Any = None,
        *,
        run_id: str | None = None,
        name: str | None = None,
        queue: str | None = None,
        key: str | None = None,
        priority: int = 0,
    ) -> Child:
        """Start a child run of ``workflow`` (a registered name, a workflow function or an
        :class:`~torpor.agents.Agent`) with ``input``, recorded in this run as a step
        ``child:<name>`` (``name`` defaults to the workflow's); return its
        :class:`~torpor.Child` at once, without waiting (:meth:`wait_children` waits).

        The child is a full run: its own history, lease, retries and approvals, executed by
        any worker (``queue``, ``key``, ``priority`` as for :meth:`torpor.Runtime.start`) or
        by the process that resumes this run (:meth:`torpor.Runtime.resume`, for a child in
        no queue). Idempotent (G14): its run id is ``<run id>.<step id>`` unless ``run_id``
        is given, and a resumed parent finds the child it started, never a second. ConfigError
        when ``run_id`` is a run that is not this run's child; PayloadError for an ``input``
        that cannot be recorded. The tree's rules: :mod:`torpor.engine.children`.
        """
        dispatch = queues.dispatch_for(queue, key, priority) if queue is not None else None
        return children.spawn(
            self.journal,
            workflow,
            input,
            run_id=run_id,
            dispatch=dispatch,
            name=name,
        )

    def wait_children(
        self,
        children_: Sequence[Child],
        *,
        until: str | int = "all",
        cancel_rest: bool = False,
    ) -> list[ChildResult]:
        """Wait durably — no lease, no process — until ``until`` of ``children_`` reached a
        final outcome: ``"all"`` (default), ``"first"``, or a count n. Returns a
        :class:`~torpor.ChildResult` per child, in the order given (``outcome`` None for one
        not done when the wait ended). A child's failure is a value, never raised. A child
        that ends ``unresolved`` or ``blocked`` does not end the wait: this run waits on,
        needing attention that names the child, until a person settles it. ``cancel_rest``:
        cancel the children not done when the wait ends. ConfigError for no children, a
        repeated child, or a bad ``until``.
        """
        return children.wait(self.journal, children_, until, cancel_rest=cancel_rest)

    def child(
        self,
        workflow: str | Callable[..., Any],
        input: Any = None,
        *,
        run_id: str | None = None,
        name: str | None = None,
        queue: str | None = None,
    ) -> ChildResult:
        """Start a child run and wait for its final outcome: :meth:`spawn` then
        :meth:`wait_children` of that one child. Returns its :class:`~torpor.ChildResult`
        (``ok``, ``outcome``, ``reason``, ``result``)."""
        c = self.spawn(workflow, input, run_id=run_id, name=name, queue=queue)
        return self.wait_children([c])[0]

    async def aspawn(
        self,
        workflow: str | Callable[..., Any],
        input: Any = None,
        *,
        run_id: str | None = None,
        name: str | None = None,
        queue: str | None = None,
        key: str | None = None,
        priority: int = 0,
    ) -> Child:
        """Async twin of :meth:`spawn` (for async workflows; one task at a time)."""
        with self._concurrent(f"child:{name or workflow!s}"):
            return self.spawn(
                workflow, input, run_id=run_id, name=name, queue=queue, key=key,
                priority=priority,
            )  # fmt: skip

    async def await_children(
        self, children_: Sequence[Child], *, until: str | int = "all", cancel_rest: bool = False
    ) -> list[ChildResult]:
        """Async twin of :meth:`wait_children`."""
        with self._concurrent("children"):
            return self.wait_children(children_, until=until, cancel_rest=cancel_rest)

    async def achild(
        self,
        workflow: str | Callable[..., Any],
        input: Any = None,
        *,
        run_id: str | None = None,
        name: str | None = None,
        queue: str | None = None,
    ) -> ChildResult:
        """Async twin of :meth:`child`."""
        c = await self.aspawn(workflow, input, run_id=run_id, name=name, queue=queue)
        return (await self.await_children([c]))[0]

    # ------------------------------------------------------------- streams

    def stream(self, name: str) -> RunStream:
        """The run's stream ``name`` (:mod:`torpor.streams`): ``run.stream("progress")
        .write(obj)`` writes an item readers see at once (``Client.stream``, ``torpor
        watch``), never again on a replay; not part of the history (G8)."""
        return RunStream(self.journal, name)

    # ------------------------------------------------------------- checkpoints & evidence

    def restore(self, default: Any) -> Any:
        """The state saved by the latest :meth:`checkpoint`, or ``default`` if none.

        Also restores the step-id counters saved with it, so the code after ``restore``
        continues exactly where the checkpoint was taken instead of replaying from the start.
        """
        return steps.restore(self.journal, default)

    def checkpoint(self, state: Any) -> None:
        """Mark a boundary: resume restarts from ``state`` (read back with :meth:`restore`, as
        it went in: see :meth:`step`)."""
        steps.checkpoint(self.journal, state)

    def verify(self, name: str, check: bool | Callable[[], Any], detail: Any = None) -> bool:
        """Record a verification (evidence for completion criterion ``name``); return passed.

        ``check`` is a bool or a callable returning a bool or ``(bool, detail)``. A check that
        raises is recorded as failed with the error as detail.
        """
        return steps.verify(self.journal, name, check, detail)

    def warn(self, message: str) -> None:
        """Record a warning: a run with warnings ends ``succeeded_with_warnings`` at best."""
        steps.warn(self.journal, message)

    def stop_safe(self, reason: str) -> None:
        """End the run ``stopped_safe``: stopped before any effect (refused if one happened)."""
        raise RunStopped(Outcome.STOPPED_SAFE, reason)

    def block(self, reason: str) -> None:
        """End the run ``blocked`` (missing authority, budget); a person may reopen it."""
        raise RunStopped(Outcome.BLOCKED, reason)

    # ------------------------------------------------------------- runtime-supplied values

    def now(self, name: str | None = None) -> float:
        """The store clock, in epoch seconds (use instead of time.time() in workflows), read
        once and recorded: a replay returns the recorded time. See :meth:`uuid` for ``name``."""
        where = draws.site(inspect.currentframe().f_back)  # type: ignore[union-attr]
        return float(draws.draw(self.journal, "now", name, self._clock_s, where))

    def _clock_s(self) -> float:
        return self.journal.now_ms() / 1000

    def uuid(self, name: str | None = None) -> UUID:
        """A random UUID (version 4), drawn once and recorded: a replay returns the same id,
        so an id used after a crash is the one drawn before it.

        ``name`` identifies the draw (its step id is ``uuid:<name>``; unnamed draws are
        ``uuid``, ``uuid#2`` … in call order). A code change that adds a draw before a recorded
        one is refused with NonDeterminismError naming both draws (named draws by name,
        unnamed ones by the source line they were drawn at), unless the new draw is under
        :meth:`patched`; nothing is recorded then."""
        where = draws.site(inspect.currentframe().f_back)  # type: ignore[union-attr]
        value = draws.draw(self.journal, "uuid", name, uuid4, where)
        return value if isinstance(value, UUID) else UUID(str(value))

    def random(self, name: str | None = None) -> float:
        """A random float in [0.0, 1.0), drawn once and recorded (see :meth:`uuid`)."""
        where = draws.site(inspect.currentframe().f_back)  # type: ignore[union-attr]
        return float(draws.draw(self.journal, "random", name, _random.random, where))


__all__ = ["Run"]
