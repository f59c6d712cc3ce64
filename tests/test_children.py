"""Child runs (issue 37, G14): a parent spawns full runs as recorded steps, waits on them
durably (all / first / any n), takes a child's failure as a value, never succeeds over an
unresolved child, and its cancel reaches every unfinished child down the tree — on both
backends, in one process (the SQLite default: children run where the parent is resumed)."""

from __future__ import annotations

from typing import Any

import pytest

import torpor
from torpor.errors import ConfigError, TransitionError
from torpor.history import ChildEnded, Event, Outcome, RunFinished, RunStarted, apply
from torpor.history.state import RunState

CALLS: list[str] = []


@torpor.workflow("kids.leaf")
def leaf(run: torpor.Run, x: Any) -> Any:
    CALLS.append(f"leaf {x}")
    if x == "fail":
        raise ValueError("leaf failed on purpose")
    if x == "wait":
        return run.wait_for("go")
    if x == "doubt":
        run.effect("send", _lost, reconcile=None)
        return "settled"
    return run.step("square", lambda: x * x)


def _lost() -> None:
    raise ConnectionError("the reply was lost")


@torpor.workflow("kids.fan")
def fan(run: torpor.Run, xs: list[Any]) -> Any:
    kids = [run.spawn("kids.leaf", x) for x in xs]
    return [(r.run_id, r.outcome, r.result) for r in run.wait_children(kids)]


@torpor.workflow("kids.race")
def race(run: torpor.Run, xs: list[Any]) -> Any:
    kids = [run.spawn("kids.leaf", x) for x in xs]
    res = run.wait_children(kids, until=1, cancel_rest=True)
    return [r.result for r in res if r.done]


@torpor.workflow("kids.one")
def one(run: torpor.Run, x: Any) -> Any:
    r = run.child("kids.leaf", x)
    return {"ok": r.ok, "outcome": r.outcome, "reason": r.reason, "result": r.result}


@torpor.workflow("kids.forget")
def forget(run: torpor.Run, x: Any) -> Any:
    run.spawn("kids.leaf", x)
    return "returned before its child"


@torpor.workflow("kids.crash")
def crash(run: torpor.Run, x: Any) -> Any:
    run.spawn("kids.leaf", "wait")
    raise RuntimeError("the parent broke")


@torpor.workflow("kids.level")
def level(run: torpor.Run, depth: int) -> Any:
    if depth == 0:
        return run.wait_for("never")
    return run.child("kids.level", depth - 1).outcome


@pytest.fixture
def rt(store_url: str) -> Any:
    CALLS.clear()
    with torpor.Runtime(store_url) as r:
        yield r


def test_fan_out_and_in_each_child_once_failure_is_a_value(rt: torpor.Runtime) -> None:
    res = rt.run(kids_fan := "kids.fan", [2, "fail", 3], run_id="fan1")
    assert (res.status, res.outcome) == ("finished", "succeeded"), res
    ids = ["fan1.child:kids.leaf", "fan1.child:kids.leaf#2", "fan1.child:kids.leaf#3"]
    assert [tuple(x) for x in res.result] == [
        (ids[0], "succeeded", 4),
        (ids[1], "failed", None),
        (ids[2], "succeeded", 9),
    ]
    assert sorted(CALLS) == ["leaf 2", "leaf 3", "leaf fail"]  # one execution each
    c = torpor.Client(rt.store)
    assert [r.run_id for r in c.children("fan1")] == ids
    assert all(c.parent(i) == "fan1" for i in ids) and c.parent("fan1") is None
    # The parent's history has the children's outcomes as recorded messages (G11).
    ended = {e.payload.child_run_id for e in c.events("fan1") if e.type == "child_ended"}
    assert ended == set(ids)
    # Run again: the same run, no second child (idempotent start, recorded spawns).
    again = rt.run(kids_fan, [2, "fail", 3], run_id="fan1")
    assert again.outcome == "succeeded" and len(c.children("fan1")) == 3
    assert len(CALLS) == 3


def test_first_of_many_cancels_the_rest(rt: torpor.Runtime) -> None:
    res = rt.run("kids.race", [5, "wait", "wait"], run_id="race1")
    assert res.outcome == "succeeded" and res.result == [25], res
    c = torpor.Client(rt.store)
    outcomes = {r.run_id: r.outcome for r in c.children("race1")}
    assert list(outcomes.values()) == ["succeeded", "cancelled", "cancelled"], outcomes
    for rid, o in outcomes.items():
        if o == "cancelled":
            st = c.state(rid)
            assert "parent run race1" in st.cancel_reason, st.cancel_reason


def test_a_child_that_fails_is_a_value_of_child(rt: torpor.Runtime) -> None:
    res = rt.run("kids.one", "fail", run_id="one1")
    assert res.outcome == "succeeded"
    assert res.result["ok"] is False and res.result["outcome"] == "failed"
    assert "leaf failed on purpose" in res.result["reason"]


def test_a_parent_that_returns_waits_for_its_children_first(rt: torpor.Runtime) -> None:
    res = rt.run("kids.forget", "wait", run_id="fg1")
    assert (res.status, res.wait_kind) == ("waiting", "children"), res
    child = "fg1.child:kids.leaf"
    assert rt.store.get_run(child).status == "waiting"
    torpor.Client(rt.store).signal(child, "go", 7)
    assert rt.resume(child).outcome == "succeeded"
    # The child's outcome woke the parent in the same transaction: it is runnable now.
    assert "fg1" in rt.store.runnable_runs()
    done = rt.resume("fg1")
    assert (done.outcome, done.result) == ("succeeded", "returned before its child")


def test_an_unresolved_child_holds_its_parent_and_is_named(rt: torpor.Runtime) -> None:
    res = rt.run("kids.one", "doubt", run_id="un1")
    child = "un1.child:kids.leaf"
    assert rt.store.get_run(child).outcome == "unresolved"
    assert res.status == "waiting", res  # never succeeded over it (G14)
    c = torpor.Client(rt.store)
    att = c.state("un1").attention
    assert child in att and "unresolved" in att, att
    assert c.get("un1").attention  # where ls looks
    # A person settles the child's effect; the child ends, and the parent goes on.
    c.resolve(child, f"{child}/send", "applied", by="alice", result=None)
    assert rt.resume(child).outcome == "succeeded"
    done = rt.resume("un1")
    assert done.outcome == "succeeded" and done.result["result"] == "settled"
    assert not c.state("un1").attention


def test_cancel_reaches_every_level_and_is_recorded_on_each(rt: torpor.Runtime) -> None:
    res = rt.run("kids.level", 2, run_id="tree")
    assert res.status == "waiting"
    mid, low = "tree.child:kids.level", "tree.child:kids.level.child:kids.level"
    assert rt.store.get_run(low).status == "waiting"
    c = torpor.Client(rt.store)
    c.cancel("tree", by="alice", reason="enough")
    assert rt.resume("tree").outcome == "cancelled"
    for rid, by in ((mid, "parent run tree"), (low, f"parent run {mid}")):
        assert rt.store.get_run(rid).outcome == "cancelled", rid
        assert by in c.state(rid).cancel_reason
        cancels = [e for e in c.events(rid) if e.type == "cancel_requested"]
        assert len(cancels) == 1, cancels


def test_a_parent_that_fails_cancels_its_unfinished_children(rt: torpor.Runtime) -> None:
    res = rt.run("kids.crash", None, run_id="cr1")
    assert res.outcome == "failed" and "the parent broke" in res.reason
    assert rt.store.get_run("cr1.child:kids.leaf").outcome == "cancelled"


def test_a_given_run_id_must_be_a_child(rt: torpor.Runtime) -> None:
    rt.start("kids.leaf", 1, run_id="someone-else")

    @torpor.workflow("kids.steal")
    def steal(run: torpor.Run, _: Any) -> Any:
        return run.child("kids.leaf", 1, run_id="someone-else").outcome

    res = rt.run("kids.steal", None, run_id="st1")
    assert res.outcome == "failed" and "is not its child" in res.reason, res


def test_bad_waits_are_refused_in_one_line(rt: torpor.Runtime) -> None:
    @torpor.workflow("kids.badwait")
    def badwait(run: torpor.Run, until: Any) -> Any:
        kid = run.spawn("kids.leaf", 1)
        return run.wait_children([kid], until=until)

    for until, why in ((0, "until=0"), (2, "until=2"), ("most", "'most'")):
        res = rt.run("kids.badwait", until, run_id=f"bw-{until}")
        assert res.outcome == "failed" and why in res.reason, res
        assert ConfigError.__name__ in res.reason


def _ev(state: RunState, payload: Any) -> Event:
    return Event(
        run_id=state.run_id,
        seq=state.seq + 1,
        type=torpor.history.type_of(payload),
        payload=payload,
        at_ms=1,
        epoch=0,
    )


def test_the_fold_refuses_success_over_an_unresolved_child() -> None:
    s = RunState(run_id="p")
    apply(s, _ev(s, RunStarted(workflow="w", version="1")))
    apply(s, _ev(s, ChildEnded(child_run_id="p.c", outcome=Outcome.UNRESOLVED, seq=9)))
    with pytest.raises(TransitionError, match="no success over them"):
        apply(s, _ev(s, RunFinished(outcome=Outcome.SUCCEEDED)))
    apply(s, _ev(s, ChildEnded(child_run_id="p.c", outcome=Outcome.SUCCEEDED, seq=12)))
    apply(s, _ev(s, RunFinished(outcome=Outcome.SUCCEEDED)))
    assert s.outcome is Outcome.SUCCEEDED


@torpor.workflow("kids.async")
async def async_parent(run: torpor.Run, xs: list[int]) -> Any:
    kids = [await run.aspawn("kids.leaf", x, name=f"leaf{x}") for x in xs]
    res = await run.await_children(kids, until="all")
    one = await run.achild("kids.leaf", 10)
    return [r.result for r in res] + [one.result]


def test_the_async_forms(rt: torpor.Runtime) -> None:
    res = rt.run("kids.async", [1, 2], run_id="as1")
    assert (res.outcome, res.result) == ("succeeded", [1, 4, 100]), res
    ids = [r.run_id for r in torpor.Client(rt.store).children("as1")]
    assert ids == ["as1.child:leaf1", "as1.child:leaf2", "as1.child:kids.leaf"]


def test_the_console_run_page_lists_children_and_the_parent(rt: torpor.Runtime) -> None:
    from pathlib import Path

    import jinja2

    from torpor.console import pages

    rt.run("kids.fan", [1, 2], run_id="cp1")
    c = torpor.Client(rt.store)
    data = pages.run_page(c, "cp1", None)
    assert [r.run_id for r in data["children"]] == [
        "cp1.child:kids.leaf",
        "cp1.child:kids.leaf#2",
    ]
    assert data["parent"] is None
    assert pages.run_page(c, "cp1.child:kids.leaf", None)["parent"] == "cp1"
    folder = Path(pages.__file__).parent / "templates"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(folder), autoescape=True)
    env.filters.update(pathq=str, size=str, qs=str)
    env.get_template("run_page.html")  # the section parses
