"""The OpenTelemetry SDK's complaints, one line each (issue 36 item 7).

With the collector down, the OTLP exporters and the SDK's batch processors log each failed
export with a traceback (``Exception while exporting Span.`` and a dozen lines of
``requests``/``urllib3`` frames) and each retry with the full connection error. A person
watching a worker sees pages of it. :func:`one_line` puts a filter on those loggers that
keeps each record as one line — its message and the error's type and first line — and drops
the traceback; nothing is lost that the line does not say (the collector's address and what
failed), and the records still go wherever the application's logging sends them.
"""

from __future__ import annotations

import logging

#: The SDK's and the OTLP exporters' loggers that report failed exports.
LOGGERS = (
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.sdk.trace.export",
    "opentelemetry.sdk.metrics._internal.export",
    "opentelemetry.exporter.otlp.proto.http._common",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
)

#: Longest line kept of a record (the rest is cut with an ellipsis).
MAX_CHARS = 400


class OneLine(logging.Filter):
    """Rewrites a record as one line: its message, then ``: Type: first line`` of its error."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # (a record whose arguments do not format: leave it as it is)
            return True
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            first = (str(exc).strip().splitlines() or [""])[0]
            text += f": {type(exc).__name__}: {first}" if first else f": {type(exc).__name__}"
        line = " ".join(part.strip() for part in text.splitlines() if part.strip())
        if len(line) > MAX_CHARS:
            line = line[: MAX_CHARS - 1] + "…"
        record.msg, record.args = line, None
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


_FILTER = OneLine()


def one_line() -> None:
    """Make the SDK's and exporters' failure records one line each (idempotent)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


__all__ = ["LOGGERS", "OneLine", "one_line"]
