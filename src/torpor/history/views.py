"""Views derived from a run's history or state, for people and tools (``show``, the console):
the checkpoint's four answers, and every step and effect with its latest status.

Pure: functions of a :class:`~torpor.history.state.RunState` or of an iterable of
:class:`~torpor.history.events.Event`; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .events import (
    EffectFailed,
    EffectIntended,
    EffectObserved,
    EffectReconciled,
    Event,
    MessageRefused,
    RunStatus,
    SignalReceived,
    StepCompleted,
    StepFailed,
    StepStarted,
    WaitCompleted,
)
from .state import RunState
from .steer_events import SteerReceived, SteerTaken


def utc_text(ms: int) -> str:
    """Epoch milliseconds as an ISO 8601 UTC time (``2026-11-30T14:05:00.000Z``)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def checkpoint_answers(s: RunState) -> dict[str, Any]:
    """The four questions a checkpoint answers (DESIGN.md §1), derived from the state.

    Returns a dict with keys ``establishing``, ``evidence``, ``effects`` (the effects that may
    have occurred without a record of their outcome, key -> ``intended``/``unknown``),
    ``effects_performed`` (how many did occur, as recorded) and ``next``.
    """
    establishing = f"{s.last_step}: {s.last_purpose}" if s.last_purpose else (s.last_step or s.goal)
    evidence = {
        "verifications": {k: {"passed": v.passed} for k, v in s.verifications.items()},
        "artifacts": {k: f"sha256:{v.sha256} v{v.version}" for k, v in s.artifacts.items()},
    }
    effects = {k: v.status for k, v in s.effects.items() if v.status in ("intended", "unknown")}
    if s.status is RunStatus.FINISHED:
        nxt = f"finished: {s.outcome}" + (f" ({s.outcome_reason})" if s.outcome_reason else "")
    elif s.wait is not None:
        nxt = (
            f"waiting for {s.wait.reason} ({', '.join(s.wait.children[:5])}"
            + (" …)" if len(s.wait.children) > 5 else ")")
            if s.wait.kind == "children"
            else f"waiting for {s.wait.kind} {s.wait.name!r}"
        )
        if s.wait.deadline_ms is not None:
            nxt += f" (deadline {utc_text(s.wait.deadline_ms)})"
    elif s.effects_in_doubt():
        nxt = f"reconcile effects in doubt: {', '.join(s.effects_in_doubt())}"
    else:
        nxt = "runnable: the next step may start"
    return {
        "establishing": establishing,
        "evidence": evidence,
        "effects": effects,
        "effects_performed": s.effects_applied,
        "next": nxt,
    }


@dataclass(frozen=True)
class StepView:
    """A step as a person sees it: its latest status and how many attempts it took."""

    step_id: str
    policy: str
    status: str
    attempts: int
    purpose: str


@dataclass(frozen=True)
class EffectView:
    """An effect as a person sees it: its latest status, and why (a reconcile verdict's
    reason, with who settled it when a person did)."""

    key: str
    step_id: str
    operation: str
    status: str
    attempt: int
    reason: str


def step_views(events: Iterable[Event]) -> list[StepView]:
    """Every step of a history with its latest status and number of attempts, in first-seen
    order. A whole read/compute attempt (one ``step_completed`` with ``attempt`` >= 1) counts
    as an attempt that completed."""
    out: dict[str, dict[str, Any]] = {}
    for ev in events:
        p = ev.payload
        if isinstance(p, StepStarted) or (isinstance(p, StepCompleted) and p.attempt):
            policy = p.policy.value if p.policy else "?"
            d = out.setdefault(p.step_id, {"policy": policy, "attempts": 0, "purpose": p.purpose})
            d["attempts"] += 1
            d["status"] = "started" if isinstance(p, StepStarted) else "completed"
        elif isinstance(p, StepCompleted | StepFailed):
            d = out.setdefault(p.step_id, {"policy": "?", "attempts": 1, "purpose": ""})
            d["status"] = "completed" if isinstance(p, StepCompleted) else "failed"
    return [
        StepView(k, v["policy"], v["status"], v["attempts"], v["purpose"]) for k, v in out.items()
    ]


def effect_views(events: Iterable[Event]) -> list[EffectView]:
    """Every effect of a history with its latest status, in first-intended order."""
    out: dict[str, dict[str, Any]] = {}
    for ev in events:
        p = ev.payload
        if isinstance(p, EffectIntended):
            out[p.key] = {
                "step_id": p.step_id,
                "operation": p.operation,
                "status": "intended",
                "attempt": p.attempt,
                "reason": "",
            }
        elif isinstance(p, EffectObserved) and p.key in out:
            out[p.key]["status"] = "observed"
        elif isinstance(p, EffectReconciled) and p.key in out:
            out[p.key]["status"] = p.verdict.value
            out[p.key]["reason"] = p.reason + (f" (by {p.by})" if p.by != "engine" else "")
        elif isinstance(p, EffectFailed) and p.key in out:
            out[p.key]["status"] = "failed"
            out[p.key]["reason"] = p.error
    return [EffectView(k, **v) for k, v in out.items()]


@dataclass(frozen=True)
class MessageView:
    """A message the run received, with its disposition (G11) as a person sees it.

    ``status``: ``consumed`` (``wait_id`` took it; for a steering message, the agent's
    boundary that took it), ``buffered`` (kept until a wait of its
    name takes it), ``late`` (buffered, but it arrived after the deadline of wait ``wait_id``)
    or ``refused`` (``reason`` says why). ``arrived_at_ms``: when it arrived (epoch ms; None
    when recorded before arrival times were); ``seq``: the event that recorded the disposition
    (the wait's completion, the refusal) or its receipt while buffered.
    """

    message_id: str
    kind: str
    name: str | None
    status: str
    wait_id: str | None
    arrived_at_ms: int | None
    reason: str
    seq: int


def message_views(events: Iterable[Event], state: RunState) -> list[MessageView]:
    """Every signal the run received and every message it refused, with its disposition, in
    the order they were recorded. ``state`` is the run's current state (which signals are
    still buffered, and which of them arrived late)."""
    out: dict[str, dict[str, Any]] = {}
    for ev in events:
        p = ev.payload
        if isinstance(p, SignalReceived):
            out[p.signal_id] = {
                "kind": "signal",
                "name": p.name,
                "status": "buffered",
                "wait_id": p.wait_id,
                "arrived_at_ms": p.arrived_at_ms,
                "reason": "",
                "seq": ev.seq,
            }
        elif isinstance(p, SteerReceived):  # an operator's steering message (issue 39)
            out[p.message_id] = {
                "kind": "steer",
                "name": p.by or None,
                "status": "buffered",
                "wait_id": None,
                "arrived_at_ms": p.arrived_at_ms,
                "reason": "interrupts a reply in flight" if p.interrupt else "",
                "seq": ev.seq,
            }
        elif isinstance(p, SteerTaken):
            for mid in p.message_ids:
                if mid in out:
                    why = f"taken by the agent at {p.step_id}, before its next model call"
                    out[mid].update(status="consumed", wait_id=p.step_id, reason=why, seq=ev.seq)
        elif isinstance(p, WaitCompleted) and p.signal_id in out:
            out[p.signal_id].update(status="consumed", wait_id=p.wait_id, seq=ev.seq)
        elif isinstance(p, MessageRefused):
            prev = out.get(p.message_id, {})
            out[p.message_id] = {
                "kind": p.kind,
                "name": p.name,
                "status": "refused",
                "wait_id": p.wait_id or prev.get("wait_id"),
                "arrived_at_ms": p.arrived_at_ms or prev.get("arrived_at_ms"),
                "reason": p.reason,
                "seq": ev.seq,
            }
    for sigs in state.signals.values():
        for sig in sigs:
            d = out.get(sig.signal_id)
            if d is not None and sig.late_for is not None:
                d.update(
                    status="late",
                    wait_id=sig.late_for,
                    reason=f"arrived after the deadline of wait {sig.late_for}",
                )
    return [MessageView(k, **v) for k, v in out.items()]
