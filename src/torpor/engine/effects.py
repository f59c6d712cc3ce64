"""Effects (DESIGN.md §1, G2): a change to the outside world, performed at most once per
idempotency key, and reconciled — never blindly retried — when its outcome is not recorded.

The life of an effect:

- **intent** before the call: the step's start, the approval it consumes (G6), and
  ``effect_intended`` with its key and operation, in one append (:func:`perform`);
- **call** (an *attempt*, under the effect's timeout: :mod:`torpor.engine.attempts`), then
  **observation** (``effect_observed`` + the step's completion: folded at once, written with
  the run's next append — :meth:`~torpor.engine.journal.Journal.defer` — so an effect costs one
  durable append; a process killed before that write leaves the effect intended, reconciled
  on recovery like a crash during the call), or, when the call raised, a
  **reconcile on error**: the world is asked what happened (``applied`` settles it, ``absent``
  records the failure — or, under a retry policy, a new intent and another attempt —
  ``unknown`` leaves the run ``unresolved``);
- **a timed-out attempt** is in doubt, and never overlapped by another attempt of the same
  effect: one that can be stopped (a child process, a task) is stopped and reconciled at once;
  one in a thread (which cannot be killed) is reconciled (``applied`` settles it), then waited
  for up to the timeout's grace — its late return is the observation, its late error is
  reconciled again — and if it is still running after the grace the run becomes ``unresolved``
  with the reason, for a person; an attempt left running so is never overlapped in this
  process, even once a person settled the effect (:mod:`torpor.engine.settle`);
- **reconcile on replay**: an intent without an observation, met again when the code replays
  the call, is reconciled before anything is repeated; **reconcile at takeover** and **a
  person's resolution**: :mod:`torpor.engine.reconcile`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from .. import faults
from ..errors import (
    EffectUnresolved,
    InboxPendingError,
    NonDeterminismError,
    StepError,
    TorporError,
)
from ..history import (
    ArtifactRef,
    EffectIntended,
    Payload,
    Policy,
    StepStarted,
)
from . import approvals, attempts, settle
from .approvals import Approval
from .attempts import Ended, Retry, Running, Timeout
from .calls import accepts_kw, refuse_async_in_loop
from .forked import fork_key
from .journal import Journal, busy_in, step_work
from .lease import before_effect
from .reconcile import (
    Absent,
    Applied,
    EffectCall,
    Reconcile,
    Reconciliation,
    Unknown,
    ask,
    reconcile_at_takeover,
    reconcile_on_replay,
    reconcile_restored,
    register,
    registered_reconcile,
    resolution_payloads,
)

#: How often a consuming intent refused for pending inbox messages is re-checked and retried.
_GUARD_RETRIES = 20


# ------------------------------------------------------------------ declared operations

F = TypeVar("F", bound=Callable[..., Any])
TimeoutSpec = float | timedelta | Timeout | None


@dataclass(frozen=True)
class EffectSpec:
    """An effect function's operation identity, reconcile, timeout and retry policy (set by
    :func:`effect`)."""

    operation: str
    reconcile: Reconcile | None
    timeout: Timeout | None = None
    retry: Retry | None = None


def effect(
    fn: F | None = None,
    *,
    reconcile: Reconcile | None = None,
    operation: str | None = None,
    timeout: TimeoutSpec = None,
    retry: Retry | None = None,
) -> Any:
    """Declare a function an effect operation: ``run.effect(step_id, fn, ...)`` then records
    ``operation`` (default ``module:qualname``) and uses ``reconcile``, ``timeout`` (seconds, a
    timedelta or a :class:`~torpor.Timeout`) and ``retry`` (a :class:`~torpor.Retry`) unless
    the call gives its own, and a new lease owner reconciles an in-flight call of it at
    takeover, before the workflow runs again (the essay's "begins by reading the operation
    record and reconciling any in-flight effects")::

        @torpor.effect(reconcile=find_charge, timeout=torpor.Timeout(10, kill=True))
        def charge(order: dict, idempotency_key: str) -> dict: ...
    """
    spec_timeout = attempts.timeout_of(timeout)

    def deco(f: F) -> F:
        op = operation or f"{f.__module__}:{f.__qualname__}"
        spec = EffectSpec(op, reconcile, spec_timeout, retry)
        f.__torpor_effect__ = spec  # type: ignore[attr-defined]
        if reconcile is not None:
            register(op, reconcile)
        return f

    return deco(fn) if fn is not None else deco


# ------------------------------------------------------------------ performing


def _policy(
    j: Journal,
    step_id: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    reconcile: Reconcile | None,
    timeout: TimeoutSpec,
    retry: Retry | None,
) -> settle.AttemptPolicy:
    """The effect's policy from the call and the declaration (the call wins). Refuses, before
    anything is recorded, a bad timeout or a killable call that cannot be sent to a child."""
    spec: EffectSpec | None = getattr(fn, "__torpor_effect__", None)
    try:
        t = attempts.timeout_of(timeout) if timeout is not None else None
        t = t if t is not None or spec is None else spec.timeout
        if t is not None and t.kill:
            attempts.picklable_call(fn, args, kwargs)
    except TorporError as exc:
        raise TorporError(f"run {j.run_id!r} effect {step_id!r}: {exc}") from None
    return settle.AttemptPolicy(
        reconcile=reconcile or (spec.reconcile if spec else None),
        timeout=t,
        retry=retry if retry is not None else (spec.retry if spec else None),
        keyed=accepts_kw(fn, "idempotency_key"),
    )


def perform(
    j: Journal,
    step_id: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    reconcile: Reconcile | None = None,
    key: str | None = None,
    approval: Approval | None = None,
    artifacts: Sequence[ArtifactRef | str] = (),
    operation: str | None = None,
    purpose: str = "",
    crash_limit: int | None = None,
    timeout: TimeoutSpec = None,
    retry: Retry | None = None,
) -> Any:
    """Perform an effect from sync code (see :meth:`torpor.Run.effect`); its recorded result."""
    refuse_async_in_loop(fn)
    pol = _policy(j, step_id, fn, args, kwargs, reconcile, timeout, retry)
    sid, done, call = _intend(
        j,
        step_id,
        fn,
        args,
        kwargs,
        key,
        approval,
        artifacts,
        operation,
        purpose,
        pol.reconcile,
        crash_limit,
    )
    if call is None:  # recorded (or reconciled as applied): its result, even None
        return j.value(sid, done)
    with busy_in(j, sid):
        return _attempts(j, sid, fn, args, pol, call)


def _attempts(
    j: Journal,
    sid: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    pol: settle.AttemptPolicy,
    call: EffectCall,
) -> Any:
    """:func:`perform`'s attempts of an intended effect until it is settled."""
    tries, grace_s = 1, settle.grace_s(pol)
    while True:
        out: Ended | Running
        earlier = attempts.take_left_running((j.store.url, call.idempotency_key))
        if earlier is not None:  # an attempt left running here: none starts beside it
            out = settle.left_running(j, call, pol, earlier, earlier.join(grace_s))
        else:
            before_effect(j, sid)
            with step_work():
                out = attempts.call(fn, args, call.kwargs, pol.timeout)
        if isinstance(out, Running):
            settled = settle.timed_out(j, sid, call, pol, out)
            if settled is not None:
                return settled.value
            out = settle.after_grace(j, call, pol, out, out.join(grace_s))
        nxt = settle.ended(j, sid, call, pol, out, tries)
        if isinstance(nxt, settle.Settled):
            return nxt.value
        assert pol.retry is not None
        time.sleep(pol.retry.delay_s(tries))
        tries, call = tries + 1, nxt


async def aperform(
    j: Journal,
    step_id: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    reconcile: Reconcile | None = None,
    key: str | None = None,
    approval: Approval | None = None,
    artifacts: Sequence[ArtifactRef | str] = (),
    operation: str | None = None,
    purpose: str = "",
    crash_limit: int | None = None,
    timeout: TimeoutSpec = None,
    retry: Retry | None = None,
) -> Any:
    """Async twin of :func:`perform` (``fn`` may be sync or async; an async one's timed-out
    attempt is a task, cancelled at the timeout)."""
    pol = _policy(j, step_id, fn, args, kwargs, reconcile, timeout, retry)
    sid, done, call = _intend(
        j,
        step_id,
        fn,
        args,
        kwargs,
        key,
        approval,
        artifacts,
        operation,
        purpose,
        pol.reconcile,
        crash_limit,
    )
    if call is None:
        return j.value(sid, done)
    tries, grace_s = 1, settle.grace_s(pol)
    while True:
        out: Ended | Running
        earlier = attempts.take_left_running((j.store.url, call.idempotency_key))
        if earlier is not None:
            out = settle.left_running(j, call, pol, earlier, await earlier.ajoin(grace_s))
        else:
            before_effect(j, sid)
            with step_work():
                out = await attempts.acall(fn, args, call.kwargs, pol.timeout)
        if isinstance(out, Running):
            settled = settle.timed_out(j, sid, call, pol, out)
            if settled is not None:
                return settled.value
            out = settle.after_grace(j, call, pol, out, await out.ajoin(grace_s))
        nxt = settle.ended(j, sid, call, pol, out, tries)
        if isinstance(nxt, settle.Settled):
            return nxt.value
        assert pol.retry is not None
        await asyncio.sleep(pol.retry.delay_s(tries))
        tries, call = tries + 1, nxt


def _intend(
    j: Journal,
    step_id: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    key: str | None,
    approval: Approval | None,
    artifacts: Sequence[ArtifactRef | str],
    operation: str | None,
    purpose: str,
    reconcile: Reconcile | None,
    crash_limit: int | None = None,
) -> tuple[str, Any, EffectCall | None]:
    """Up to the call: ``(step id, recorded result, None)`` when the effect is settled, else
    ``(step id, None, the call to make)`` with its intent committed."""
    sid = j.next_id(step_id)
    j.boundary()
    comp = j.recorded(sid, Policy.EFFECT)
    if comp is not None:
        return sid, comp.result, None
    _raise_recorded_failure(j, sid)
    spec: EffectSpec | None = getattr(fn, "__torpor_effect__", None)
    op = str(operation or (spec.operation if spec else getattr(fn, "__qualname__", "effect")))
    key, redoes = fork_key(j.state, sid, op, key, j.store)  # (a fork's keys: .forked)
    kw = dict(kwargs)
    if accepts_kw(fn, "idempotency_key"):
        kw["idempotency_key"] = key
    if accepts_kw(fn, "fencing_token"):
        # The lease epoch, for services that reject stale writers (Kleppmann's fencing
        # tokens): a paused worker whose lease was taken over cannot complete the effect.
        kw["fencing_token"] = j.lease.epoch
    info = j.state.effects.get(key)
    if info is not None and info.step_id != sid:
        raise NonDeterminismError(
            f"run {j.run_id!r}: idempotency key {key!r} belongs to step {info.step_id!r}, "
            f"not {sid!r}"
        )
    if info is not None and info.status == "intended":
        # Crashed between intent and observation: ask the outside world (never retry blindly).
        call = EffectCall(j.run_id, sid, key, op, info.attempt, args, kw)
        settled = reconcile_on_replay(j, sid, call, reconcile)
        if settled is not None:
            return sid, settled[0], None
        j.guard_crashes(sid, crash_limit)  # absent after every crash: parked at the limit
        info = j.state.effects[key]
    if info is not None and info.status == "unknown":
        raise EffectUnresolved(key, info.reason or "outcome unknown; awaiting a person")
    attempt = info.attempt + 1 if info is not None else 1
    payloads: list[Payload] = []
    open_step = j.state.steps.get(sid)
    if open_step is None or open_step.status != "started":
        payloads.append(
            StepStarted(
                step_id=sid, policy=Policy.EFFECT, purpose=purpose, attempt=j.next_attempt(sid)
            )
        )
    approval_id, consume, hashes = None, False, []
    if approval is not None:
        # Changed content after approval: its new approval is requested (and waited for).
        approval = approvals.renewed(j, approval, artifacts, sid)
        hashes = approvals.covering(j, approval, artifacts, sid)
        approval_id = approval.approval_id
        # A retry after `absent` (engine or person) stays under the consumption recorded
        # with this effect's first intent, once its decisions are checked again (G6); any
        # other use must find the approval unconsumed.
        consume = info is None or info.approval_id != approval_id
        if not consume:
            consume = not approvals.still_consumed(j, approval_id, sid)
        if consume:
            approvals.verify(j, approval)
            payloads.append(approvals.consumption(approval_id, sid, hashes))
    payloads.append(
        EffectIntended(
            step_id=sid,
            key=key,
            operation=op,
            attempt=attempt,
            approval_id=approval_id,
            redoes=redoes,
        )
    )
    call = EffectCall(j.run_id, sid, key, op, attempt, args, kw)
    if info is None and j.state.seq < j.reconcile_until:
        # A store a person accepted back from a restore: this effect may have run before it.
        settled = reconcile_restored(j, sid, call, reconcile, payloads)
        if settled is not None:
            return sid, settled[0], None
    for _ in range(_GUARD_RETRIES):
        try:
            j.append(*payloads, if_inbox_empty=consume)
            break
        except InboxPendingError:
            # A message (a revocation?) landed between the check and the consuming append:
            # move it into the history and check the approval again before consuming it.
            assert approval is not None
            approvals.verify(j, approval)
    else:
        raise TorporError(
            f"run {j.run_id!r} step {sid!r}: inbox messages keep arriving; "
            "the approval could not be consumed"
        )
    faults.point("effect.intended")
    return sid, None, call


def _raise_recorded_failure(j: Journal, sid: str) -> None:
    """A step recorded as failed raises its failure again (replay is deterministic)."""
    info = j.state.steps.get(sid)
    if info is not None and info.status == "failed":
        raise StepError(j.run_id, sid, j.failure_of(sid))


__all__ = [
    "Absent",
    "Applied",
    "EffectCall",
    "EffectSpec",
    "Reconcile",
    "Reconciliation",
    "Unknown",
    "aperform",
    "ask",
    "effect",
    "perform",
    "reconcile_at_takeover",
    "registered_reconcile",
    "resolution_payloads",
]
