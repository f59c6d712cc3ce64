"""Telemetry configuration faults: a bad ``OTEL_*`` value is one clear error raised before
anything is created (never a traceback, never a run row left behind), and an unreachable
collector delays a command's exit by at most the bounded shutdown deadline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import torpor
from conftest import HANG_S, ROOT
from torpor import telemetry
from torpor.errors import ConfigError, RunNotFoundError
from torpor.telemetry.setup import EXPORTER_VARS

BAD = [
    ({"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_MAX_QUEUE_SIZE": "-5"}, "OTEL_BSP_MAX_QUEUE"),
    ({"OTEL_METRICS_EXPORTER": "console", "OTEL_METRIC_EXPORT_INTERVAL": "0"}, "INTERVAL='0'"),
    ({"OTEL_METRICS_EXPORTER": "console", "OTEL_METRIC_EXPORT_INTERVAL": "-1"}, "INTERVAL"),
    ({"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "0"}, "BATCH_SIZE"),
    ({"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "9999"}, "at most"),
    ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "-3"}, "LIMIT='-3'"),
    ({"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "soon"}, "DELAY='soon'"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_TIMEOUT": "0"}, "TIMEOUT"),
]

FLOW = """
import torpor

@torpor.workflow(name="tc.flow", version="1")
def flow(run, _):
    return run.step("s", lambda: "ok")
"""


@pytest.mark.parametrize(("env", "message"), BAD)
def test_a_bad_otel_value_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    telemetry.reset()
    try:
        with pytest.raises(ConfigError, match=message):
            telemetry.get()
    finally:
        telemetry.reset()


def test_bad_values_are_ignored_while_telemetry_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "-5")
    for var in EXPORTER_VARS:
        monkeypatch.delenv(var, raising=False)
    telemetry.reset()
    try:
        assert telemetry.get() is None
    finally:
        telemetry.reset()


def _cli(tmp_path: Path, url: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "tcflows.py").write_text(FLOW)
    full = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    full["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT / "src")])
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "torpor.cli", "--db", url, *args, "--import", "tcflows"],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        cwd=tmp_path,
        env=full,
    )


@pytest.mark.proc
def test_start_and_worker_refuse_a_bad_value_before_creating_anything(
    tmp_path: Path, store_url: str
) -> None:
    env = {"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_MAX_QUEUE_SIZE": "-5"}
    for args in (("start", "tc.flow", "--run-id", "bad1"), ("worker", "--until-idle")):
        cp = _cli(tmp_path, store_url, env, *args)
        assert cp.returncode != 0
        lines = cp.stderr.strip().splitlines()
        assert len(lines) == 1 and "OTEL_BSP_MAX_QUEUE_SIZE='-5'" in lines[0], cp.stderr
    if store_url.startswith("sqlite"):
        assert not Path(store_url.removeprefix("sqlite:///")).exists()  # no store created
        return
    with torpor.Client(store_url) as client, pytest.raises(RunNotFoundError):
        client.get("bad1")


@pytest.mark.proc
def test_an_unreachable_collector_is_given_up_at_the_deadline(tmp_path: Path, db_url: str) -> None:
    """The exporter retries a refused connection for up to its timeout (10 s by default); the
    bounded shutdown gives up at its deadline, and a command ends with one warning."""
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint="http://127.0.0.1:1/v1/traces"))
    )
    with provider.get_tracer("t").start_as_current_span("s"):
        pass
    assert telemetry.bounded_shutdown(provider, None, deadline_s=0.3) is False
    healthy = TracerProvider(shutdown_on_exit=False)
    assert telemetry.bounded_shutdown(healthy, None, deadline_s=5) is True

    cp = _cli(
        tmp_path,
        db_url,
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
        "start",
        "tc.flow",
        "--run-id",
        "u1",
    )
    assert cp.returncode == 0, cp.stderr
    assert "succeeded" in cp.stdout
    assert "export not finished within" in cp.stderr, cp.stderr
