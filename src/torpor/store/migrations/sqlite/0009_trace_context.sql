-- torpor schema v9: the run's trace context (OpenTelemetry, torpor.telemetry). `trace_context`:
-- the W3C traceparent of the run's own span, followed by `;parent=<span id>` when the run was
-- started inside a caller's span. Set once, by whoever first traces the run (its start, or its
-- first traced execution); every later execution, in any process, continues that one trace.
ALTER TABLE runs ADD COLUMN trace_context TEXT;
