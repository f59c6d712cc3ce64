"""OpenTelemetry traces and metrics of runs — off unless asked for, and free when off.

Turned on by the standard ``OTEL_*`` environment variables (an exporter or an OTLP endpoint:
``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER``, ``OTEL_EXPORTER_OTLP_ENDPOINT`` …; off
with ``OTEL_SDK_DISABLED=true``), or in code by :func:`configure` with the application's own
providers. The SDK is the optional extra ``torpor[otel]``; it is imported only when tracing is
on. When it is off, the engine's only cost is one ``is None`` test per recorded write (see
``bench/telemetry_cost.py``).

What is traced (one trace per run, across processes and resumes: the run's trace context is
stored on its row, set by whoever traces it first):

- ``run <workflow>`` — the run, from its start to its outcome (emitted when it finishes);
- ``attempt <epoch>`` — one execution under one lease (a worker's turn at the run);
- ``step <step id>`` — a step's attempt (policy, attempt number, result);
- ``effect <operation>`` — an effect from its intent through the call to its observation or
  reconcile verdict (a reconcile at takeover: ``reconcile <operation>``);
- ``wait <name>`` — a wait, from its start to its wake (child of the run: it spans processes);
- ``chat <model>`` — a model call, with the GenAI semantic conventions' attributes
  (``gen_ai.system``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` …).

Metrics (meter ``torpor``): ``torpor.steps`` and ``torpor.step.duration``, ``torpor.effects``
and ``torpor.effect.duration``, ``torpor.wake.latency`` (a wake condition met to the wait
completed), ``torpor.runs.finished`` by outcome, and ``torpor.runs`` by status (observed from the
store of a worker).
"""

from __future__ import annotations

from .setup import (
    SHUTDOWN_DEADLINE_S,
    bounded_shutdown,
    configure,
    enabled_by_env,
    get,
    reset,
    trace_attempt,
    trace_id_of,
)

__all__ = [
    "SHUTDOWN_DEADLINE_S",
    "bounded_shutdown",
    "configure",
    "enabled_by_env",
    "get",
    "reset",
    "trace_attempt",
    "trace_id_of",
]
