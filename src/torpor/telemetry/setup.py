"""Whether telemetry is on, and the providers it exports through.

Nothing here imports OpenTelemetry until tracing is on: :func:`get` answers ``None`` (off) from
the environment alone, once per process.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .envcheck import check_env

if TYPE_CHECKING:
    from ..history import RunState
    from ..store.base import Lease, Store
    from .attempt import AttemptTrace
    from .tracer import Telemetry

#: Environment variables that ask for an exporter (any one set, and not ``none``, turns
#: telemetry on).
EXPORTER_VARS = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)

#: The longest a process waits at exit for its last spans and metrics to be exported (seconds):
#: an unreachable collector delays a command or a stopping worker by at most this much.
SHUTDOWN_DEADLINE_S = 1.5

log = logging.getLogger("torpor.telemetry")

_lock = threading.Lock()
_resolved = False
_current: Telemetry | None = None


def enabled_by_env(env: Mapping[str, str] | None = None) -> bool:
    """Whether the ``OTEL_*`` variables in ``env`` (default: the process's) ask for telemetry:
    an exporter other than ``none`` or an OTLP endpoint is set, and ``OTEL_SDK_DISABLED`` is
    not ``true`` (the OpenTelemetry SDK configuration spec)."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(k, "").strip().lower() not in ("", "none") for k in EXPORTER_VARS)


def get() -> Telemetry | None:
    """This process's telemetry, or None when it is off (resolved from the environment on the
    first call). ConfigError (one line naming the variable) when an exporter is unknown or an
    ``OTEL_*`` value is one the SDK rejects (:mod:`torpor.telemetry.envcheck`): a bad value
    stops the command before it creates anything, it never silently turns tracing off. Call it
    before creating what should not outlive that error (:meth:`Runtime.start
    <torpor.Runtime.start>` does). When the ``otel`` extra is not installed, ``OTEL_*``
    variables (often set for other programs in the same shell) leave telemetry off, with one
    warning line on stderr and on the ``torpor.telemetry`` logger (:data:`MISSING_SDK`)."""
    global _resolved, _current
    if _resolved:
        return _current
    with _lock:
        if not _resolved:
            _current = _checked_from_env() if enabled_by_env() else None
            _resolved = True
    return _current


def configure(tracer_provider: Any = None, meter_provider: Any = None) -> Telemetry:
    """Trace runs through the application's own OpenTelemetry SDK providers (a
    ``TracerProvider`` and, optionally, a ``MeterProvider``) instead of the environment's, for
    every runtime and worker of this process from now on. Returns the telemetry in use."""
    global _resolved, _current
    from .tracer import Telemetry

    if tracer_provider is None:
        from opentelemetry.sdk.trace import TracerProvider

        tracer_provider = TracerProvider()
    with _lock:
        _current = Telemetry(tracer_provider, meter_provider)
        _resolved = True
    return _current


def trace_attempt(
    tel: Telemetry, store: Store, lease: Lease, state: RunState
) -> AttemptTrace | None:
    """The trace of one execution of a run under ``lease`` (see
    :class:`~torpor.telemetry.attempt.AttemptTrace`), in the run's stored trace; None (logged
    on ``torpor.telemetry``) when it cannot be made: tracing never stops a run."""
    from .attempt import AttemptTrace

    try:
        return AttemptTrace(tel, tel.run_context(store, state.run_id), store, lease, state)
    except Exception:
        log.exception("torpor telemetry: run %s: not traced", state.run_id)
        return None


def trace_id_of(trace_context: str | None) -> str | None:
    """The trace id (32 hex digits) in a run's stored trace context, or None (none stored, or
    not one this version reads)."""
    if not trace_context:
        return None
    parts = trace_context.split(";", 1)[0].split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


def reset() -> None:
    """Forget the configured telemetry (tests): the next :func:`get` reads the environment
    again. Providers are not shut down (their owner does that)."""
    global _resolved, _current
    with _lock:
        _resolved = False
        _current = None


#: The one line said when ``OTEL_*`` variables ask for telemetry without the SDK installed.
MISSING_SDK = (
    "warning: OTEL_* variables ask for telemetry but the OpenTelemetry SDK is not installed; "
    "tracing is off (install torpor[otel], or unset them, or set OTEL_SDK_DISABLED=true)"
)


def _sdk_installed() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("opentelemetry.sdk") is not None
    except (ImportError, ValueError):
        return False


def _checked_from_env() -> Telemetry | None:
    """:func:`_from_env` after :func:`~torpor.telemetry.envcheck.check_env`; whatever else
    the SDK refuses as a value (``ValueError``, ``TypeError``) is a ConfigError too. None,
    with one warning line, when the SDK is not installed."""
    if not _sdk_installed():
        sys.stderr.write(MISSING_SDK + "\n")
        log.warning(MISSING_SDK)
        return None
    check_env(os.environ)
    try:
        return _from_env()
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"the OTEL_* variables are not valid for OpenTelemetry: {exc}; fix them, or unset "
            "them (or set OTEL_SDK_DISABLED=true)"
        ) from None


def _from_env() -> Telemetry:
    """Providers built from the ``OTEL_*`` variables, exporting in batches, shut down at exit
    within :data:`SHUTDOWN_DEADLINE_S` (:func:`bounded_shutdown`)."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        raise ConfigError(
            "OTEL_* variables ask for telemetry but the OpenTelemetry SDK is not installed: "
            "install torpor[otel], or unset them (or set OTEL_SDK_DISABLED=true)"
        ) from None
    from .tracer import Telemetry

    attrs = {}
    if not os.environ.get("OTEL_SERVICE_NAME") and "service.name" not in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        attrs["service.name"] = "torpor"
    resource = Resource.create(attrs)
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    from .quiet import one_line

    one_line()  # a collector that is down: one line per failed export, no tracebacks
    for exporter in _span_exporters():
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    readers = _metric_readers()
    meter_provider = None
    if readers:
        from opentelemetry.sdk.metrics import MeterProvider

        meter_provider = MeterProvider(
            resource=resource, metric_readers=readers, shutdown_on_exit=False
        )
    atexit.register(bounded_shutdown, tracer_provider, meter_provider)
    return Telemetry(tracer_provider, meter_provider)


def bounded_shutdown(
    tracer_provider: Any, meter_provider: Any, deadline_s: float | None = None
) -> bool:
    """Shut the providers down (their last spans and metrics exported), waiting at most
    ``deadline_s`` seconds (default :data:`SHUTDOWN_DEADLINE_S`): an unreachable collector,
    whose exporter retries for up to its timeout, never holds a command or a stopping worker
    longer than that. What is not exported by then is dropped (logged on ``torpor.telemetry``).
    True when the shutdown finished in time. Registered at exit for the environment's
    providers."""
    deadline_s = SHUTDOWN_DEADLINE_S if deadline_s is None else deadline_s

    def shut() -> None:
        for provider in (tracer_provider, meter_provider):
            if provider is not None:
                with contextlib.suppress(Exception):
                    provider.shutdown()

    t = threading.Thread(target=shut, name="torpor-telemetry-shutdown", daemon=True)
    t.start()
    t.join(deadline_s)
    if t.is_alive():
        log.warning(
            "torpor telemetry: export not finished within %.1fs at exit (collector "
            "unreachable?); the rest is dropped",
            deadline_s,
        )
        return False
    return True


def _names(var: str) -> list[str]:
    """The exporters a variable names. Unset: ``otlp`` when an OTLP endpoint is set (the spec's
    default), else none — ``OTEL_TRACES_EXPORTER=console`` alone does not also send metrics to
    a collector that was never named."""
    endpoint = any(os.environ.get(k) for k in EXPORTER_VARS[2:])
    raw = os.environ.get(var, "").strip().lower() or ("otlp" if endpoint else "none")
    return [n.strip() for n in raw.split(",") if n.strip() and n.strip() != "none"]


def _check_protocol(var: str) -> None:
    proto = os.environ.get(var) or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    if proto.strip() != "http/protobuf":
        raise ConfigError(
            f"{var or 'OTEL_EXPORTER_OTLP_PROTOCOL'}={proto!r}: torpor exports OTLP over "
            "http/protobuf only (the otel extra); set it to http/protobuf"
        )


def _span_exporters() -> list[Any]:
    out: list[Any] = []
    for name in _names("OTEL_TRACES_EXPORTER"):
        if name == "otlp":
            _check_protocol("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            out.append(OTLPSpanExporter())
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            out.append(ConsoleSpanExporter(out=sys.stderr))
        else:
            raise ConfigError(
                f"OTEL_TRACES_EXPORTER={name!r} is not supported: use otlp, console or none"
            )
    return out


def _metric_readers() -> list[Any]:
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    out: list[Any] = []
    for name in _names("OTEL_METRICS_EXPORTER"):
        if name == "otlp":
            _check_protocol("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )

            out.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        elif name == "console":
            from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

            out.append(PeriodicExportingMetricReader(ConsoleMetricExporter(out=sys.stderr)))
        else:
            raise ConfigError(
                f"OTEL_METRICS_EXPORTER={name!r} is not supported: use otlp, console or none"
            )
    return out
