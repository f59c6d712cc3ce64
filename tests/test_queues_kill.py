"""A worker SIGKILLed while a run holds its queue's slot: the slot is freed by normal recovery,
never held by the dead worker. Real worker processes on both backends.

Three queues of three runs each — ``serial`` (concurrency 1), ``perkey`` (per-key limit 1, one
key) and ``rated`` (concurrency 1 and 3 starts per hour) — and a workflow that kills its own
process between its two steps, twice for the first run of each queue. Worker processes are
started one after another until nothing is left: every run finishes, in order within its queue,
never two of a queue at once, no step recorded complete runs again, and no lease is left held.
The ``rated`` queue allows exactly three starts an hour: the first run, taken over twice while
holding its slot, must not use the rate up (nor be refused by it), or the last run never starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import torpor
from conftest import HANG_S, ROOT
from torpor.queues import Queues

FLOWS = """
import os, signal
from pathlib import Path
import torpor

HERE = Path(__file__).parent


def note(what, run_id):
    with open(HERE / "steps.log", "a") as f:
        f.write(f"{what} {run_id} {os.getpid()}\\n")
    return what


@torpor.workflow("qk.job")
def job(run: torpor.Run, inp: dict) -> str:
    run.step("a", lambda: note("a", run.run_id))
    kills = HERE / f"kills-{run.run_id}"
    if kills.exists():
        left = int(kills.read_text())
        if left > 0:
            kills.write_text(str(left - 1))
            os.kill(os.getpid(), signal.SIGKILL)  # between two steps, holding the slot
    run.step("b", lambda: note("b", run.run_id))
    return run.run_id
"""

WORKER = """
import sys
import torpor, qk_flows
from torpor.worker import Worker
rt = torpor.Runtime(sys.argv[1], lease_ttl_s=3.0, heartbeat_s=1.0)
stats = Worker(rt, concurrency=1, poll_s=0.05).run(until_idle=True, max_seconds=60)
print("STATS", stats, flush=True)
"""

QUEUES = ("serial", "perkey", "rated")


@pytest.mark.slow
def test_killed_worker_frees_slots_through_recovery(store_url: str, tmp_path: Path) -> None:
    (tmp_path / "qk_flows.py").write_text(FLOWS)
    sys.path.insert(0, str(tmp_path))
    try:
        import qk_flows  # noqa: F401  (registers qk.job here too, to start runs)
    finally:
        sys.path.remove(str(tmp_path))
    rt = torpor.Runtime(store_url)
    q = Queues(rt.store)
    q.set("serial", concurrency=1)
    q.set("perkey", key_concurrency=1)
    q.set("rated", concurrency=1, rate_limit=3, rate_period_s=3600)
    for name in QUEUES:
        for i in range(3):
            key = "one-key" if name == "perkey" else None
            rt.start("qk.job", {}, run_id=f"{name}-{i}", queue=name, key=key)
        (tmp_path / f"kills-{name}-0").write_text("2")

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "src")])}
    codes = []
    for _ in range(10):  # six kills, then one worker finishes everything
        proc = subprocess.run(
            [sys.executable, "-c", WORKER, store_url],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        codes.append(proc.returncode)
        if proc.returncode == 0:
            done = [r for r in rt.store.list_runs(limit=100) if r.status == "finished"]
            if len(done) == 9:
                break
    assert codes.count(-9) == 6, codes  # each first run was killed twice, mid-run
    lines = [ln.split() for ln in (tmp_path / "steps.log").read_text().splitlines()]
    for name in QUEUES:
        ids = [f"{name}-{i}" for i in range(3)]
        for rid in ids:
            rec = rt.store.get_run(rid)
            assert (rec.status, rec.outcome) == ("finished", "succeeded"), rec
            assert rec.lease_owner is None and rec.attention is None
            # step a ran once (recorded before each kill, never again); b once
            assert [ln[0] for ln in lines if ln[1] == rid] == ["a", "b"], (rid, lines)
        mine = [(ln[0], ln[1]) for ln in lines if ln[1].startswith(name)]
        # in order, and never two of the queue at once: a0 b0 a1 b1 a2 b2
        assert mine == [(s, rid) for rid in ids for s in ("a", "b")], mine
    assert not (tmp_path / "kills-serial-0").read_text().strip("0")
    rt.close()


OVERLAP_FLOWS = """
import os, time
from pathlib import Path
import torpor

HERE = Path(__file__).parent


def note(what, run_id, key):
    with open(HERE / "spans.log", "a") as f:
        f.write(f"{what} {run_id} {key} {time.time():.6f} {os.getpid()}\\n")


@torpor.workflow("qo.job")
def job(run: torpor.Run, key: str) -> str:
    run.step("start", lambda: note("start", run.run_id, key))
    time.sleep(0.03)  # between two recorded steps: the slot is held
    run.step("end", lambda: note("end", run.run_id, key))
    return key
"""

OVERLAP_WORKER = """
import sys, time
from pathlib import Path
import torpor, qo_flows
from torpor.worker import Worker
rt = torpor.Runtime(sys.argv[1], lease_ttl_s=10.0)
gate = Path(sys.argv[2])
print("READY", flush=True)
while not gate.exists():
    time.sleep(0.005)
Worker(rt, concurrency=2, poll_s=0.02).run(until_idle=True, max_seconds=60)
"""


@pytest.mark.slow
def test_worker_processes_never_exceed_the_limits(store_url: str, tmp_path: Path) -> None:
    """Worker processes (4 x 2 threads) drain a queue of concurrency 3 and per-key 1 at once:
    at no instant more than 3 of its runs between their two steps, never two of one key."""
    (tmp_path / "qo_flows.py").write_text(OVERLAP_FLOWS)
    sys.path.insert(0, str(tmp_path))
    try:
        import qo_flows  # noqa: F401
    finally:
        sys.path.remove(str(tmp_path))
    rt = torpor.Runtime(store_url)
    Queues(rt.store).set("tight", concurrency=3, key_concurrency=1)
    for i in range(24):
        rt.start("qo.job", f"k{i % 5}", run_id=f"t{i:02}", queue="tight", key=f"k{i % 5}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "src")])}
    gate = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OVERLAP_WORKER, store_url, str(gate)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for p in procs:
        assert p.stdout is not None and "READY" in p.stdout.readline()
    gate.touch()
    for p in procs:
        assert p.wait(timeout=HANG_S) == 0, p.stderr.read() if p.stderr else ""
    events = []
    for ln in (tmp_path / "spans.log").read_text().splitlines():
        what, rid, key, at, pid = ln.split()
        events.append((float(at), 0 if what == "end" else 1, rid, key, int(pid)))
    events.sort()
    running: dict[str, str] = {}
    peak = 0
    for _, starting, rid, key, _ in events:
        if starting:
            assert key not in running.values(), (rid, key, running)
            running[rid] = key
            peak = max(peak, len(running))
            assert len(running) <= 3, running
        else:
            del running[rid]
    assert len(events) == 48 and not running
    assert len({e[4] for e in events}) > 1  # several processes did the work
    assert all(r.outcome == "succeeded" for r in rt.store.list_runs(limit=100))
    rt.close()
