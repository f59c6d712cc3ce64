"""G16, issue 33 attack 1: on SQLite, liveness does not depend on wall clocks.

A holder process is alive inside an effect (it has called it; the outside world has not seen
it yet). A second process whose clock is an hour (or 29 s) ahead resumes the run: by its clock
the lease expired long ago. It must not take the run over — the holder's OS lock says it lives
— so the effect reaches the outside world once. And a holder that died is taken over at once,
even when nothing else can prove it dead (an owner id without the /proc identity) and the
lease looks unexpired to a clock an hour behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import HANG_S, ROOT

pytestmark = pytest.mark.proc

FLOW = """
import json, os, time
import torpor

LEDGER = {ledger!r}
GO = {go!r}
CALLING = {calling!r}


def sent():
    if not os.path.exists(LEDGER):
        return []
    return [json.loads(x) for x in open(LEDGER) if x.strip()]


def send(what, idempotency_key):
    open(CALLING + "." + str(os.getpid()), "w").close()
    while os.environ.get("HOLD") and not os.path.exists(GO):
        time.sleep(0.01)  # alive inside the call, which has not reached the outside yet
    with open(LEDGER, "a") as f:
        f.write(json.dumps({{"key": idempotency_key, "pid": os.getpid()}}) + "\\n")
    return what


def find(call):
    hits = [e for e in sent() if e["key"] == call.idempotency_key]
    return torpor.Applied(what="x") if hits else torpor.Absent()


@torpor.workflow(name="skew.send")
def flow(run, _):
    return run.effect("send", send, "hello", reconcile=find)
"""

PROC = """
import os, sys, time
skew = float(os.environ.get("SKEW_S", "0"))
if skew:
    _real = time.time
    time.time = lambda: _real() + skew  # this process's wall clock is off by SKEW_S
import flow, torpor
kw = dict(lease_ttl_s=1.5, heartbeat_s=0.3)
if os.environ.get("OWNER"):
    kw["owner"] = os.environ["OWNER"]
rt = torpor.Runtime(sys.argv[1], **kw)
try:
    if sys.argv[2] == "claim":  # what a worker does: claim any runnable run
        lease = rt.store.claim_next(rt.owner, 1.5)
        print("claimed" if lease else "nothing to claim", flush=True)
    elif sys.argv[2] == "run":
        print("result", rt.run("skew.send", None, run_id="r1").outcome, flush=True)
    else:
        print("result", rt.resume("r1").outcome, flush=True)
except torpor.TorporError as exc:
    print("error", type(exc).__name__, exc, flush=True)
"""


def _setup(tmp_path: Path) -> tuple[str, dict[str, str]]:
    (tmp_path / "flow.py").write_text(
        textwrap.dedent(
            FLOW.format(
                ledger=str(tmp_path / "ledger"),
                go=str(tmp_path / "go"),
                calling=str(tmp_path / "calling"),
            )
        )
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT / "src")]))
    return f"sqlite:///{tmp_path / 'skew.db'}", env


def _start(url: str, env: dict[str, str], what: str, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PROC, url, what],
        env={**env, **extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_calling(tmp_path: Path, proc: subprocess.Popen[str]) -> None:
    end = time.monotonic() + HANG_S
    while not list(tmp_path.glob("calling.*")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "the holder never reached its effect"
        time.sleep(0.01)


def _ledger(tmp_path: Path) -> list[dict[str, object]]:
    path = tmp_path / "ledger"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("skew_s", [29.0, 3600.0])
def test_a_clock_ahead_does_not_take_a_live_holder_over(tmp_path: Path, skew_s: float) -> None:
    url, env = _setup(tmp_path)
    holder = _start(url, env, "run", HOLD="1")
    try:
        _wait_calling(tmp_path, holder)
        time.sleep(0.5)  # a few renewals by the holder
        taker = subprocess.run(
            [sys.executable, "-c", PROC, url, "resume"],
            env={**env, "SKEW_S": str(skew_s)},
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        assert "error LeaseHeldError" in taker.stdout, (taker.stdout, taker.stderr)
        assert "alive" in taker.stdout
        worker = subprocess.run(
            [sys.executable, "-c", PROC, url, "claim"],
            env={**env, "SKEW_S": str(skew_s)},
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        assert "nothing to claim" in worker.stdout, (worker.stdout, worker.stderr)
        (tmp_path / "go").touch()
        out, err = holder.communicate(timeout=HANG_S)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert "result succeeded" in out, (out, err)
    assert len(_ledger(tmp_path)) == 1, _ledger(tmp_path)


def test_a_dead_holder_is_taken_over_at_once_whatever_the_clock(tmp_path: Path) -> None:
    url, env = _setup(tmp_path)
    # An owner id without the /proc identity: only the OS lock can prove it dead.
    holder = _start(url, env, "run", HOLD="1", OWNER="elsewhere:1:abc")
    _wait_calling(tmp_path, holder)
    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=HANG_S)
    (tmp_path / "go").touch()
    # An hour behind: by this clock the dead holder's lease has an hour left.
    taker = subprocess.run(
        [sys.executable, "-c", PROC, url, "resume"],
        env={**env, "SKEW_S": "-3600"},
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert "result succeeded" in taker.stdout, (taker.stdout, taker.stderr)
    assert len(_ledger(tmp_path)) == 1, _ledger(tmp_path)  # the absent call, performed once
