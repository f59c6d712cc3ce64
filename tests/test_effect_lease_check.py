"""No effect call on a lapsed lease (issue 16, item 3), on both backends, with real processes.

A holder process pauses (SIGSTOP, every thread, the heartbeat too) right before it calls an
effect, past its 1 s lease; the test takes the run over meanwhile, then lets the holder go on.
The holder must see by its own monotonic clock that its lease is too old, try to renew, be
refused, and make no call: the outside world (a ledger file) sees nothing. A pause shorter than
the lease, with nobody taking over, only renews: the call is made, once."""

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
from torpor.store import open_store

#: Real processes: the default tier on SQLite, PostgreSQL in the slow one.
pytestmark = pytest.mark.proc

FLOW = """
import json, os, sys
import torpor

LEDGER = {ledger!r}


def send(what, idempotency_key):
    with open(LEDGER, "a") as f:
        f.write(json.dumps({{"key": idempotency_key, "pid": os.getpid()}}) + "\\n")
    return what


@torpor.workflow(name="pause.send")
def flow(run, _):
    return run.effect("send", send, "hello")
"""

HOLDER = """
import sys
import flow, torpor
rt = torpor.Runtime(sys.argv[1], lease_ttl_s=float(sys.argv[2]), heartbeat_s=0.3)
try:
    print("result", rt.run("pause.send", None, run_id="r1").outcome, flush=True)
except torpor.TorporError as exc:
    print("error", type(exc).__name__, exc, flush=True)
"""


def _stopped(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def _holder(
    store_url: str, tmp_path: Path, ttl_s: float = 1.0
) -> tuple[subprocess.Popen[str], Path]:
    ledger = tmp_path / "ledger.jsonl"
    (tmp_path / "flow.py").write_text(textwrap.dedent(FLOW.format(ledger=str(ledger))))
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT / "src")]),
        TORPOR_FAULTS="stop:effect.calling@1",
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, store_url, str(ttl_s)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    end = time.monotonic() + 30
    while not _stopped(holder.pid):
        assert holder.poll() is None, holder.communicate()
        assert time.monotonic() < end, "the holder never reached the effect"
        time.sleep(0.02)
    return holder, ledger


def _calls(ledger: Path) -> list[dict[str, object]]:
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]


def test_a_holder_paused_past_its_lease_makes_no_call(store_url: str, tmp_path: Path) -> None:
    holder, ledger = _holder(store_url, tmp_path)
    store = open_store(store_url)
    try:
        try:
            time.sleep(1.3)  # the 1 s lease expires while the holder is frozen
            taken = store.acquire_lease("r1", "taker:1:elsewhere", 30)
            assert taken.epoch >= 2
        finally:
            os.kill(holder.pid, signal.SIGCONT)
        out, err = holder.communicate(timeout=HANG_S)
        assert _calls(ledger) == [], (out, err)
        assert "error LeaseLostError" in out, (out, err)
        assert "renewal refused" in out, out
        assert store.get_run("r1").lease_owner == "taker:1:elsewhere"
        assert not [e for e in store.read_events("r1") if e.type == "effect_observed"]
    finally:
        store.close()


def test_a_short_pause_renews_and_calls_once(store_url: str, tmp_path: Path) -> None:
    # A 0.8 s pause inside a 10 s lease: on a loaded machine the pause (and the time to notice
    # the holder stopped) can run long, and a 1 s lease then lapses before the holder wakes.
    holder, ledger = _holder(store_url, tmp_path, ttl_s=10.0)
    time.sleep(0.8)  # nobody takes the run
    os.kill(holder.pid, signal.SIGCONT)
    out, err = holder.communicate(timeout=HANG_S)
    assert "result succeeded" in out, (out, err)
    assert [c["key"] for c in _calls(ledger)] == ["r1/send"]
