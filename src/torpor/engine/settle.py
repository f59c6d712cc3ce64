"""What the end of an effect's attempt means (see :mod:`torpor.engine.effects` for the life of
an effect): a return is observed; an error is reconciled — ``applied`` settles it, ``absent``
is retried under the retry policy (a new recorded intent) or recorded as the failure,
``unknown`` leaves the run ``unresolved``; an attempt that outlived its timeout is never
overlapped by another: stopped when it can be, else reconciled and waited for up to the grace,
and left for a person when it is still running after it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .. import faults
from ..errors import (
    AttemptStoppedError,
    AttemptTimeoutError,
    EffectNotApplied,
    EffectUnresolved,
    PayloadError,
    StepError,
)
from ..history import (
    EffectFailed,
    EffectIntended,
    EffectObserved,
    EffectReconciled,
    Payload,
    Policy,
    StepCompleted,
    StepFailed,
    Verdict,
)
from . import attempts
from .attempts import Ended, Retry, Running, Timeout
from .journal import Journal
from .reconcile import Absent, Applied, EffectCall, Reconcile, Reconciliation, Unknown, ask


@dataclass(frozen=True)
class AttemptPolicy:
    """How one effect's attempts go: its reconcile, timeout, retry policy, and whether its
    function takes the idempotency key (then a retry under the same key cannot duplicate it)."""

    reconcile: Reconcile | None
    timeout: Timeout | None
    retry: Retry | None
    keyed: bool


@dataclass(frozen=True)
class Settled:
    """The effect is settled: ``value`` is its result as the workflow sees it."""

    value: Any


def grace_s(pol: AttemptPolicy) -> float:
    """Seconds to wait for a timed-out attempt that cannot be stopped (the timeout's grace)."""
    return pol.timeout.grace_s if pol.timeout is not None else Timeout.grace_s


def left_running(
    j: Journal, call: EffectCall, pol: AttemptPolicy, earlier: Running, ended: Ended | None
) -> Ended:
    """An earlier attempt of this effect was left running in this process (its run went
    ``unresolved``, and it was settled meanwhile): no new attempt starts beside it. Once it
    ended, how it ended is this attempt's outcome; still running after the grace, the run is
    ``unresolved`` again."""
    if ended is not None:
        return ended
    attempts.left_running((j.store.url, call.idempotency_key), earlier)
    reason = (
        f"an earlier attempt of this effect is still running ({earlier.describe()}) after a "
        f"further {grace_s(pol):g} s: no other attempt starts while it may"
    )
    key = call.idempotency_key
    j.append(EffectReconciled(key=key, verdict=Verdict.UNKNOWN, reason=reason))
    raise EffectUnresolved(key, reason)


def _late(call: EffectCall, pol: AttemptPolicy, out: Running | None = None) -> str:
    assert pol.timeout is not None
    late = f"attempt {call.attempt} did not return within {pol.timeout.seconds:g} s"
    startup = getattr(out, "startup_s", None)
    if startup is not None:  # a child process: the timeout counts from its function's start
        late += f" of its function starting (after a start-up of {startup:.1f} s, not counted)"
    return late


def timed_out(
    j: Journal, sid: str, call: EffectCall, pol: AttemptPolicy, out: Running
) -> Settled | None:
    """An attempt outlived its timeout. One that can be stopped is stopped (its end is then
    awaited). One in a thread is in doubt: reconcile is asked, and ``applied`` settles it
    (returned); otherwise the caller waits for the thread, up to the grace."""
    if out.stoppable:
        out.cancel()
        return None
    verdict = ask(call, pol.reconcile)
    if not isinstance(verdict, Applied):
        return None
    data = j.jsonable(sid, verdict.result, "reconciled result")
    reason = f"{_late(call, pol)}; reconcile found it applied"
    j.append(
        EffectReconciled(
            key=call.idempotency_key, verdict=Verdict.APPLIED, result=data, reason=reason
        ),
        StepCompleted(step_id=sid, result=data, policy=Policy.EFFECT),
    )
    return Settled(j.value(sid, data))


def after_grace(
    j: Journal, call: EffectCall, pol: AttemptPolicy, out: Running, ended: Ended | None
) -> Ended:
    """After waiting out the grace for a timed-out attempt: still running — the run becomes
    ``unresolved`` with the reason (EffectUnresolved); stopped — a timeout error of the attempt,
    to reconcile at once; else how it ended (a late return or error)."""
    assert pol.timeout is not None
    late = _late(call, pol, out)
    if ended is None:
        what = "was cancelled but had not stopped" if out.stoppable else "was still running"
        reason = (
            f"{late} and {what} {pol.timeout.grace_s:g} s later (the grace; {out.describe()}): "
            "it may still change the world, and no other attempt starts while it may"
        )
        key = call.idempotency_key
        attempts.left_running((j.store.url, key), out)
        j.append(EffectReconciled(key=key, verdict=Verdict.UNKNOWN, reason=reason))
        raise EffectUnresolved(key, reason)
    if ended.stopped:
        how = "killed" if pol.timeout.kill else "cancelled"
        return Ended(error=AttemptTimeoutError(f"{late} and was {how}"))
    return ended


def ended(
    j: Journal, sid: str, call: EffectCall, pol: AttemptPolicy, out: Ended, tries: int
) -> Settled | EffectCall:
    """An attempt ended: record its observation, or reconcile its error — ``applied`` settles
    it; ``absent`` (or EffectNotApplied) with a retry left records the verdict and the next
    intent and returns the next call; a keyed function's ``unknown`` with a retry left returns
    the same call (its key deduplicates); otherwise the failure or the doubt is recorded and
    raised (StepError, EffectUnresolved)."""
    if out.error is None:
        try:
            faults.point("effect.called")  # the world changed; `ack` faults raise here
        except Exception as lost:
            out = Ended(error=lost)
        else:
            return Settled(observe(j, sid, call, out.value))
    exc = out.error
    if not isinstance(exc, Exception):  # (SystemExit in a child process or a thread)
        exc = RuntimeError(f"the attempt ended with {type(exc).__name__}: {exc}")
    cancelled = j.state.cancel_requested
    if out.stopped and cancelled:
        exc = AttemptStoppedError(
            f"attempt {call.attempt} was stopped by the cancel ({j.state.cancel_reason})"
        )
    not_applied = isinstance(exc, EffectNotApplied)
    verdict = Absent() if not_applied else ask(call, pol.reconcile)
    r = pol.retry
    again = (
        r is not None
        and not cancelled  # a cancelled run starts no new attempt
        and tries < r.attempts
        and (not_applied or isinstance(exc, r.on))
    )
    key = call.idempotency_key
    if again and isinstance(verdict, Absent):
        err = f"{type(exc).__name__}: {exc}"
        first: Payload = (
            EffectFailed(key=key, error=err)
            if not_applied
            else EffectReconciled(
                key=key, verdict=Verdict.ABSENT, reason=f"{err}; reconcile found no trace"
            )
        )
        info = j.state.effects[key]
        nxt = replace(call, attempt=call.attempt + 1)
        j.append(
            first,
            EffectIntended(
                step_id=sid,
                key=key,
                operation=call.operation,
                attempt=nxt.attempt,
                approval_id=info.approval_id,
            ),
        )
        faults.point("effect.intended")
        return nxt
    if again and isinstance(verdict, Unknown) and pol.keyed:
        return call  # the same intent again: the outside world deduplicates by the key
    return Settled(on_error(j, sid, call, exc, verdict))


def observe(j: Journal, sid: str, call: EffectCall, value: Any) -> Any:
    """The call returned: record the observation and the step's result."""
    key = call.idempotency_key
    try:
        data = j.jsonable(sid, value)
    except PayloadError as exc:
        # The effect happened: record that fact honestly, then refuse the result.
        j.append(
            EffectObserved(key=key, result={"unserializable": repr(value)[:500]}),
            StepFailed(step_id=sid, error=str(exc)),
        )
        raise
    # The observation rides on the next append (Journal.defer): the effect costs one durable
    # append, its intent. Written at the latest when the execution ends.
    j.defer(
        EffectObserved(key=key, result=data),
        StepCompleted(step_id=sid, result=data, policy=Policy.EFFECT),
    )
    return j.value(sid, data)


def on_error(
    j: Journal, sid: str, call: EffectCall, exc: Exception, verdict: Reconciliation
) -> Any:
    """The call raised and the world was asked (``verdict``; Absent when the function said
    nothing happened): record it — applied (the result stands), unknown (unresolved), or
    absent (the step failed: StepError)."""
    err = f"{type(exc).__name__}: {exc}"
    key = call.idempotency_key
    if isinstance(verdict, Applied):
        data = j.jsonable(sid, verdict.result, "reconciled result")
        j.append(
            EffectReconciled(key=key, verdict=Verdict.APPLIED, result=data, reason=err),
            StepCompleted(step_id=sid, result=data, policy=Policy.EFFECT),
        )
        return j.value(sid, data)
    if isinstance(verdict, Unknown):
        reason = f"{err}; {verdict.reason}"
        j.append(EffectReconciled(key=key, verdict=Verdict.UNKNOWN, reason=reason))
        raise EffectUnresolved(key, reason)
    j.append(EffectFailed(key=key, error=err), StepFailed(step_id=sid, error=err))
    raise StepError(j.run_id, sid, err) from exc
