"""An effect costs one durable append (issue 28): its intent is committed before the call (G2,
always), and its observation rides on the next append — the next effect's intent, a step, a
wait, the outcome — or is written when the execution ends. A process killed in between leaves
the effect intended but not observed: reconciled on recovery (``applied`` settles it), or
``unresolved`` for an effect without a reconcile. Real processes, SIGKILL, both backends."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

import torpor
from runtime_kit import Lab, event_types, wait_for_file

EFFECTS = """
@torpor.workflow(name="one.effects", version="1")
def effects(run, n):
    out = []
    for i in range(n):
        out.append(run.effect("e", send, f"e{i}", reconcile=find_sent))
    return out


@torpor.workflow(name="one.bare", version="1")
def bare(run, n):
    # no reconcile: an unobserved call cannot be settled after a crash
    return [run.effect("e", send, f"e{i}") for i in range(n)]


@torpor.workflow(name="one.then_sleep", version="1")
def then_sleep(run, n):
    sent = run.effect("e", send, "before the wait", reconcile=find_sent)
    run.sleep(3600)
    return sent
"""


@pytest.fixture
def lab(tmp_path: Path, store_url: str) -> Lab:
    return Lab(tmp_path, store_url, tmp_path / "ledger.jsonl")


def _trace(path: Path) -> list[str]:
    return path.read_text().split()


@pytest.mark.slow
def test_an_effect_is_one_append_its_observation_riding_on_the_next(lab: Lab) -> None:
    mod = lab.module("onewf", EFFECTS)
    trace = lab.tmp / "trace.txt"
    p = lab.drive(mod, "r", workflow="one.effects", input=3, trace=trace)
    assert p.result is not None and p.result["outcome"] == "succeeded", p.describe()
    points = _trace(trace)
    # Per effect: the intent committed before the call, the observation deferred after it;
    # then the next append carries it. Three effects and the outcome: four appends.
    assert points.count("append.after") == 4, points
    calls = [i for i, x in enumerate(points) if x == "effect.called"]
    assert len(calls) == 3
    for i in calls:
        assert points[i - 1] == "effect.calling"  # after the intent's append, never before it
        assert points[i + 1] == "append.deferred"
    types = event_types(lab.events("r"))
    # The observation of effect k lands in the history right before effect k+1's start.
    assert types.count("effect_observed") == 3
    for k in range(2):
        i = [n for n, t in enumerate(types) if t == "effect_observed"][k]
        assert types[i : i + 4] == [
            "effect_observed",
            "step_completed",
            "step_started",
            "effect_intended",
        ], types
    assert types[-3:] == ["effect_observed", "step_completed", "run_finished"], types


@pytest.mark.slow
def test_the_observation_is_written_before_a_wait(lab: Lab) -> None:
    mod = lab.module("onewf", EFFECTS)
    p = lab.drive(mod, "w", workflow="one.then_sleep", input=0, follow_timers=False)
    assert p.result is not None and p.result["status"] == "waiting", p.describe()
    types = event_types(lab.events("w"))
    i = types.index("effect_observed")
    assert types[i : i + 2] == ["effect_observed", "step_completed"], types
    assert "wait_started" in types[i + 2 :], types  # in the wait's append, or before it
    assert lab.state("w").effects_applied == 1


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2])
def test_sigkill_before_the_observation_lands_reconciles(lab: Lab, n: int) -> None:
    """Killed right after the call returned (its observation folded, not yet written): the
    intent is in the record, so recovery asks the world — applied — and never calls again."""
    mod = lab.module("onewf", EFFECTS)
    p = lab.drive(mod, "k", workflow="one.effects", input=3, crash_at=f"append.deferred@{n}")
    assert p.killed, p.describe()
    st = lab.state("k")
    key = f"k/e#{n}" if n > 1 else "k/e"
    assert st.effects[key].status == "intended"  # the intent was durable before the call
    done = lab.resume_until_finished(mod, "k")
    assert done.result is not None and done.result["outcome"] == "succeeded", done.describe()
    assert done.result["result"] == [{"sent": f"e{i}"} for i in range(3)]
    for i, k in enumerate(["k/e", "k/e#2", "k/e#3"]):
        assert len(lab.ledger("effect", key=k)) == 1, (i, lab.ledger("effect"))
    types = event_types(lab.events("k"))
    assert types.count("effect_reconciled") == 1, types


@pytest.mark.slow
def test_sigkill_before_the_observation_lands_without_reconcile_is_unresolved(lab: Lab) -> None:
    """The honesty window (README, "When things go wrong"): an effect without a reconcile
    whose observation died with the process is not guessed at — the run is unresolved, and
    the effect was called once."""
    mod = lab.module("onewf", EFFECTS)
    p = lab.drive(mod, "u", workflow="one.bare", input=2, crash_at="append.deferred@1")
    assert p.killed, p.describe()
    done = lab.resume_until_finished(mod, "u")
    assert done.result is not None and done.result["outcome"] == "unresolved", done.describe()
    assert len(lab.ledger("effect", key="u/e")) == 1
    assert lab.ledger("effect", key="u/e#2") == []


def test_a_released_execution_writes_the_deferred_observation(store_url: str) -> None:
    """An execution that ends with no further append (a shutdown at the next boundary)
    writes the observation before it lets the run go."""
    rt = torpor.Runtime(store_url)
    try:

        @torpor.workflow(name="one.release", version="1")
        def release(run: torpor.Run, n: int) -> int:
            run.effect("e", lambda: 1)
            rt.stopping.set()  # the next boundary releases the run
            run.step("after", lambda: 2)
            return 0

        res = rt.execute(rt.start("one.release", 0, run_id="rel"))
        assert res.status != "finished", res
        st = rt.store.load("rel")
        assert st.effects_applied == 1, st.effects
        assert "e" not in st.steps  # completed (a completed step leaves the compact state)
        types = [e.type for e in rt.store.read_events("rel", 0, 100)]
        assert types[-2:] == ["effect_observed", "step_completed"], types
    finally:
        rt.close()


BUSY = """
@torpor.workflow(name="one.busy", version="1")
def busy(run, n):
    sent = run.effect("e", send, "then long work")  # no reconcile
    open(MARK, "w").close()
    _time.sleep(120)  # long work that records nothing: the heartbeat writes the observation
    return sent
"""


@pytest.mark.slow
def test_the_heartbeat_writes_an_observation_left_behind_long_work(lab: Lab) -> None:
    """Work that records nothing after an effect does not keep its observation in the process:
    the next heartbeat writes it. Killed after that, the run resumes as known (no reconcile
    needed, none asked), where a lost observation would leave it unresolved."""
    mark = lab.tmp / "mark"
    mod = lab.module("busywf", f"MARK = {str(mark)!r}\n" + BUSY)
    proc = lab.spawn(
        mod, "b", workflow="one.busy", input=0, runtime={"lease_ttl_s": 3, "heartbeat_s": 0.2}
    )
    try:
        wait_for_file(mark, timeout=60)
        for _ in range(600):  # causality, not a budget: the heartbeat's write shows up
            if "effect_observed" in event_types(lab.events("b")):
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"no observation written: {event_types(lab.events('b'))}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert len(lab.ledger("effect", key="b/e")) == 1
    killed = lab.state("b")
    assert "b/e" not in killed.effects and killed.effects_applied == 1, killed.effects
