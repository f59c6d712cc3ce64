"""Reconcile (DESIGN.md §1, effect): asking the outside world what became of an effect whose
outcome is not recorded — ``applied`` (the result stands), ``absent`` (safe to perform again) or
``unknown`` (a person decides) — and recording the answer.

Here: the verdicts and what ``reconcile`` is asked about (:class:`EffectCall`), asking
(:func:`ask`), the reconciles known by operation (registered with :func:`torpor.effect`),
reconciling on replay (:func:`reconcile_on_replay`) and at takeover — a new lease owner
settles in-flight effects before the workflow runs again (:func:`reconcile_at_takeover`) — and
a person's resolution (:func:`resolution_payloads`). Reconcile on error and after a timeout is
part of performing (:mod:`torpor.engine.effects`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import EffectUnresolved
from ..history import (
    EffectReconciled,
    Payload,
    Policy,
    RunReopened,
    RunState,
    RunStatus,
    StepCompleted,
    Verdict,
)
from .journal import Journal


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


#: Operations whose reconcile is known without running the code: operation -> reconcile.
_REGISTRY: dict[str, Reconcile] = {}


def register(operation: str, reconcile: Reconcile) -> None:
    """Know ``reconcile`` for ``operation`` at takeover (see :func:`torpor.effect`)."""
    _REGISTRY[operation] = reconcile


def registered_reconcile(operation: str) -> Reconcile | None:
    """The reconcile registered for ``operation`` with :func:`torpor.effect`, or None."""
    return _REGISTRY.get(operation)


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


def reconcile_on_replay(
    j: Journal, sid: str, call: EffectCall, reconcile: Reconcile | None
) -> tuple[Any] | None:
    """An intent without an observation, met again when the code replays the call (a crash
    between the call and its record): reconcile it, never retry blindly. Applied: recorded
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


def reconcile_restored(
    j: Journal, sid: str, call: EffectCall, reconcile: Reconcile | None, intent: list[Payload]
) -> tuple[Any] | None:
    """A new effect of a run whose store a person accepted back from a restore (G16): the
    history this host had seen went further, so the call may have reached the outside world
    already. Ask first. Applied: recorded with its ``intent`` payloads as the step's result,
    ``(result,)`` returned. Unknown (or no reconcile to ask): recorded, the run unresolved.
    Absent: nothing recorded, None returned (the caller records the intent and calls)."""
    verdict = ask(call, reconcile)
    key = call.idempotency_key
    why = "the store was restored behind this host's mark; asked before calling"
    if isinstance(verdict, Applied):
        data = j.jsonable(sid, verdict.result, "reconciled result")
        j.append(
            *intent,
            EffectReconciled(key=key, verdict=Verdict.APPLIED, result=data, reason=why),
            StepCompleted(step_id=sid, result=data, policy=Policy.EFFECT),
        )
        return (data,)
    if isinstance(verdict, Unknown):
        reason = f"{verdict.reason} ({why})"
        j.append(*intent, EffectReconciled(key=key, verdict=Verdict.UNKNOWN, reason=reason))
        raise EffectUnresolved(key, reason)
    return None


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
