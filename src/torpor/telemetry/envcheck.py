"""The numeric ``OTEL_*`` variables, checked before any provider is built.

The OpenTelemetry SDK raises a bare ``ValueError`` for some bad values (at import, for the span
limits) and silently falls back for others; torpor checks the ones it builds providers from
first, so a bad value is one :class:`~torpor.errors.ConfigError` naming the variable, raised
before a run, a store or a provider is created. Only checked when telemetry is on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NoReturn

from ..errors import ConfigError

#: Variables that must be an integer > 0 (the SDK's batch span processor and metric reader;
#: milliseconds for the delays, intervals and timeouts).
POSITIVE_INTS = (
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_EXPORT_TIMEOUT",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_METRIC_EXPORT_TIMEOUT",
)

#: Variables that must be an integer >= 0 (the span limits of the SDK configuration spec).
NON_NEGATIVE_INTS = (
    "OTEL_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_SPAN_EVENT_COUNT_LIMIT",
    "OTEL_SPAN_LINK_COUNT_LIMIT",
    "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT",
)

#: Variables that must be a number > 0 (the OTLP exporter's request timeout, in seconds in the
#: Python SDK).
POSITIVE_NUMBERS = (
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
)


def check_env(env: Mapping[str, str]) -> None:
    """ConfigError (one line naming the variable and its value) for the first numeric
    ``OTEL_*`` variable in ``env`` that is set (non-blank) and not a value the SDK accepts:
    :data:`POSITIVE_INTS`, :data:`NON_NEGATIVE_INTS`, :data:`POSITIVE_NUMBERS`; also a batch
    size larger than the queue size."""
    for var in POSITIVE_INTS:
        _int(env, var, 1)
    for var in NON_NEGATIVE_INTS:
        _int(env, var, 0)
    for var in POSITIVE_NUMBERS:
        raw = env.get(var, "").strip()
        if not raw:
            continue
        try:
            ok = float(raw) > 0 and float(raw) != float("inf")
        except ValueError:
            ok = False
        if not ok:
            _bad(var, raw, "a number of seconds > 0")
    queue = _int(env, "OTEL_BSP_MAX_QUEUE_SIZE", 1) or 2048  # the SDK's defaults
    batch = _int(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 1) or 512
    if batch > queue:
        raise ConfigError(
            f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE={batch} is larger than OTEL_BSP_MAX_QUEUE_SIZE="
            f"{queue}: set it to at most the queue size (OpenTelemetry SDK rule); or unset the "
            "OTEL_* variables (or set OTEL_SDK_DISABLED=true)"
        )


def _int(env: Mapping[str, str], var: str, least: int) -> int | None:
    raw = env.get(var, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < least:
        _bad(var, raw, "an integer > 0" if least else "an integer >= 0")
    return value


def _bad(var: str, raw: str, wanted: str) -> NoReturn:
    shown = raw if len(raw) <= 40 else raw[:37] + "..."
    raise ConfigError(
        f"{var}={shown!r} is not valid: telemetry needs {wanted} (OpenTelemetry SDK "
        "configuration); fix it, or unset the OTEL_* variables (or set OTEL_SDK_DISABLED=true)"
    )
