"""Helpers for the multi-worker tests (tests/test_workers_pg.py): real worker processes, a real
PostgreSQL, and an *external ledger* the effects write to.

The ledger lives in a PostgreSQL schema of its own (not torpor's tables). It behaves like a
careful outside service:

- ``applied`` is append-only: one row per performed effect, *not* deduplicated, so a duplicate
  effect shows up as two rows for one idempotency key;
- ``fence`` keeps, per key, the highest fencing token (torpor's lease epoch) seen. A write with
  a lower token is refused (:class:`StaleToken`), and ``find`` (the reconcile) raises the fence
  to the caller's token *before* looking, so a worker that lost its lease cannot complete the
  effect after the new owner has reconciled it (Kleppmann's fencing tokens).

Workflow modules are written into the test's ``tmp_path`` with :data:`PRELUDE` prepended and
executed by worker processes started from :data:`WORKER`.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from conftest import HANG_S, ROOT
from torpor.store import open_store

LEDGER_DDL = """
CREATE TABLE IF NOT EXISTS applied (
    id bigserial PRIMARY KEY, key text NOT NULL, token bigint NOT NULL, what text NOT NULL,
    pid integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS fence (key text PRIMARY KEY, token bigint NOT NULL);
CREATE TABLE IF NOT EXISTS refused (
    id bigserial PRIMARY KEY, key text NOT NULL, token bigint NOT NULL, fence bigint NOT NULL,
    pid integer NOT NULL);
CREATE TABLE IF NOT EXISTS steps (
    id bigserial PRIMARY KEY, run_id text NOT NULL, name text NOT NULL, pid integer NOT NULL);
"""

#: Prepended to every generated workflow module.
PRELUDE = '''
import os as _os
import threading as _threading
import time as _time
from datetime import timedelta

import psycopg as _psycopg

import torpor

_local = _threading.local()


class StaleToken(Exception):
    """The ledger refused a write carrying a fencing token older than one it has seen."""


def _db():
    c = getattr(_local, "conn", None)
    if c is None or c.closed or c.broken:
        c = _psycopg.connect(_os.environ["LEDGER_URL"], autocommit=True)
        _local.conn = c
    return c


def _raise_fence(c, key, token):
    c.execute(
        "INSERT INTO fence (key, token) VALUES (%s, %s) ON CONFLICT (key) "
        "DO UPDATE SET token = greatest(fence.token, excluded.token)",
        (key, token),
    )


def send(what, idempotency_key, fencing_token, delay_s=0.0):
    """The effect: performed in the outside world (the ledger), refused if fenced off.
    ``delay_s`` is spent half before and half after the write (crash windows on both sides)."""
    _time.sleep(delay_s / 2)
    c = _db()
    with c.transaction():
        row = c.execute(
            "SELECT token FROM fence WHERE key = %s FOR UPDATE", (idempotency_key,)
        ).fetchone()
        if row is not None and row[0] > fencing_token:
            c.execute(
                "INSERT INTO refused (key, token, fence, pid) VALUES (%s, %s, %s, %s)",
                (idempotency_key, fencing_token, row[0], _os.getpid()),
            )
            stale = row[0]
        else:
            _raise_fence(c, idempotency_key, fencing_token)
            c.execute(
                "INSERT INTO applied (key, token, what, pid) VALUES (%s, %s, %s, %s)",
                (idempotency_key, fencing_token, what, _os.getpid()),
            )
            stale = None
    if stale is not None:
        raise StaleToken(f"{idempotency_key}: fencing token {fencing_token} < {stale}")
    _time.sleep(delay_s / 2)
    return {"sent": what}


def find(call):
    """The reconcile: fence older writers off, then look the key up in the ledger."""
    token = call.kwargs.get("fencing_token", 0)
    c = _db()
    with c.transaction():
        _raise_fence(c, call.idempotency_key, token)
        row = c.execute(
            "SELECT what FROM applied WHERE key = %s ORDER BY id LIMIT 1",
            (call.idempotency_key,),
        ).fetchone()
    return torpor.Applied({"sent": row[0]}) if row else torpor.Absent()


def work(run_id, name, value, sleep_s=0.0):
    """A step body that records each execution (for 'no step lost / rerun' checks)."""
    if sleep_s:
        _time.sleep(sleep_s)
    _db().execute(
        "INSERT INTO steps (run_id, name, pid) VALUES (%s, %s, %s)", (run_id, name, _os.getpid())
    )
    return value
'''

WORKER = """
import importlib, logging, os, sys
logging.basicConfig(
    level=logging.INFO, format="%(asctime)s worker[%(process)d] %(name)s %(message)s"
)
import torpor
from torpor.worker import Worker
importlib.import_module({module!r})
rt = torpor.Runtime({url!r}, lease_ttl_s={ttl!r}, heartbeat_s={hb!r})
w = Worker(rt, concurrency={concurrency!r}, poll_s={poll!r})
w.install_signal_handlers()
print("READY", os.getpid(), flush=True)
stats = w.run()
print("STATS", stats, flush=True)
"""


def ledger_url(pg_database: str) -> str:
    """A schema of its own for the ledger (another schema than torpor's tables)."""
    from pg import schema_url

    url = schema_url(pg_database)
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(LEDGER_DDL)
    return url


def query(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as c:
        return list(c.execute(sql, params).fetchall())


def write_module(tmp: Path, name: str, source: str, *, load: bool = True) -> str:
    """Write workflow module ``name`` and (``load``) import it here too, so this process can
    start runs of its workflows."""
    (tmp / f"{name}.py").write_text(PRELUDE + textwrap.dedent(source))
    if load:
        sys.modules.pop(name, None)
        sys.path.insert(0, str(tmp))
        try:
            importlib.import_module(name)
        finally:
            sys.path.remove(str(tmp))
    return name


def child_env(tmp: Path, ledger: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["LEDGER_URL"] = ledger
    env.update(extra or {})
    return env


@dataclass
class Workers:
    """Worker processes on one database; logs go to files under ``tmp/logs``."""

    tmp: Path
    url: str
    ledger: str
    module: str
    ttl: float = 2.0
    hb: float = 0.5
    concurrency: int = 2
    poll: float = 0.5
    cli: bool = False
    procs: dict[int, subprocess.Popen[str]] = field(default_factory=dict)
    logs: dict[int, Path] = field(default_factory=dict)
    _n: int = 0

    def __post_init__(self) -> None:
        # A worker never creates a store (issue 35): it exists first, as after `torpor init`.
        open_store(self.url).close()

    def spawn(self, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start a worker process: the script above, or (``cli``) the ``torpor worker``
        command — both print a line with READY / ``worker <owner> on <url>`` when started."""
        if self.cli:
            # fmt: off
            argv = [
                sys.executable, "-m", "torpor.cli", "--db", self.url, "worker",
                "--import", self.module, "--concurrency", str(self.concurrency),
                "--lease-ttl", str(self.ttl), "--heartbeat", str(self.hb),
                "--poll", str(self.poll), "--verbose",
            ]
            # fmt: on
        else:
            code = WORKER.format(
                module=self.module,
                url=self.url,
                ttl=self.ttl,
                hb=self.hb,
                concurrency=self.concurrency,
                poll=self.poll,
            )
            argv = [sys.executable, "-c", code]
        (self.tmp / "logs").mkdir(exist_ok=True)
        self._n += 1
        log = self.tmp / "logs" / f"worker-{self._n}.log"
        with open(log, "w") as f:
            p = subprocess.Popen(
                argv,
                cwd=self.tmp,
                env=child_env(self.tmp, self.ledger, env),
                stdout=f,
                stderr=subprocess.STDOUT,
                text=True,
            )
        self.procs[p.pid] = p
        self.logs[p.pid] = log
        return p

    def alive(self) -> list[int]:
        return [pid for pid, p in self.procs.items() if p.poll() is None]

    def ready(self) -> list[int]:
        """Live workers that finished starting (printed READY)."""
        return [pid for pid in self.alive() if _started(self.logs[pid].read_text())]

    def wait_ready(self, n: int, timeout: float = HANG_S) -> None:
        wait_until(lambda: len(self.ready()) >= n, timeout, f"{n} workers to start", 0.05)

    def kill(self, pid: int, sig: int = signal.SIGKILL) -> None:
        self.procs[pid].send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.procs[pid].wait(timeout=HANG_S)

    def stop_all(self, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
        for pid in self.alive():
            self.procs[pid].send_signal(signal.SIGCONT)
            self.procs[pid].send_signal(sig)
        deadline = time.monotonic() + timeout
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def log_text(self, pid: int | None = None) -> str:
        pids = [pid] if pid is not None else list(self.logs)
        return "\n".join(f"--- worker {p}\n{self.logs[p].read_text()}" for p in pids)


def _started(log: str) -> bool:
    return "READY" in log or any(
        ln.startswith("worker ") and " on " in ln for ln in log.splitlines()
    )


def wait_until(pred: Callable[[], Any], timeout: float, what: str, step: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


def lease_owners(events: list[Any]) -> dict[int, str]:
    """``{epoch: owner}`` from the ``lease_acquired`` events; asserts one owner per epoch and
    that epochs only grow along the history (every event written under the latest epoch)."""
    owners: dict[int, str] = {}
    current = 0
    for e in events:
        if e.type == "lease_acquired":
            p = e.payload
            assert p.epoch not in owners, f"epoch {p.epoch} acquired twice"
            assert p.epoch > current, f"epoch went from {current} back to {p.epoch}"
            owners[p.epoch] = p.owner
            current = p.epoch
        assert e.epoch == current or e.epoch == 0 or e.type == "run_started", (
            f"seq {e.seq} ({e.type}) written under epoch {e.epoch} while epoch {current} held it"
        )
    return owners
