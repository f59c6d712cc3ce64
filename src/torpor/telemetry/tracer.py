"""The tracer and instruments of one process, and the run's trace context.

Imported only when telemetry is on (it imports OpenTelemetry). Spans are made from what the
engine records, with the times it recorded them, so a span that covers several processes (the
run, a wait) is emitted by whichever process sees it end; the run's own span has the span id
stored with the run (:class:`ForcedIds`), so every attempt in any process is its child.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

if TYPE_CHECKING:
    from ..store.base import Store


@dataclass(frozen=True)
class RunContext:
    """A run's trace context: its trace, its own span's id, and the caller's span it was
    started under (0: none). Stored as ``00-<trace>-<span>-01[;parent=<span>]``."""

    trace_id: int
    span_id: int
    parent_span_id: int = 0

    def encode(self) -> str:
        text = f"00-{self.trace_id:032x}-{self.span_id:016x}-01"
        return text + (f";parent={self.parent_span_id:016x}" if self.parent_span_id else "")

    @classmethod
    def decode(cls, text: str) -> RunContext | None:
        """The context stored as ``text``; None for one this version cannot read."""
        head, _, parent = text.partition(";parent=")
        parts = head.split("-")
        try:
            return cls(int(parts[1], 16), int(parts[2], 16), int(parent, 16) if parent else 0)
        except (IndexError, ValueError):
            return None

    def span_context(self) -> SpanContext:
        """The run span's context, as a remote parent of the spans under it."""
        return SpanContext(self.trace_id, self.span_id, True, TraceFlags(TraceFlags.SAMPLED))

    def parent_context(self) -> Any:
        """The OpenTelemetry context the run's own span is started in (its caller's span)."""
        if not self.parent_span_id:
            return trace.set_span_in_context(trace.INVALID_SPAN)
        sc = SpanContext(self.trace_id, self.parent_span_id, True, TraceFlags(TraceFlags.SAMPLED))
        return trace.set_span_in_context(NonRecordingSpan(sc))


class ForcedIds(IdGenerator):
    """The provider's id generator, except for the next ids forced by this thread (the run's
    span is emitted at its end with the ids stored when it started)."""

    def __init__(self, inner: IdGenerator):
        self.inner = inner
        self.local = threading.local()

    def generate_span_id(self) -> int:
        forced = getattr(self.local, "span_id", None)
        if forced is not None:
            self.local.span_id = None
            return int(forced)
        return self.inner.generate_span_id()

    def generate_trace_id(self) -> int:
        forced = getattr(self.local, "trace_id", None)
        if forced is not None:
            self.local.trace_id = None
            return int(forced)
        return self.inner.generate_trace_id()

    def force(self, trace_id: int, span_id: int) -> None:
        self.local.trace_id = trace_id
        self.local.span_id = span_id


def _torpor_version() -> str:
    try:
        return version("torpor")
    except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return "0"


class Telemetry:
    """The tracer and instruments runs are traced with (see :mod:`torpor.telemetry`)."""

    def __init__(self, tracer_provider: Any, meter_provider: Any = None):
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        inner = getattr(tracer_provider, "id_generator", None) or RandomIdGenerator()
        self.ids = inner if isinstance(inner, ForcedIds) else ForcedIds(inner)
        tracer_provider.id_generator = self.ids
        self.tracer = tracer_provider.get_tracer("torpor", _torpor_version())
        self.meter: Any = None
        if meter_provider is not None:
            m = meter_provider.get_meter("torpor", _torpor_version())
            self.meter = m
            self.steps = m.create_counter("torpor.steps", "{step}", "Step attempts ended")
            self.step_duration = m.create_histogram(
                "torpor.step.duration", "s", "Duration of a step's attempt"
            )
            self.effects = m.create_counter("torpor.effects", "{effect}", "Effects settled")
            self.effect_duration = m.create_histogram(
                "torpor.effect.duration", "s", "An effect's intent to its observation or verdict"
            )
            self.wake_latency = m.create_histogram(
                "torpor.wake.latency", "s", "A wait's wake condition met to the wait completed"
            )
            self.runs_finished = m.create_counter(
                "torpor.runs.finished", "{run}", "Runs that reached an outcome"
            )
        self._watched: list[Store] = []

    # ----------------------------------------------------------------- run context

    def new_context(self) -> RunContext:
        """A context for a run started now: inside the caller's current span when there is
        one (the run joins the caller's trace), else a trace of its own."""
        current = trace.get_current_span().get_span_context()
        span_id = int.from_bytes(secrets.token_bytes(8), "big") or 1
        if current.is_valid:
            return RunContext(current.trace_id, span_id, current.span_id)
        return RunContext(int.from_bytes(secrets.token_bytes(16), "big") or 1, span_id)

    def run_context(self, store: Store, run_id: str) -> RunContext:
        """The run's stored context, storing a new one first when it has none."""
        stored = store.trace_context(run_id)
        ctx = RunContext.decode(stored) if stored else None
        if ctx is None:
            text = store.trace_context(run_id, self.new_context().encode())
            ctx = RunContext.decode(text or "") or self.new_context()
        return ctx

    def started(self, store: Store, run_id: str) -> None:
        """A run was created here: store its context (joining the caller's current span)."""
        store.trace_context(run_id, self.new_context().encode())

    def watch(self, store: Store) -> None:
        """Report ``torpor.runs`` by status and outcome from ``store`` at each collection (a
        worker's store; the count is one grouped query)."""
        if self.meter is None or any(s is store for s in self._watched):
            return
        self._watched.append(store)
        if len(self._watched) > 1:
            return
        from opentelemetry.metrics import Observation

        def observe(_options: Any) -> list[Any]:
            out = []
            for s in list(self._watched):
                try:
                    counts = s.count_runs()
                except Exception:  # a closed or unreachable store reports nothing
                    continue
                for c in counts:
                    attrs = {"torpor.run.status": c.status}
                    if c.outcome:
                        attrs["torpor.run.outcome"] = c.outcome
                    out.append(Observation(c.count, attrs))
            return out

        self.meter.create_observable_gauge(
            "torpor.runs", [observe], "{run}", "Runs in the store by status and outcome"
        )
