"""OpenTelemetry (torpor.telemetry): one trace per run across executions and processes, spans
for attempts, steps, effects (intent → call → observation / reconcile), waits and model calls,
metrics; nothing at all when it is off.

In process: the SDK's in-memory span exporter and metric reader, on both backends. End to end:
real processes export over OTLP/HTTP to a receiver this test runs on loopback (decoded with
opentelemetry-proto), one of them killed by SIGKILL between an effect's intent and its call.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import torpor
import torpor.worker
from conftest import HANG_S, run_python
from runtime_kit import Lab
from torpor import telemetry
from torpor.agents.models import Message, ScriptedModel, TokenUsage, call_model
from torpor.telemetry.tracer import RunContext

SENT: list[str] = []


def _send(what: str, idempotency_key: str) -> dict[str, str]:
    SENT.append(idempotency_key)
    return {"sent": what}


def _find(call: torpor.EffectCall) -> Any:
    return torpor.Applied({"sent": "x"}) if call.idempotency_key in SENT else torpor.Absent()


@torpor.workflow(name="tel.flow", version="1")
def flow(run: torpor.Run, n: int) -> str:
    total = run.step("add", lambda: n + 1)
    run.effect("notify", _send, f"total {total}", reconcile=_find, operation="mail.send")
    answer = run.wait_for("go")
    run.step("after", lambda: answer)
    return f"{total}:{answer}"


@torpor.workflow(name="tel.model", version="1")
def with_model(run: torpor.Run, _: Any) -> str:
    model = ScriptedModel(
        ["hello"], model_id="claude-sonnet-4-5", usage=TokenUsage(input_tokens=42, output_tokens=7)
    )
    resp = call_model(run, model, [Message.user("hi")])
    return str(resp.message.content)


@torpor.workflow(name="tel.fails", version="1")
def fails(run: torpor.Run, _: Any) -> None:
    run.step("boom", lambda: 1 / 0)


class Traced:
    """The SDK's in-memory exporter and metric reader, configured as torpor's providers."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meters = MeterProvider(metric_readers=[self.reader])
        telemetry.configure(self.provider, self.meters)

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith(prefix)]

    def metrics(self) -> dict[str, list[Any]]:
        data = self.reader.get_metrics_data()
        out: dict[str, list[Any]] = {}
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    out.setdefault(m.name, []).extend(m.data.data_points)
        return out


@pytest.fixture
def traced() -> Iterator[Traced]:
    SENT.clear()
    t = Traced()
    yield t
    telemetry.reset()
    t.provider.shutdown()
    t.meters.shutdown()


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def test_one_trace_per_run_across_executions(traced: Traced, store_url: str) -> None:
    with torpor.Runtime(store_url) as rt:
        res = rt.run("tel.flow", 1, run_id="r1")
        assert res.status == "waiting"
        ctx = RunContext.decode(rt.store.trace_context("r1") or "")
        assert ctx is not None, "the run's trace context is stored with the run"
    # Another runtime (as another process would) continues the same trace.
    with torpor.Runtime(store_url) as rt2:
        torpor.Client(rt2.store).signal("r1", "go", "yes")
        res = rt2.resume("r1")
        assert res.outcome == "succeeded", res
        assert rt2.store.trace_context("r1") == ctx.encode()  # never replaced

    spans = traced.spans()
    assert {s.context.trace_id for s in spans} == {ctx.trace_id}
    (run_span,) = traced.named("run ")
    assert run_span.name == "run tel.flow"
    assert run_span.context.span_id == ctx.span_id and run_span.parent is None
    assert run_span.attributes["torpor.run.outcome"] == "succeeded"
    attempts = traced.named("attempt ")
    assert len(attempts) == 2
    assert all(_parent(a) == ctx.span_id for a in attempts)
    assert [a.attributes["torpor.run.status"] for a in attempts] == ["waiting", "finished"]
    first, second = attempts
    by_name = {s.name: s for s in spans}
    assert _parent(by_name["step add"]) == first.context.span_id
    assert by_name["step add"].attributes["torpor.step.policy"] == "read"
    assert _parent(by_name["step after"]) == second.context.span_id
    # The effect: a child of its step, from the intent to the observation.
    effect = by_name["effect mail.send"]
    assert _parent(effect) == by_name["step notify"].context.span_id
    assert [e.name for e in effect.events] == ["intended", "observed"]
    assert effect.attributes["torpor.effect.outcome"] == "observed"
    assert effect.attributes["torpor.effect.key"] == "r1/notify"
    # The wait spans both executions: a child of the run, from its start to its wake.
    wait = by_name["wait go"]
    assert _parent(wait) == ctx.span_id
    assert wait.attributes["torpor.wait.via"] == "signal"
    assert wait.start_time is not None and wait.end_time is not None
    assert wait.start_time <= second.start_time + 5_000_000 and wait.end_time >= wait.start_time
    assert run_span.start_time <= first.start_time + 5_000_000

    m = traced.metrics()
    steps = {tuple(sorted(p.attributes.items())): p.value for p in m["torpor.steps"]}
    read = (("torpor.step.policy", "read"), ("torpor.step.status", "completed"))
    effect_step = (("torpor.step.policy", "effect"), ("torpor.step.status", "completed"))
    # add, the wait's own step (go), after; and the effect's step.
    assert (steps.get(read), steps.get(effect_step)) == (3, 1), steps
    assert [p.value for p in m["torpor.effects"]] == [1]
    assert sum(p.count for p in m["torpor.step.duration"]) == 4
    assert [p.count for p in m["torpor.wake.latency"]] == [1]
    (finished,) = m["torpor.runs.finished"]
    assert finished.value == 1 and finished.attributes["torpor.run.outcome"] == "succeeded"


def test_a_run_started_inside_a_caller_span_joins_its_trace(traced: Traced, db_url: str) -> None:
    tracer = traced.provider.get_tracer("app")
    with tracer.start_as_current_span("handle request") as caller, torpor.Runtime(db_url) as rt:
        rid = rt.start("tel.model", None, run_id="m1")
        res = rt.resume(rid)
        assert res.outcome == "succeeded", res
    caller_ctx = caller.get_span_context()
    (run_span,) = traced.named("run ")
    assert run_span.context.trace_id == caller_ctx.trace_id
    assert _parent(run_span) == caller_ctx.span_id
    # The model call: GenAI semantic conventions, under its step.
    (chat,) = traced.named("chat ")
    assert chat.name == "chat claude-sonnet-4-5"
    a = chat.attributes
    assert a["gen_ai.system"] == "anthropic" and a["gen_ai.request.model"] == "claude-sonnet-4-5"
    assert a["gen_ai.operation.name"] == "chat"
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (42, 7)
    (step,) = traced.named("step model")
    assert _parent(chat) == step.context.span_id


def test_a_failed_run_and_step_are_errors(traced: Traced, store_url: str) -> None:
    with torpor.Runtime(store_url) as rt:
        res = rt.run("tel.fails", None, run_id="f1")
    assert res.outcome == "failed"
    (run_span,) = traced.named("run ")
    assert run_span.status.status_code is trace.StatusCode.ERROR
    assert run_span.attributes["torpor.run.outcome"] == "failed"


@pytest.mark.proc
def test_off_without_otel_variables(db_url: str, tmp_path: Path) -> None:
    """No OTEL_* exporter: no telemetry, no OpenTelemetry import, no trace context stored."""
    code = (
        "import sys, torpor\n"
        "from torpor import telemetry\n"
        "@torpor.workflow(name='w', version='1')\n"
        "def w(run, _):\n"
        "    return run.step('s', lambda: 1)\n"
        f"rt = torpor.Runtime({db_url!r})\n"
        "assert rt.run('w', None, run_id='o1').outcome == 'succeeded'\n"
        "assert telemetry.get() is None\n"
        "assert rt.store.trace_context('o1') is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {"OTEL_TRACES_EXPORTER": "", "OTEL_EXPORTER_OTLP_ENDPOINT": ""}
    cp = run_python(code, cwd=tmp_path, env=env)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip() == "[]"


def test_enabled_by_env_follows_the_sdk_spec() -> None:
    on = telemetry.enabled_by_env
    assert not on({})
    assert not on({"OTEL_TRACES_EXPORTER": "none"})
    assert on({"OTEL_TRACES_EXPORTER": "console"})
    assert on({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert not on({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "TRUE"})


# ---------------------------------------------------------------------- end to end over OTLP/HTTP


class Receiver:
    """An OTLP/HTTP receiver on loopback: collects decoded ExportTraceServiceRequest spans."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        self.spans: list[Any] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.paths.append(self.path)
                if self.path == "/v1/traces":
                    req = ExportTraceServiceRequest()
                    req.ParseFromString(body)
                    for rs in req.resource_spans:
                        for ss in rs.scope_spans:
                            receiver.spans.extend(ss.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


E2E = """
@torpor.workflow(name="e2e.flow", version="1")
def flow(run, _):
    run.step("a", work, "a", 1)
    run.effect("send", send, "hello", reconcile=find_sent, operation="mail.send")
    return "done"
"""


@pytest.mark.slow
def test_otlp_http_end_to_end_across_a_sigkill(tmp_path: Path, db_url: str) -> None:
    """Process A is killed between the effect's intent and its call (its batched spans die with
    it); process B reconciles, finishes, and exports over OTLP/HTTP: its spans continue the one
    trace stored with the run, and the run span carries the stored span id."""
    rx = Receiver()
    try:
        lab = Lab(tmp_path, db_url, tmp_path / "ledger.jsonl")
        lab.module("e2ewf", E2E)
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_SERVICE_NAME": "torpor-e2e",
        }
        a = lab.drive("e2ewf", "e1", workflow="e2e.flow", crash_at="effect.intended", env=env)
        assert a.killed, a.describe()
        b = lab.drive("e2ewf", "e1", resume=True, env=env)
        assert b.result is not None and b.result["outcome"] == "succeeded", b.describe()
        with torpor.Runtime(db_url) as rt:
            ctx = RunContext.decode(rt.store.trace_context("e1") or "")
        assert ctx is not None
        assert "/v1/traces" in rx.paths
        spans = {s.name: s for s in rx.spans}
        assert {int.from_bytes(s.trace_id, "big") for s in rx.spans} == {ctx.trace_id}
        run_span = spans["run e2e.flow"]
        assert int.from_bytes(run_span.span_id, "big") == ctx.span_id
        attempt = spans["attempt 2"]
        assert int.from_bytes(attempt.parent_span_id, "big") == ctx.span_id
        # B's reconcile of A's intent (the effect was never performed: absent, then the call).
        names = sorted(spans)
        assert "reconcile mail.send" in names and "effect mail.send" in names, names
        attrs = {kv.key: kv.value.string_value for kv in spans["reconcile mail.send"].attributes}
        assert attrs["torpor.effect.outcome"] == "absent"
        assert len(lab.ledger("effect")) == 1
        # `torpor show` names the trace to look for in the tracing backend.
        cp = subprocess.run(
            [sys.executable, "-m", "torpor.cli", "--db", db_url, "show", "e1"],
            capture_output=True,
            text=True,
            timeout=HANG_S,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert cp.returncode == 0, cp.stderr
        assert f"{ctx.trace_id:032x}" in cp.stdout, cp.stdout
    finally:
        rx.close()


def test_a_worker_reports_runs_by_status(traced: Traced, store_url: str) -> None:
    with torpor.Runtime(store_url) as rt:
        rt.run("tel.flow", 1, run_id="w1")  # waits for its signal
        rt.run("tel.fails", None, run_id="w2")
        torpor.worker.Worker(rt)  # a worker watches its store: torpor.runs at each collection
        points = traced.metrics()["torpor.runs"]
    by = {(p.attributes["torpor.run.status"], p.attributes.get("torpor.run.outcome")): p.value
          for p in points}  # fmt: skip
    assert by == {("waiting", None): 1, ("finished", "failed"): 1}


def test_a_broken_exporter_never_fails_a_run(db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Tracing is an observer: a span processor that raises leaves the run's record and outcome
    as they would be untraced, and says so once on the torpor.telemetry logger."""

    class Broken(SimpleSpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            raise RuntimeError("exporter down")

    provider = TracerProvider()
    provider.add_span_processor(Broken(InMemorySpanExporter()))
    telemetry.configure(provider)
    try:
        with torpor.Runtime(db_url) as rt:
            res = rt.run("tel.flow", 1, run_id="b1")
            torpor.Client(rt.store).signal("b1", "go", "yes")
            res = rt.resume("b1")
    finally:
        telemetry.reset()
    assert res.outcome == "succeeded", res
    assert "could not trace events" in caplog.text


def test_the_trace_context_is_set_once(store_url: str) -> None:
    """The store keeps the first trace context written for a run (concurrent first executions
    in two processes end up in one trace); nothing for an unknown run."""
    with torpor.Runtime(store_url) as rt:
        rt.start("tel.fails", None, run_id="c1")
        assert rt.store.trace_context("c1") is None  # tracing off: nothing stored
        first = RunContext(0xABC, 0x123).encode()
        assert rt.store.trace_context("c1", first) == first
        assert rt.store.trace_context("c1", RunContext(0xDEF, 0x456).encode()) == first
        assert rt.store.trace_context("nope", first) is None
    assert RunContext.decode(first) == RunContext(0xABC, 0x123)
    assert RunContext.decode(RunContext(1, 2, 3).encode()) == RunContext(1, 2, 3)
    assert telemetry.trace_id_of(first) == f"{0xABC:032x}"
    assert RunContext.decode("garbage") is None and telemetry.trace_id_of("garbage") is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER='zipkin' is not supported"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "only"),
    ],
)
def test_a_misconfigured_exporter_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    telemetry.reset()
    try:
        with pytest.raises(torpor.errors.ConfigError, match=message):
            telemetry.get()
    finally:
        telemetry.reset()
