"""Effects (DESIGN.md §1, G2): a change to the outside world, performed at most once per
idempotency key, and reconciled — never blindly retried — when its outcome is not recorded.

The life of an effect, all of it here:

- **intent** before the call: the step's start, the approval it consumes (G6), and
  ``effect_intended`` with its key and operation, in one append (:func:`perform`);
- **call**, then **observation** (``effect_observed`` + the step's completion), or, when the call
  raised, a **reconcile on error**: the world is asked what happened (``applied`` settles it,
  ``absent`` records the failure, ``unknown`` leaves the run ``unresolved``);
- **reconcile on replay**: an intent without an observation, met again when the code replays
  the call, is reconciled before anything is repeated (:func:`_replay_intent`);
- **reconcile at takeover**: a new lease owner reconciles in-flight effects whose reconcile is
  registered with their operation (:func:`effect`; an agent's tools) before the workflow runs
  again (:func:`reconcile_at_takeover`) — the verdict is in the history first;
- **a person's resolution** of an effect in doubt (``torpor resolve``):
  :func:`resolution_payloads`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .. import faults
from ..errors import (
    EffectNotApplied,
    EffectUnresolved,
    InboxPendingError,
    NonDeterminismError,
    PayloadError,
    StepError,
    TorporError,
)
from ..history import (
    ArtifactRef,
    EffectFailed,
    EffectIntended,
    EffectObserved,
    EffectReconciled,
    Payload,
    Policy,
    RunReopened,
    RunState,
    RunStatus,
    StepCompleted,
    StepFailed,
    StepStarted,
    Verdict,
)
from . import approvals
from .approvals import Approval
from .calls import accepts_kw, refuse_async_in_loop, resolve
from .journal import Journal

#: How often a consuming intent refused for pending inbox messages is re-checked and retried.
_GUARD_RETRIES = 20


@dataclass(frozen=True)
class Applied:
    """Reconcile found the effect happened; ``result`` stands for its return value."""

    result: Any = None


@dataclass(frozen=True)
class Absent:
    """Reconcile found the effect did not happen: it is safe to perform it now."""


@dataclass(frozen=True)
class Unknown:
    """Reconcile cannot tell: the run becomes ``unresolved`` and waits for a person."""

    reason: str = "outcome cannot be determined"


Reconciliation = Applied | Absent | Unknown
Reconcile = Callable[["EffectCall"], Reconciliation]


@dataclass(frozen=True)
class EffectCall:
    """What ``reconcile`` is asked about: the effect's identity and the call's arguments.
    At takeover (before the code runs again) the arguments are not known: ``args`` is ``()``
    and ``kwargs`` holds only the engine's (``idempotency_key``); a reconcile that needs more
    raises, and the effect is reconciled when the code reaches the call."""

    run_id: str
    step_id: str
    idempotency_key: str
    operation: str
    attempt: int
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


# ------------------------------------------------------------------ registered operations

F = TypeVar("F", bound=Callable[..., Any])

#: Operations whose reconcile is known without running the code: operation -> reconcile.
_REGISTRY: dict[str, Reconcile] = {}


@dataclass(frozen=True)
class EffectSpec:
    """An effect function's operation identity and reconcile (set by :func:`effect`)."""

    operation: str
    reconcile: Reconcile | None


def effect(
    fn: F | None = None, *, reconcile: Reconcile | None = None, operation: str | None = None
) -> Any:
    """Declare a function an effect operation: ``run.effect(step_id, fn, ...)`` then records
    ``operation`` (default ``module:qualname``) and uses ``reconcile`` unless the call gives
    its own, and a new lease owner reconciles an in-flight call of it at takeover, before the
    workflow runs again (the essay's "begins by reading the operation record and reconciling
    any in-flight effects")::

        @torpor.effect(reconcile=find_charge)
        def charge(order: dict, idempotency_key: str) -> dict: ...
    """

    def deco(f: F) -> F:
        op = operation or f"{f.__module__}:{f.__qualname__}"
        f.__torpor_effect__ = EffectSpec(op, reconcile)  # type: ignore[attr-defined]
        if reconcile is not None:
            _REGISTRY[op] = reconcile
        return f

    return deco(fn) if fn is not None else deco


def registered_reconcile(operation: str) -> Reconcile | None:
    """The reconcile registered for ``operation`` with :func:`effect`, or None."""
    return _REGISTRY.get(operation)


# ------------------------------------------------------------------ performing


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
) -> Any:
    """Perform an effect from sync code (see :meth:`torpor.Run.effect`); its recorded result."""
    refuse_async_in_loop(fn)
    spec: EffectSpec | None = getattr(fn, "__torpor_effect__", None)
    reconcile = reconcile or (spec.reconcile if spec else None)
    sid, done, call = _intend(
        j, step_id, fn, args, kwargs, key, approval, artifacts, operation, purpose, reconcile
    )
    if call is None:  # recorded (or reconciled as applied): its result, even None
        return j.value(sid, done)
    try:
        value = resolve(fn(*args, **call.kwargs))
        faults.point("effect.called")  # the world changed; `ack` faults raise here
    except Exception as exc:
        return _on_error(j, sid, call, reconcile, exc)
    return _observe(j, sid, call, value)


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
) -> Any:
    """Async twin of :func:`perform` (``fn`` may be sync or async)."""
    spec: EffectSpec | None = getattr(fn, "__torpor_effect__", None)
    reconcile = reconcile or (spec.reconcile if spec else None)
    sid, done, call = _intend(
        j, step_id, fn, args, kwargs, key, approval, artifacts, operation, purpose, reconcile
    )
    if call is None:
        return j.value(sid, done)
    try:
        value = fn(*args, **call.kwargs)
        if inspect.isawaitable(value):
            value = await value
        faults.point("effect.called")  # the world changed; `ack` faults raise here
    except Exception as exc:
        return _on_error(j, sid, call, reconcile, exc)
    return _observe(j, sid, call, value)


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
) -> tuple[str, Any, EffectCall | None]:
    """Up to the call: ``(step id, recorded result, None)`` when the effect is settled, else
    ``(step id, None, the call to make)`` with its intent committed."""
    sid = j.next_id(step_id)
    j.boundary()
    comp = j.recorded(sid, Policy.EFFECT)
    if comp is not None:
        return sid, comp.result, None
    _raise_recorded_failure(j, sid)
    key = key or f"{j.run_id}/{sid}"
    spec: EffectSpec | None = getattr(fn, "__torpor_effect__", None)
    op = str(operation or (spec.operation if spec else getattr(fn, "__qualname__", "effect")))
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
        settled = _replay_intent(j, sid, call, reconcile)
        if settled is not None:
            return sid, settled[0], None
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
        hashes = approvals.covering(j, approval, artifacts, sid)
        approval_id = approval.approval_id
        # A retry after `absent` (engine or person) stays under the consumption recorded
        # with this effect's first intent; any other use must find the approval unconsumed.
        consume = info is None or info.approval_id != approval_id
        if consume:
            approvals.verify(j, approval)
            payloads.append(approvals.consumption(approval_id, sid, hashes))
    payloads.append(
        EffectIntended(step_id=sid, key=key, operation=op, attempt=attempt, approval_id=approval_id)
    )
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
    return sid, None, EffectCall(j.run_id, sid, key, op, attempt, args, kw)


def _raise_recorded_failure(j: Journal, sid: str) -> None:
    """A step recorded as failed raises its failure again (replay is deterministic)."""
    info = j.state.steps.get(sid)
    if info is not None and info.status == "failed":
        raise StepError(j.run_id, sid, j.failure_of(sid))


def _replay_intent(
    j: Journal, sid: str, call: EffectCall, reconcile: Reconcile | None
) -> tuple[Any] | None:
    """An intent without an observation, met again on replay: reconcile it. Applied: recorded
    as the step's result, ``(result,)`` returned. Unknown: recorded, the run unresolved.
    Absent: recorded; None returned (perform it now)."""
    verdict = ask(call, reconcile)
    key = call.idempotency_key
    if isinstance(verdict, Applied):
        data = j.jsonable(sid, verdict.result, "reconciled result")
        j.append(
            EffectReconciled(key=key, verdict=Verdict.APPLIED, result=data),
            StepCompleted(step_id=sid, result=data, policy=Policy.EFFECT),
        )
        return (data,)
    if isinstance(verdict, Unknown):
        j.append(EffectReconciled(key=key, verdict=Verdict.UNKNOWN, reason=verdict.reason))
        raise EffectUnresolved(key, verdict.reason)
    j.append(EffectReconciled(key=key, verdict=Verdict.ABSENT, reason="reconcile found no trace"))
    return None


def _observe(j: Journal, sid: str, call: EffectCall, value: Any) -> Any:
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
    j.append(
        EffectObserved(key=key, result=data),
        StepCompleted(step_id=sid, result=data, policy=Policy.EFFECT),
    )
    return j.value(sid, data)


def _on_error(
    j: Journal, sid: str, call: EffectCall, reconcile: Reconcile | None, exc: Exception
) -> Any:
    """The call raised: ask the world (unless the function said nothing happened) and record
    the verdict — applied (the result stands), unknown (unresolved), or absent (the step
    failed: StepError)."""
    err = f"{type(exc).__name__}: {exc}"
    verdict = Absent() if isinstance(exc, EffectNotApplied) else ask(call, reconcile)
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


def ask(call: EffectCall, reconcile: Reconcile | None) -> Reconciliation:
    """What ``reconcile`` says of ``call``; Unknown (with why) when there is no reconcile, it
    raised, or it answered something else than Applied/Absent/Unknown."""
    if reconcile is None:
        # (The caller puts the call's own error, if any, in front of this reason.)
        return Unknown("no reconcile function: whether it happened cannot be checked")
    try:
        verdict = reconcile(call)
    except Exception as exc:
        return Unknown(f"reconcile raised {type(exc).__name__}: {exc}")
    if not isinstance(verdict, Applied | Absent | Unknown):
        return Unknown(f"reconcile returned {verdict!r}, not Applied/Absent/Unknown")
    return verdict


# ------------------------------------------------------------------ takeover and people


def reconcile_at_takeover(j: Journal, reconcilers: Mapping[str, Reconcile]) -> list[str]:
    """Right after a new owner took the lease, before the workflow runs again: reconcile every
    effect left intended whose operation has a known reconcile (``reconcilers``, then those
    registered with :func:`effect`). ``applied`` and ``absent`` are recorded at once (the
    verdict is in the history before the code replays); a reconcile that cannot tell — it
    raised, or needs the call's arguments — leaves the effect to the call site. Returns the
    keys settled."""
    settled = []
    for key, info in list(j.state.effects.items()):
        if info.status != "intended":
            continue
        fn = reconcilers.get(info.operation) or registered_reconcile(info.operation)
        if fn is None:
            continue
        call = EffectCall(
            j.run_id, info.step_id, key, info.operation, info.attempt, (), {"idempotency_key": key}
        )
        try:
            verdict = fn(call)
        except Exception:
            continue  # the call site, which has the arguments, will ask again
        reason = f"reconciled at takeover by {j.lease.owner}"
        if isinstance(verdict, Applied):
            data = j.jsonable(info.step_id, verdict.result, "reconciled result")
            j.append(
                EffectReconciled(key=key, verdict=Verdict.APPLIED, result=data, reason=reason),
                StepCompleted(step_id=info.step_id, result=data, policy=Policy.EFFECT),
                by_code=False,
            )
        elif isinstance(verdict, Absent):
            j.append(
                EffectReconciled(key=key, verdict=Verdict.ABSENT, reason=reason), by_code=False
            )
        else:
            continue
        settled.append(key)
    return settled


def resolution_payloads(state: RunState, body: Mapping[str, Any]) -> list[Payload]:
    """The events of a person's resolution of an effect in doubt (``torpor resolve``; a
    ``resolve`` inbox message): the run reopened if it had ended unresolved, the verdict
    (``applied`` with its result, or ``absent``: performed again on resume), and for applied
    the effect step's completion."""
    out: list[Payload] = []
    if state.status is RunStatus.FINISHED:
        out.append(RunReopened(by=body["by"], reason=f"effect {body['key']} resolved"))
    verdict = Verdict(body["verdict"])
    out.append(
        EffectReconciled(
            key=body["key"],
            verdict=verdict,
            result=body.get("result"),
            reason=body.get("reason", ""),
            by=body["by"],
        )
    )
    if verdict is Verdict.APPLIED:
        info = state.effects.get(body["key"])
        if info is not None:
            out.append(
                StepCompleted(step_id=info.step_id, result=body.get("result"), policy=Policy.EFFECT)
            )
    return out
