"""Shared plumbing for the benchmarks: databases, worker processes, tables and results.

PostgreSQL comes from ``TORPOR_BENCH_DATABASE_URL``, else ``TORPOR_TEST_DATABASE_URL``, else a
server started from the ``pgserver`` package; every benchmark works in a schema of its own and
drops it at the end. Results are printed as a Markdown table and written as JSON to
``bench/results/<name>.json`` together with the machine they were measured on.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def pg_server_url() -> str:
    url = os.environ.get("TORPOR_BENCH_DATABASE_URL") or os.environ.get("TORPOR_TEST_DATABASE_URL")
    if url:
        return url
    import pgserver

    srv = pgserver.get_server(tempfile.mkdtemp(prefix="torpor-bench-pg-"), cleanup_mode="stop")
    return str(srv.get_uri())


@contextmanager
def pg_schema() -> Iterator[str]:
    """A URL whose connections use a fresh schema (dropped afterwards)."""
    import psycopg

    base = pg_server_url()
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in base else "?"
    try:
        yield f"{base}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(base, autocommit=True) as c:
            c.execute(f'DROP SCHEMA "{schema}" CASCADE')


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, round(p / 100 * len(s) + 0.5) - 1))
    return s[k]


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_avg_at_start": os.getloadavg(),
    }


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def fmt(v: Any) -> str:
        return f"{v:.1f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def save(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    data = {"benchmark": name, "at": time.strftime("%Y-%m-%dT%H:%M:%S"), **data}
    data["machine"] = machine()
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


WORKER = """
import importlib, os, sys, time
sys.path.insert(0, {moddir!r})
import torpor
from torpor.worker import Worker
importlib.import_module({module!r})
rt = torpor.Runtime({url!r}, lease_ttl_s=10.0)
w = Worker(rt, concurrency={concurrency!r}, poll_s=1.0)
w.install_signal_handlers()
print("READY", flush=True)
gate = {gate!r}
while gate and not os.path.exists(gate):
    time.sleep(0.005)
w.run()
"""


class WorkerProcs:
    """Worker processes for a benchmark, optionally held at a start gate (a file)."""

    def __init__(self, url: str, moddir: Path, module: str, *, concurrency: int = 1):
        self.url, self.moddir, self.module, self.concurrency = url, moddir, module, concurrency
        self.gate = moddir / f"go-{uuid.uuid4().hex[:6]}"
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, n: int, *, gated: bool = True) -> None:
        code = WORKER.format(
            moddir=str(self.moddir),
            module=self.module,
            url=self.url,
            concurrency=self.concurrency,
            gate=str(self.gate) if gated else "",
        )
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
        env.setdefault("TORPOR_SIGNING_KEY", "bench")
        env.setdefault("TORPOR_HOME", str(self.moddir / "home"))
        for _ in range(n):
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", code],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            )
        for p in self.procs[-n:]:
            assert p.stdout is not None
            line = p.stdout.readline()
            if "READY" not in line:
                raise RuntimeError(f"worker {p.pid} did not start: {line!r}")

    def open_gate(self) -> None:
        self.gate.touch()

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()


def write_module(directory: Path, name: str, source: str) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.py").write_text(textwrap.dedent(source))
    return name


def load_module(directory: Path, name: str) -> None:
    import importlib

    sys.path.insert(0, str(directory))
    try:
        importlib.import_module(name)
    finally:
        sys.path.remove(str(directory))
