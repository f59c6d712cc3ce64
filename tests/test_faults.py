"""Fault plans (issue 5) and resume under changed code.

Fault plans: the rule language, seeded plans, zero cost when off, a broken database connection
around a commit (read back, never guessed), the points documented. Resume under change: a
compatible change continues; an incompatible one stops naming the step that no longer matches,
leaving the record untouched (and the run resumable by its own code); ``run.patched()`` keeps
recorded runs on the old path and takes new ones down the new one.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import torpor
from torpor import faults
from torpor.history import fold
from torpor.testing import FakeClock


@pytest.fixture(autouse=True)
def no_plan() -> Iterator[None]:
    yield
    faults.reset()


# --------------------------------------------------------------------- plans


def test_rules_parse_and_print() -> None:
    p = faults.FaultPlan.parse(
        "crash:append.after@3; ack:effect.called ;delay:lease.renewing@*=2.5"
    )
    assert [str(r) for r in p.rules] == [
        "crash:append.after@3",
        "ack:effect.called@1",
        "delay:lease.renewing@*=2.5",
    ]
    assert str(faults.FaultPlan.parse("append.before@2")) == "crash:append.before@2"  # legacy
    with pytest.raises(ValueError, match="unknown fault point"):
        faults.FaultPlan.parse("crash:append.sideways@1")
    with pytest.raises(ValueError, match="unknown fault action"):
        faults.FaultPlan.parse("explode:append.after@1")
    with pytest.raises(ValueError, match="needs seconds"):
        faults.FaultPlan.parse("delay:lease.renewing@1")


def test_seeded_plans_are_reproducible() -> None:
    trace = ["append.before", "append.after", "effect.intended", "append.before", "append.after"]
    plans = {str(faults.FaultPlan.from_seed(s, trace)) for s in range(50)}
    assert plans <= {
        "crash:append.before@1",
        "crash:append.after@1",
        "crash:effect.intended@1",
        "crash:append.before@2",
        "crash:append.after@2",
    }
    assert len(plans) == 5
    for s in (0, 7, 123456):
        assert str(faults.FaultPlan.from_seed(s, trace)) == str(
            faults.FaultPlan.from_seed(s, trace)
        )
    assert re.fullmatch(r"crash:\*@\d+", str(faults.FaultPlan.from_seed(3, 40)))


def test_points_are_no_ops_when_off_and_documented() -> None:
    faults.reset()
    assert faults.point is faults._noop and faults.note is faults._noop_note
    faults.install("crash:append.after@99")
    assert faults.point is faults._active
    faults.reset()
    assert faults.point is faults._noop
    doc = faults.__doc__ or ""
    for name in faults.POINTS:  # every point in the module's documentation
        assert f"``{name}``" in doc, name
    # Every point named in the source is in the table.
    src = Path(torpor.__file__).parent
    used = set()
    for f in src.rglob("*.py"):
        used |= set(re.findall(r'faults\.point\("([a-z.]+)"\)', f.read_text()))
    assert used <= set(faults.POINTS), used - set(faults.POINTS)
    assert {"append.landed", "append.absent", "wake.posted", "lease.renewing"} <= used


def _echo(x: Any) -> Any:
    return x


@torpor.workflow(name="faults.steps", version="1")
def steps(run: torpor.Run, n: int) -> list[int]:
    return [run.step(f"s{i}", _echo, i) for i in range(n)]


@pytest.mark.parametrize("where", ["append.committing", "append.committed"])
def test_connection_broken_around_a_commit_is_read_back(
    runtime: torpor.Runtime, client: torpor.Client, tmp_path: Path, where: str
) -> None:
    """``break`` before the commit: nothing landed, the append is retried; after it: it landed,
    the store reads that back instead of writing twice. Either way one completion per step."""
    trace = tmp_path / "points"
    faults.install(f"break:{where}@2;break:{where}@4", trace=trace)
    res = runtime.run(steps, 4, run_id="brk")
    faults.reset()
    assert res.outcome == "succeeded" and res.result == [0, 1, 2, 3], res
    seen = Counter(trace.read_text().split())
    if where == "append.committing":
        assert seen["append.absent"] == 2 and seen["append.landed"] == 0
    else:
        assert seen["append.landed"] == 2 and seen["append.absent"] == 0
    done = Counter(
        e.payload.step_id  # type: ignore[attr-defined]
        for e in client.events("brk")
        if e.type == "step_completed"
    )
    assert done == {"s0": 1, "s1": 1, "s2": 1, "s3": 1}
    fold(client.events("brk"))


def test_fake_clock_moves_timers_and_deadlines(runtime: torpor.Runtime, tmp_path: Path) -> None:
    from datetime import timedelta

    clock = FakeClock(1_800_000_000)

    @torpor.workflow(name="faults.sleepy", version="1")
    def sleepy(run: torpor.Run, _: Any) -> float:
        t0 = run.step("t0", run.now)  # recorded: a replay after the sleep reads it back
        run.sleep(timedelta(days=3))
        return float(run.step("t1", run.now) - t0)

    rt = torpor.Runtime(f"sqlite:///{tmp_path / 'fake.db'}", str(tmp_path / "a"), clock=clock)
    try:
        res = rt.run(sleepy, None, run_id="zz")
    finally:
        rt.close()
    assert res.outcome == "succeeded" and res.result >= 3 * 86400, res
    assert clock() >= 1_800_000_000 + 3 * 86400


# --------------------------------------------------------------------- resume under change

LOG: list[str] = []


def _work(name: str) -> str:
    LOG.append(name)
    return name


def _register(version: str, compatible: tuple[str, ...], body: Any) -> None:
    torpor.workflow("change.flow", version=version, compatible=compatible)(body)


def v1(run: torpor.Run, _: Any) -> list[str]:
    a = run.step("a", _work, "a")
    b = run.step("b", _work, "b")
    go = run.wait_for("go")
    c = run.step("c", _work, "c")
    return [a, b, go, c]


def v2_compatible(run: torpor.Run, _: Any) -> list[str]:
    """Adds a step after the point every v1 run reached (the wait)."""
    a = run.step("a", _work, "a")
    b = run.step("b", _work, "b")
    go = run.wait_for("go")
    c = run.step("c", _work, "c")
    d = run.step("d", _work, "d")
    return [a, b, go, c, d]


def v2_inserted(run: torpor.Run, _: Any) -> list[str]:
    """Inserts a step between two recorded ones: incompatible with v1 runs past it."""
    a = run.step("a", _work, "a")
    x = run.step("x", _work, "x")
    b = run.step("b", _work, "b")
    go = run.wait_for("go")
    return [a, x, b, go]


def v2_patched(run: torpor.Run, _: Any) -> list[str]:
    """The same insertion behind a patch marker: v1 runs keep the old path."""
    out = [run.step("a", _work, "a")]
    if run.patched("add-x"):
        out.append(run.step("x", _work, "x"))
    out.append(run.step("b", _work, "b"))
    out.append(run.wait_for("go"))
    return out


def v2_dropped(run: torpor.Run, _: Any) -> list[str]:
    """Drops recorded step b."""
    a = run.step("a", _work, "a")
    go = run.wait_for("go")
    return [a, go]


@pytest.fixture
def v1_run(runtime: torpor.Runtime, client: torpor.Client) -> Iterator[str]:
    """A run of version 1 waiting for its signal (a and b recorded)."""
    LOG.clear()
    _register("1", (), v1)
    res = runtime.run("change.flow", None, run_id="old")
    assert res.status == "waiting"
    client.signal("old", "go", "now", message_id="go-1")
    yield "old"
    _register("1", (), v1)


def _history(client: torpor.Client, rid: str) -> list[tuple[int, str]]:
    return [(e.seq, e.type) for e in client.events(rid)]


def test_compatible_change_continues(
    runtime: torpor.Runtime, client: torpor.Client, v1_run: str
) -> None:
    _register("2", ("1",), v2_compatible)
    res = runtime.resume(v1_run)
    assert res.outcome == "succeeded" and res.result == ["a", "b", "now", "c", "d"], res
    assert LOG == ["a", "b", "c", "d"]
    assert client.state(v1_run).version == "2"
    assert "version_accepted" in [t for _, t in _history(client, v1_run)]


def test_incompatible_change_names_the_step_and_leaves_the_record_untouched(
    runtime: torpor.Runtime, client: torpor.Client, v1_run: str
) -> None:
    runtime.resume(v1_run)  # (moves the signal into the history: nothing else pending)
    LOG.clear()
    _register("1", (), v1)
    res0 = runtime.run("change.flow", None, run_id="old2")
    assert res0.status == "waiting"
    before = _history(client, "old2")
    _register("2", ("1",), v2_inserted)
    with pytest.raises(torpor.NonDeterminismError) as info:
        runtime.resume("old2")
    msg = str(info.value)
    assert "new step 'x'" in msg and "step 'b'" in msg, msg
    assert "version '1'" in msg and "run.patched(" in msg and "Nothing was recorded" in msg
    # The record is untouched; the one note added names why the run cannot proceed (issue 13).
    after = _history(client, "old2")
    assert after[: len(before)] == before, "a refused resume changed the history"
    assert [t for _, t in after[len(before) :]] == ["attention_needed"]
    assert client.state("old2").attention.startswith("replay diverged")
    assert client.state("old2").version == "1"  # still resumable by the code it ran under
    assert LOG == ["a", "b", "x"]  # (a read step may run; its result is never recorded)
    _register("1", (), v1)
    client.signal("old2", "go", "later")
    assert runtime.resume("old2").outcome == "succeeded"


def test_dropped_step_is_refused_at_the_end(
    runtime: torpor.Runtime, client: torpor.Client, v1_run: str
) -> None:
    before = _history(client, v1_run)
    _register("2", ("1",), v2_dropped)
    with pytest.raises(torpor.NonDeterminismError) as info:
        runtime.resume(v1_run)
    assert "step 'b'" in str(info.value), info.value
    # Only the inbox message was moved in (as under any code), and why the run cannot proceed
    # noted (issue 13); no version change, no outcome.
    after = _history(client, v1_run)
    assert after[: len(before)] == before
    assert {t for _, t in after[len(before) :]} <= {
        "lease_acquired",
        "signal_received",
        "attention_needed",
    }
    assert client.state(v1_run).attention.startswith("replay diverged")
    assert client.state(v1_run).version == "1"


def test_patch_marker_keeps_old_runs_on_the_old_path(
    runtime: torpor.Runtime, client: torpor.Client, v1_run: str
) -> None:
    _register("2", ("1",), v2_patched)
    old = runtime.resume(v1_run)
    assert old.outcome == "succeeded" and old.result == ["a", "b", "now"], old
    assert "x" not in LOG  # recorded past the patch without it: the old path
    assert not [e for e in client.events(v1_run) if e.step_id == "patch:add-x"]

    LOG.clear()
    new = runtime.run("change.flow", None, run_id="new")
    assert new.status == "waiting"
    assert LOG == ["a", "x", "b"]
    markers = [e for e in client.events("new") if e.step_id == "patch:add-x"]
    assert [e.type for e in markers] == ["step_started", "step_completed"]
    client.signal("new", "go", "ok")
    again = runtime.resume("new")  # replays through the marker: stays on the new path
    assert again.outcome == "succeeded" and again.result == ["a", "x", "b", "ok"], again
    assert LOG == ["a", "x", "b"]


def test_policy_change_is_named(
    runtime: torpor.Runtime, client: torpor.Client, v1_run: str
) -> None:
    def v2_policy(run: torpor.Run, _: Any) -> Any:
        run.step("a", _work, "a")
        run.compute("b", _work, "b")  # was a read step
        return run.wait_for("go")

    before = _history(client, v1_run)
    _register("1", (), v2_policy)
    with pytest.raises(torpor.NonDeterminismError) as info:
        runtime.resume(v1_run)
    msg = str(info.value)
    assert "step 'b'" in msg and "read step" in msg and "compute step" in msg, msg
    assert "run.patched(" in msg
    assert _history(client, v1_run)[: len(before)] == before


def _returns_none(idempotency_key: str) -> None:
    LOG.append(idempotency_key)


@torpor.workflow(name="faults.none_effect", version="1")
def none_effect(run: torpor.Run, _: Any) -> Any:
    first = run.effect("e", _returns_none, reconcile=lambda call: torpor.Applied())
    run.wait_for("go")
    return first


def test_an_effect_returning_none_replays(runtime: torpor.Runtime, client: torpor.Client) -> None:
    """Found by the explorer on the README's example: an effect whose result is None (recorded,
    or reconciled as applied) was taken for "not recorded" on replay and failed the run."""
    LOG.clear()
    assert runtime.run(none_effect, None, run_id="none").status == "waiting"
    client.signal("none", "go")
    res = runtime.resume("none")
    assert res.outcome == "succeeded" and res.result is None, res
    assert LOG == ["none/e"]
