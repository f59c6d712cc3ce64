"""One budget for a tree of runs (issue 38, item 2; G14): a grandchild agent with no budget
of its own draws from the root's; when the tree has used the root's steps the grandchild ends
``blocked`` (durably, naming the root's limit), its parent's wait says so, the root's
accounting shows it, and raising the root's budget reopens it — on both backends."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

import torpor
from torpor.agents.planners import CodePlanner
from torpor.agents.proposals import ProposedStep
from torpor.cli import app
from torpor.engine import budgets
from torpor.history import Budget

RAN: list[int] = []
tools = torpor.Tools()


@tools.tool(policy="read")
def count(i: int) -> int:
    RAN.append(i)
    return i


def _plan(view: Any) -> Any:
    if view.version:
        return None
    return [ProposedStep(call_id=f"c{i}", tool="count", args={"i": i}) for i in range(8)]


# Three calls at a time: a batch takes no more calls than the tree's steps left.
leaf = torpor.Agent(
    "tb.leaf", goal="count to eight", tools=tools, planner=CodePlanner(_plan), max_parallel=3
)


@torpor.workflow("tb.mid")
def mid(run: torpor.Run, x: Any) -> Any:
    return run.child("tb.leaf", x).outcome


@torpor.workflow("tb.root")
def root(run: torpor.Run, x: Any) -> Any:
    budgets.set_limits(run.journal, Budget(steps=5), reason="five steps for the whole tree")
    return run.child("tb.mid", x).outcome


def test_grandchild_blocked_by_the_roots_budget_then_reopened(store_url: str) -> None:
    RAN.clear()
    with torpor.Runtime(store_url) as rt:
        res = rt.run("tb.root", 1, run_id="tb1")
        assert (res.status, res.wait_kind) == ("waiting", "children"), res
        client = torpor.Client(rt.store)
        (mid_rec,) = client.children("tb1")
        (gc_rec,) = client.children(mid_rec.run_id)
        gc = client.state(gc_rec.run_id)
        # The grandchild is blocked, durably, by the root's limit over the whole tree.
        assert gc.outcome == "blocked", gc.outcome_reason
        assert "steps: 5 used of 5 by the 3 runs of the tree of run tb1" in gc.outcome_reason
        assert "torpor budget tb1" in gc.outcome_reason
        assert sorted(RAN) == [0, 1, 2, 3, 4]  # batches of 3, then 2: the steps left
        # The cut is on the record (the tree's usage a replay reads is not the one it had).
        cuts = [
            e.payload.step_id
            for e in client.events(gc_rec.run_id)
            if e.type == "step_completed" and e.payload.step_id.startswith("cut:")
        ]
        assert cuts == ["cut:c5@v1"], cuts
        # Its parent waits and says why; the root's accounting shows the tree and the block.
        assert gc_rec.run_id in client.state(mid_rec.run_id).attention
        acc = budgets.account(rt.store, "tb1", rt.store.now_ms())
        assert (acc.runs, acc.steps, acc.budget.steps) == (3, 5, 5)
        assert list(acc.blocked) == [gc_rec.run_id]
        cli = CliRunner()
        show = cli.invoke(app, ["--db", store_url, "show", "tb1"], env={"COLUMNS": "250"})
        assert show.exit_code == 0, show.output
        assert "Tree budget (3 runs)" in show.output and "5 of 5" in show.output, show.output
        assert f"{gc_rec.run_id}: budget exhausted" in show.output, show.output
        data = cli.invoke(app, ["--db", store_url, "show", "tb1", "--json"])
        tree = json.loads(data.output)["tree_budget"]
        assert (tree["runs"], tree["steps"], list(tree["blocked"])) == (3, 5, [gc_rec.run_id])
        # Raising the root's budget reopens the grandchild; the tree goes on to its end.
        out = cli.invoke(
            app, ["--db", store_url, "budget", "tb1", "--steps", "20", "--as", "alice", "--json"]
        )
        assert out.exit_code == 0, out.output
        raised = json.loads(out.output)
        assert raised["reopened"] == [gc_rec.run_id]
        # What the limits are checked against: the tree's total, and the run's own part.
        assert (raised["tree"]["runs"], raised["tree"]["steps"], raised["usage"]["steps"]) == (
            3,
            5,
            0,
        )
        done = rt.resume("tb1")
        assert (done.status, done.outcome, done.result) == ("finished", "succeeded", "succeeded")
        assert sorted(RAN) == [0, 1, 2, 3, 4, 5, 6, 7]  # each call once, before and after the block
        assert client.state(gc_rec.run_id).outcome == "succeeded"
        acc = budgets.account(rt.store, "tb1", rt.store.now_ms())
        assert (acc.steps, acc.budget.steps, acc.blocked) == (8, 20, {})


sliced = torpor.Agent(
    "tb.sliced",
    goal="count, two steps of its own",
    tools=tools,
    planner=CodePlanner(_plan),
    budget=Budget(steps=2),
)


@torpor.workflow("tb.root2")
def root2(run: torpor.Run, x: Any) -> Any:
    budgets.set_limits(run.journal, Budget(steps=5))
    return run.child("tb.sliced", x).outcome


def test_a_slice_of_its_own_holds_the_child_and_is_not_raised_by_the_root(db_url: str) -> None:
    RAN.clear()
    with torpor.Runtime(db_url) as rt:
        assert rt.run("tb.root2", 1, run_id="tb2").status == "waiting"
        client = torpor.Client(rt.store)
        (kid,) = client.children("tb2")
        st = client.state(kid.run_id)
        # Its own slice (2 steps) stops it before the root's 5; the reason names its own limit.
        assert st.outcome == "blocked" and len(RAN) == 2, st.outcome_reason
        assert f"steps: 2 used of 2); raise it and resume: torpor budget {kid.run_id} " in (
            st.outcome_reason
        )
        # Raising the root's budget leaves it blocked: its own limit holds it, not the root's.
        out = CliRunner().invoke(app, ["--db", db_url, "budget", "tb2", "--steps", "50"])
        assert "reopened below" not in out.output, out.output
        # The limits are checked against the tree's total: shown with the run's own part.
        assert "steps         used 2 by the 2 runs of its tree (this run 0)  limit 50" in (
            out.output
        ), out.output
        # Raising its own slice lets it go on — until the root's limit over the tree.
        client.reopen(kid.run_id, "alice", steps=50)
        rt.resume("tb2")
        st = client.state(kid.run_id)
        assert st.outcome == "succeeded", st.outcome_reason
        assert len(RAN) == 8 and budgets.account(rt.store, "tb2", rt.store.now_ms()).steps == 8
