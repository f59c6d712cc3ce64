"""The trace of one execution (an attempt): spans and metrics made from the events the
engine's journal appends — the one recording seam — so nothing else in the engine is touched.

Times: what this process observed is timed with its wall clock in nanoseconds (a step's start
is the boundary before it, its end the append of its completion); a span that began in an
earlier execution (a wait, a decision step, the run itself) starts at the recorded time of its
start event (the store's clock) and ends at the recorded time of its end event.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, Span, SpanKind, Status, StatusCode

from .. import scrub
from ..history import (
    ApprovalDecided,
    ApprovalRequested,
    EffectFailed,
    EffectIntended,
    EffectObserved,
    EffectReconciled,
    Event,
    ModelCalled,
    RunFinished,
    RunState,
    SignalReceived,
    StepCompleted,
    StepFailed,
    StepStarted,
    WaitCompleted,
    WaitStarted,
)

if TYPE_CHECKING:
    from ..store.base import Lease, Store
    from .tracer import RunContext, Telemetry

log = logging.getLogger("torpor.telemetry")

#: Span status descriptions, reason attributes and exception events carry no secret this
#: process knows, in any encoding (G12); scrubbed before they are clipped.
TELEMETRY = scrub.sink(
    "telemetry", "span status, reason attributes and exception events: torpor.telemetry.attempt"
)


def _stacktrace(error: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


#: Outcomes whose run span is marked as an error (the others are honest stops).
ERROR_OUTCOMES = ("failed", "unresolved")

#: How far back (events) an attempt looks for the start of the wait it wakes from.
WAIT_LOOKBACK = 64


def _ms_ns(ms: int) -> int:
    return ms * 1_000_000


def gen_ai_system(model: str) -> str:
    """The GenAI semantic conventions' ``gen_ai.system`` for a recorded model id (the adapter
    is not recorded; its model names tell it)."""
    m = model.lower()
    if m.startswith(("claude", "anthropic")):
        return "anthropic"
    if m.startswith(("gpt", "o1", "o3", "o4", "openai", "chatgpt", "text-")):
        return "openai"
    return m.split("/", 1)[0].split(":", 1)[0] or "unknown"


class AttemptTrace:
    """Spans and metrics of one execution of one run under one lease. The journal calls
    :meth:`mark` at each boundary and :meth:`appended` after each append; the runtime calls
    :meth:`close` when the execution ends."""

    def __init__(
        self, tel: Telemetry, ctx: RunContext, store: Store, lease: Lease, state: RunState
    ):
        self.tel = tel
        self.ctx = ctx
        self.run_id = state.run_id
        self.state = state
        self.run_parent = trace.set_span_in_context(NonRecordingSpan(ctx.span_context()))
        self.common = {"torpor.run.id": state.run_id, "torpor.workflow": state.workflow}
        self.started_ns = time.time_ns()
        self.mark_ns = self.started_ns
        self.span = tel.tracer.start_span(
            f"attempt {lease.epoch}",
            context=self.run_parent,
            kind=SpanKind.INTERNAL,
            start_time=self.started_ns,
            attributes={
                **self.common,
                "torpor.lease.owner": lease.owner,
                "torpor.lease.epoch": lease.epoch,
                "torpor.attempt.took_over": lease.taken_from is not None,
            },
        )
        self.parent = trace.set_span_in_context(self.span)
        self.failed = False
        #: Open spans of this attempt: steps by step id, effects by key, waits by wait id.
        self.steps: dict[str, tuple[Span, int, str]] = {}
        self.effects: dict[str, tuple[Span, int]] = {}
        self.waits: dict[str, tuple[Span, int]] = {}
        #: When each signal and decision arrived (epoch ms): wake latency.
        self.arrived_ms: dict[str, int] = {}
        #: The wait the run is in, started by an earlier attempt (its span's attributes), and
        #: when it started (epoch ms).
        self.prior_wait: dict[str, Any] = {}
        #: Deadlines of the waits seen (epoch ms), by wait id: a timer's wake latency.
        self.deadlines: dict[str, int] = {}
        self.wait_started_ms: int | None = None
        if state.wait is not None:
            w = state.wait
            self.prior_wait = {"torpor.wait.kind": w.kind, "torpor.wait.name": w.name}
            if w.deadline_ms is not None:
                self.prior_wait["torpor.wait.deadline_ms"] = w.deadline_ms
                self.deadlines[w.wait_id] = w.deadline_ms
            self.wait_started_ms = _wait_start(store, state)

    # ------------------------------------------------------------------ journal hooks

    def mark(self) -> None:
        """A boundary: the next primitive starts now."""
        self.mark_ns = time.time_ns()

    def appended(self, events: list[Event], state: RunState) -> None:
        """Spans and metrics for ``events``, just appended (``state``: folded after them)."""
        self.state = state
        now = time.time_ns()
        try:
            for ev in events:
                handler = _HANDLERS.get(ev.payload.__class__)
                if handler is not None:
                    handler(self, ev, now)
        except Exception:  # telemetry never fails a run; said once per attempt
            if not self.failed:
                self.failed = True
                log.exception("torpor telemetry: run %s: could not trace events", self.run_id)

    def close(self, status: str | None, outcome: str | None, error: BaseException | None) -> None:
        """The execution ended (``status``/``outcome`` of the run after it, or ``error``).
        Spans still open end here, marked ``torpor.unfinished``; a wait still open is emitted
        by the attempt that sees it complete. Never raises."""
        try:
            self._close(status, outcome, error)
        except Exception:
            log.exception("torpor telemetry: run %s: could not end its attempt", self.run_id)

    def _close(self, status: str | None, outcome: str | None, error: BaseException | None) -> None:
        now = time.time_ns()
        for span in [*(e[0] for e in self.effects.values()), *(s[0] for s in self.steps.values())]:
            span.set_attribute("torpor.unfinished", True)
            span.end(end_time=now)
        self.effects.clear()
        self.steps.clear()
        if status is not None:
            self.span.set_attribute("torpor.run.status", status)
        if outcome is not None:
            self.span.set_attribute("torpor.run.outcome", outcome)
        if error is not None:
            message = TELEMETRY.text(f"{type(error).__name__}: {error}")
            self.span.record_exception(
                error,
                attributes={
                    "exception.message": TELEMETRY.text(str(error)),
                    "exception.stacktrace": TELEMETRY.text(_stacktrace(error)),
                },
            )
            self.span.set_status(Status(StatusCode.ERROR, message))
        self.span.end(end_time=now)

    # ------------------------------------------------------------------ steps

    def _step_start(self, sid: str, policy: str, attempt: int, start_ns: int) -> Span:
        span = self.tel.tracer.start_span(
            f"step {sid}",
            context=self.parent,
            start_time=start_ns,
            attributes={
                **self.common,
                "torpor.step.id": sid,
                "torpor.step.policy": policy,
                "torpor.step.attempt": attempt,
            },
        )
        self.steps[sid] = (span, start_ns, policy)
        return span

    def _step_end(self, sid: str, ev: Event, now: int, error: str | None) -> None:
        p = ev.payload
        opened = self.steps.pop(sid, None)
        if opened is None:
            info = self.state.steps.get(sid)
            policy = str(getattr(p, "policy", None) or (info.policy if info else ""))
            attempt = getattr(p, "attempt", 0) or (info.attempt if info else 1)
            if isinstance(p, StepCompleted) and p.attempt > 0:
                start = self.mark_ns  # a whole read/compute attempt: since its boundary
            elif info is not None and info.started_at_ms:
                start = _ms_ns(info.started_at_ms)  # started in an earlier attempt
            else:
                start = self.started_ns
            self._step_start(sid, policy, attempt, start)
            opened = self.steps.pop(sid)
        span, start, policy = opened
        status = "failed" if error is not None else "completed"
        span.set_attribute("torpor.step.status", status)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, TELEMETRY.text(error)[:500]))
        span.end(end_time=now)
        if self.tel.meter is not None:
            attrs = {"torpor.step.policy": policy, "torpor.step.status": status}
            self.tel.steps.add(1, attrs)
            self.tel.step_duration.record(max(0, now - start) / 1e9, attrs)

    def on_step_started(self, ev: Event, now: int) -> None:
        p: StepStarted = ev.payload  # type: ignore[assignment]
        self._step_start(p.step_id, str(p.policy), p.attempt, min(self.mark_ns, now))

    def on_step_completed(self, ev: Event, now: int) -> None:
        p: StepCompleted = ev.payload  # type: ignore[assignment]
        self._step_end(p.step_id, ev, now, None)

    def on_step_failed(self, ev: Event, now: int) -> None:
        p: StepFailed = ev.payload  # type: ignore[assignment]
        self._step_end(p.step_id, ev, now, p.error)

    # ------------------------------------------------------------------ effects

    def on_effect_intended(self, ev: Event, now: int) -> None:
        p: EffectIntended = ev.payload  # type: ignore[assignment]
        step = self.steps.get(p.step_id)
        ctx = trace.set_span_in_context(step[0]) if step else self.parent
        span = self.tel.tracer.start_span(
            f"effect {p.operation}",
            context=ctx,
            kind=SpanKind.CLIENT,
            start_time=now,
            attributes={
                **self.common,
                "torpor.step.id": p.step_id,
                "torpor.effect.key": p.key,
                "torpor.effect.operation": p.operation,
                "torpor.effect.attempt": p.attempt,
            },
        )
        span.add_event("intended", {"torpor.effect.key": p.key}, timestamp=now)
        self.effects[p.key] = (span, now)

    def _effect_end(self, key: str, now: int, outcome: str, reason: str = "") -> None:
        opened = self.effects.pop(key, None)
        if opened is None:
            # Reconciled at takeover: the intent was recorded by an execution that died.
            info = self.state.effects.get(key)
            op = info.operation if info else "?"
            step = self.steps.get(info.step_id) if info else None
            span = self.tel.tracer.start_span(
                f"reconcile {op}",
                context=trace.set_span_in_context(step[0]) if step else self.parent,
                start_time=self.mark_ns,
                attributes={
                    **self.common,
                    "torpor.effect.key": key,
                    "torpor.effect.operation": op,
                    "torpor.step.id": info.step_id if info else "",
                },
            )
            opened = (span, self.mark_ns)
        span, start = opened
        span.add_event(
            "observed" if outcome == "observed" else "reconciled",
            {"torpor.effect.outcome": outcome},
            timestamp=now,
        )
        span.set_attribute("torpor.effect.outcome", outcome)
        if outcome in ("unknown", "failed"):
            span.set_status(Status(StatusCode.ERROR, TELEMETRY.text(reason)[:500] or outcome))
        span.end(end_time=now)
        if self.tel.meter is not None:
            attrs = {"torpor.effect.outcome": outcome}
            self.tel.effects.add(1, attrs)
            self.tel.effect_duration.record(max(0, now - start) / 1e9, attrs)

    def on_effect_observed(self, ev: Event, now: int) -> None:
        p: EffectObserved = ev.payload  # type: ignore[assignment]
        self._effect_end(p.key, now, "observed")

    def on_effect_reconciled(self, ev: Event, now: int) -> None:
        p: EffectReconciled = ev.payload  # type: ignore[assignment]
        opened = self.effects.get(p.key)
        if opened is not None:
            opened[0].set_attribute("torpor.effect.reconciled_by", p.by)
        self._effect_end(p.key, now, str(p.verdict), p.reason)

    def on_effect_failed(self, ev: Event, now: int) -> None:
        p: EffectFailed = ev.payload  # type: ignore[assignment]
        self._effect_end(p.key, now, "failed", p.error)

    # ------------------------------------------------------------------ waits, messages

    def on_wait_started(self, ev: Event, now: int) -> None:
        p: WaitStarted = ev.payload  # type: ignore[assignment]
        attrs: dict[str, Any] = {
            **self.common,
            "torpor.wait.id": p.wait_id,
            "torpor.wait.kind": p.kind,
            "torpor.wait.name": p.name,
        }
        if p.deadline_ms is not None:
            attrs["torpor.wait.deadline_ms"] = p.deadline_ms
            self.deadlines[p.wait_id] = p.deadline_ms
        span = self.tel.tracer.start_span(
            f"wait {p.name}", context=self.run_parent, start_time=_ms_ns(ev.at_ms), attributes=attrs
        )
        self.waits[p.wait_id] = (span, ev.at_ms)

    def on_wait_completed(self, ev: Event, now: int) -> None:
        p: WaitCompleted = ev.payload  # type: ignore[assignment]
        opened = self.waits.pop(p.wait_id, None)
        if opened is None:
            start_ms = self.wait_started_ms if self.wait_started_ms is not None else ev.at_ms
            name = self.prior_wait.get("torpor.wait.name", p.wait_id)
            span = self.tel.tracer.start_span(
                f"wait {name}",
                context=self.run_parent,
                start_time=_ms_ns(start_ms),
                attributes={**self.common, **self.prior_wait, "torpor.wait.id": p.wait_id},
            )
            opened = (span, start_ms)
        span, start_ms = opened
        span.set_attribute("torpor.wait.via", p.via)
        span.end(end_time=_ms_ns(max(ev.at_ms, start_ms)))
        met_ms: int | None = None
        if p.via in ("timer", "deadline"):
            met_ms = self.deadlines.get(p.wait_id)
        elif p.signal_id is not None:
            met_ms = self.arrived_ms.get(p.signal_id)
        elif p.via == "decision":
            met_ms = self.arrived_ms.get(f"decision:{p.wait_id}")
        if met_ms is not None and self.tel.meter is not None:
            self.tel.wake_latency.record(
                max(0, ev.at_ms - int(met_ms)) / 1e3, {"torpor.wait.via": p.via}
            )

    def on_signal(self, ev: Event, now: int) -> None:
        p: SignalReceived = ev.payload  # type: ignore[assignment]
        self.arrived_ms[p.signal_id] = p.arrived_at_ms or ev.at_ms

    def on_approval_requested(self, ev: Event, now: int) -> None:
        p: ApprovalRequested = ev.payload  # type: ignore[assignment]
        self.span.add_event(
            "approval.requested",
            {"torpor.approval.id": p.approval_id, "torpor.approval.name": p.name},
            timestamp=now,
        )

    def on_approval_decided(self, ev: Event, now: int) -> None:
        p: ApprovalDecided = ev.payload  # type: ignore[assignment]
        arrived = p.arrived_at_ms or ev.at_ms
        for wait_id in (p.approval_id, *(w for w in [self._wait_of(p.approval_id)] if w)):
            self.arrived_ms[f"decision:{wait_id}"] = arrived
        self.span.add_event(
            "approval.decided",
            {
                "torpor.approval.id": p.approval_id,
                "torpor.approval.decision": p.decision,
                "torpor.approval.approver": p.approver,
            },
            timestamp=now,
        )

    def _wait_of(self, approval_id: str) -> str | None:
        w = self.state.wait
        return w.wait_id if w is not None and w.kind == "approval" else None

    # ------------------------------------------------------------------ model calls, outcome

    def on_model_called(self, ev: Event, now: int) -> None:
        p: ModelCalled = ev.payload  # type: ignore[assignment]
        step = self.steps.get(p.step_id)
        start = step[1] if step else self.mark_ns
        attrs: dict[str, Any] = {
            **self.common,
            "gen_ai.operation.name": "chat",
            "gen_ai.system": gen_ai_system(p.model),
            "gen_ai.provider.name": gen_ai_system(p.model),
            "gen_ai.request.model": p.model,
            "gen_ai.usage.input_tokens": p.input_tokens,
            "gen_ai.usage.output_tokens": p.output_tokens,
            "torpor.model.prompt_hash": p.prompt_hash,
        }
        if p.cost_usd is not None:
            attrs["torpor.model.cost_usd"] = p.cost_usd
        span = self.tel.tracer.start_span(
            f"chat {p.model}",
            context=trace.set_span_in_context(step[0]) if step else self.parent,
            kind=SpanKind.CLIENT,
            start_time=start,
            attributes=attrs,
        )
        span.end(end_time=now)

    def on_run_finished(self, ev: Event, now: int) -> None:
        p: RunFinished = ev.payload  # type: ignore[assignment]
        ctx = self.ctx
        self.tel.ids.force(ctx.trace_id, ctx.span_id)
        outcome = str(p.outcome)
        span = self.tel.tracer.start_span(
            f"run {self.state.workflow}",
            context=ctx.parent_context(),
            start_time=_ms_ns(self.state.started_at_ms or ev.at_ms),
            attributes={**self.common, "torpor.run.outcome": outcome},
        )
        if outcome in ERROR_OUTCOMES:
            span.set_status(Status(StatusCode.ERROR, TELEMETRY.text(p.reason)[:500] or outcome))
        elif p.reason:
            span.set_attribute("torpor.run.reason", TELEMETRY.text(p.reason)[:500])
        span.end(end_time=_ms_ns(max(ev.at_ms, self.state.started_at_ms)))
        if self.tel.meter is not None:
            self.tel.runs_finished.add(
                1, {"torpor.run.outcome": outcome, "torpor.workflow": self.state.workflow}
            )


def _wait_start(store: Store, state: RunState) -> int | None:
    """When the wait ``state`` is in started (epoch ms), from its last few events."""
    wait = state.wait
    assert wait is not None
    try:
        events = store.read_events(state.run_id, max(0, state.seq - WAIT_LOOKBACK))
    except Exception:
        return None
    for ev in reversed(events):
        p = ev.payload
        if isinstance(p, WaitStarted) and p.wait_id == wait.wait_id:
            return ev.at_ms
    return None


_HANDLERS: dict[type, Any] = {
    StepStarted: AttemptTrace.on_step_started,
    StepCompleted: AttemptTrace.on_step_completed,
    StepFailed: AttemptTrace.on_step_failed,
    EffectIntended: AttemptTrace.on_effect_intended,
    EffectObserved: AttemptTrace.on_effect_observed,
    EffectReconciled: AttemptTrace.on_effect_reconciled,
    EffectFailed: AttemptTrace.on_effect_failed,
    WaitStarted: AttemptTrace.on_wait_started,
    WaitCompleted: AttemptTrace.on_wait_completed,
    SignalReceived: AttemptTrace.on_signal,
    ApprovalRequested: AttemptTrace.on_approval_requested,
    ApprovalDecided: AttemptTrace.on_approval_decided,
    ModelCalled: AttemptTrace.on_model_called,
    RunFinished: AttemptTrace.on_run_finished,
}
