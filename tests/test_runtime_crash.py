"""G1 under real crashes: a multi-step workflow is SIGKILLed at every durable boundary in turn.

The boundaries are enumerated from a crash-free run (``TORPOR_TRACE_POINTS``); then one run per
``<point>@<n>`` is started in its own process with ``TORPOR_CRASH_AT=<point>@<n>`` (it must
die by SIGKILL) and all of them are resumed in a new process. For every run: the outcome and
result equal the crash-free run's, every effect reached the outside world exactly once, and no
step executed again after its completion was recorded (checked against the external ledger).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from runtime_kit import Lab

#: Real processes killed and resumed: the full suite runs these; the fast tier skips them.
pytestmark = pytest.mark.slow

MULTI = """
@torpor.workflow(name="g1.multi", version="1", criteria=["sum checked"])
def multi(run, n):
    rid = run.run_id
    a = run.step("a", work, "a", n, run=rid)
    b = run.compute("b", work, "b", a * 2, run=rid)
    ref = run.artifact("report", f"report a={a} b={b}")
    run.sleep(0.2)
    sent = run.effect("notify", send, f"report {ref.sha256[:12]}", reconcile=find_sent)
    st = run.restore({"i": 0, "acc": 0})
    while st["i"] < 3:
        sid = "loop" if st["i"] == 0 else f"loop#{st['i'] + 1}"
        st["acc"] += run.step("loop", work, sid, st["i"] * 10 + a, run=rid)
        st["i"] += 1
        run.checkpoint(st)
    c = run.step("c", work, "c", st["acc"] + b, run=rid)
    archived = run.effect("archive", send, f"total {c}", reconcile=find_sent)
    run.verify("sum checked", lambda: work("verify:sum checked", c == st["acc"] + b, run=rid))
    return {"a": a, "b": b, "c": c, "ref": ref.sha256, "sent": sent, "archived": archived}
"""

# The ledger entries of this module carry the run id, so many runs can share one ledger.
PRELUDE_PATCH = """
def work(name, value, run=None):
    ledger("step", name=name, run=run)
    return value


def send(what, idempotency_key):
    ledger("effect", key=idempotency_key, what=what, run=idempotency_key.split("/")[0])
    return {"sent": what}
"""

STEPS = ("a", "b", "loop", "loop#2", "loop#3", "c", "verify:sum checked")

#: The boundaries the brief asks for; each is crashed at every occurrence.
POINTS = (
    "append.before",
    "append.after",
    "effect.intended",
    "effect.called",
    "append.deferred",
    "artifact.stored",
    "wait.started",
    "lease.acquired",
)


@pytest.fixture
def lab(tmp_path: Path, db_url: str) -> Lab:
    return Lab(tmp_path, db_url, tmp_path / "ledger.jsonl")


def _steps_of(lab: Lab, run_id: str) -> Counter[str]:
    return Counter(e["name"] for e in lab.ledger("step", run=run_id))


def test_crash_at_every_boundary_then_resume(lab: Lab) -> None:
    mod = lab.module("g1wf", MULTI + PRELUDE_PATCH)

    # 1. The crash-free run, tracing every boundary it passes.
    trace = lab.tmp / "trace.txt"
    base = lab.drive(mod, "base", workflow="g1.multi", input=5, trace=trace)
    assert base.result is not None, base.describe()
    assert base.result["outcome"] == "succeeded", base.result
    expected = base.result["result"]
    assert expected["c"] == (5 + 15 + 25) + 10  # loop values + b
    assert _steps_of(lab, "base") == dict.fromkeys(STEPS, 1)
    seen = Counter(trace.read_text().split())
    assert set(POINTS) <= set(seen), f"not every boundary was reached: {seen}"
    cases = [f"{p}@{n}" for p in POINTS for n in range(1, seen[p] + 1)]
    assert len(cases) >= 30, cases

    # 2. One run per crash point, each in its own process killed there by SIGKILL.
    run_ids = [f"r{i:02d}" for i in range(len(cases))]
    lab.crash_farm(mod, "g1.multi", 5, list(zip(run_ids, cases, strict=True)))

    # 3. A new process resumes every run to its end.
    results = lab.resume_all(mod, run_ids)

    # 4. Every run: same outcome and result, effects exactly once, no step rerun once recorded.
    for point, rid in zip(cases, run_ids, strict=True):
        got = results[rid]
        assert got["outcome"] == "succeeded", (point, got)
        assert got["result"] == expected, point
        for step in ("notify", "archive"):
            hits = lab.ledger("effect", key=f"{rid}/{step}")
            assert len(hits) == 1, f"{point}: effect {step} reached the world {len(hits)} times"
        lab.check_no_rerun_after_record(rid)
        ran = _steps_of(lab, rid)
        assert set(ran) == set(STEPS), (point, ran)
        # A step runs twice only when the crash came before its completion was recorded.
        assert sum(ran.values()) <= len(STEPS) + 1, (point, ran)


KILLABLE = """
@torpor.workflow(name="g1.slow", version="1")
def slow(run, n):
    st = run.restore({"i": 0, "sent": 0})
    while st["i"] < n:
        i = st["i"]
        sid = "tick" if i == 0 else f"tick#{i + 1}"
        run.step("tick", work, sid, i, run=run.run_id)
        _time.sleep(0.01)
        if i % 5 == 4:
            run.effect("emit", send, f"batch {i // 5}", reconcile=find_sent)
            st["sent"] += 1
        st["i"] += 1
        run.checkpoint(st)
    return st
"""


def test_sigkill_at_random_moments(lab: Lab) -> None:
    """Kill the process at seeded random moments (not at a named point) until it finishes."""
    mod = lab.module("g1wf", KILLABLE + PRELUDE_PATCH)
    seed = int(os.environ.get("RUNTIME_KILL_SEED") or random.randrange(1 << 30))
    print(f"kill seed {seed} (replay: random.Random({seed}))")
    rng = random.Random(seed)
    n = 50
    kills = 0
    finished = None
    for _ in range(40):
        before = len(lab.ledger())
        proc = lab.spawn(mod, "k1", workflow="g1.slow", input=n)  # idempotent start
        # Wait until this process is doing work, then kill it a random moment later.
        deadline = time.monotonic() + 30
        while len(lab.ledger()) == before and proc.poll() is None:
            assert time.monotonic() < deadline, "the process never started working"
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.15))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        p = lab.collect(proc)
        if p.killed:
            kills += 1
        assert p.error is None, p.describe()
        if p.result is not None and p.result["status"] == "finished":
            finished = p.result
            break
    assert finished is not None, f"seed {seed}: never finished after {kills} kills"
    assert kills >= 3, f"seed {seed}: only {kills} kills landed"
    assert finished["outcome"] == "succeeded", finished
    assert finished["result"] == {"i": n, "sent": n // 5}
    lab.check_no_rerun_after_record("k1")
    keys = Counter(e["key"] for e in lab.ledger("effect"))
    assert len(keys) == n // 5 and set(keys.values()) == {1}, (seed, keys)
    ticks = _steps_of(lab, "k1")
    assert len(ticks) == n, (seed, ticks)
    # At most one tick per kill can have run without being recorded.
    assert sum(ticks.values()) <= n + kills, (seed, ticks, kills)
    print(f"seed {seed}: {kills} kills, {sum(ticks.values()) - n} repeated unrecorded ticks")
    assert json.dumps(finished["result"])
