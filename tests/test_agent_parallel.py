"""Parallel tool calls in one run (issue 38, item 1): ready calls with no dependency between
them run side by side up to ``Agent(max_parallel=N)``, each recorded as its own step when it
ends, their outcomes settled — and handed back — in plan order, never completion order; a
process killed mid-batch redoes only the calls that had not finished."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import torpor
from conftest import HANG_S, run_python
from torpor.agents.models.scripted import ScriptedModel, say, use
from torpor.agents.planners import CodePlanner
from torpor.agents.proposals import ProposedStep
from torpor.errors import TorporError

# ------------------------------------------------------------------ order, in one process

STORE: list[str] = []
tools = torpor.Tools()


def _recorded(step: str) -> bool:
    events = torpor.Client(STORE[0]).events(STORE[1])
    return any(e.type == "step_completed" and e.payload.step_id == step for e in events)


@tools.tool(policy="read")
def chain(name: str, after: str | None = None) -> str:
    """Finish only once ``after``'s completion is recorded: c2 first, then c1, then c0 (run
    one by one, c0 would wait forever: the batch is what lets it finish)."""
    deadline = time.monotonic() + HANG_S
    while after is not None and not _recorded(f"tool:{after}@v1"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: {after} never finished (the calls did not overlap)")
        time.sleep(0.01)
    return f"{name} done"


def _plan(view: Any) -> Any:
    if view.version:
        # What the planner is handed back: the plan's order.
        return torpor.Proposal.finish(
            " | ".join(
                f"{s.call_id}={s.observation if s.status == 'succeeded' else s.status}"
                for s in view.steps
            )
        )
    return [
        ProposedStep(call_id="c0", tool="chain", args={"name": "c0", "after": "c1"}),
        ProposedStep(call_id="c1", tool="chain", args={"name": "c1", "after": "c2"}),
        ProposedStep(call_id="c2", tool="chain", args={"name": "c2"}),
        ProposedStep(call_id="bad", tool="no-such-tool", args={}),
    ]


ordered = torpor.Agent(
    "parallel.order",
    goal="three calls at once",
    tools=tools,
    planner=CodePlanner(_plan),
    max_parallel=4,
)


def test_calls_overlap_and_settle_in_plan_order(store_url: str) -> None:
    STORE[:] = [store_url, "par-order"]
    with torpor.Runtime(store_url) as rt:
        res = rt.run(ordered, {}, run_id="par-order")
        events = torpor.Client(rt.store).events("par-order")
    assert res.outcome == "succeeded", res
    assert res.result["final"] == "c0=c0 done | c1=c1 done | c2=c2 done | bad=invalid"
    finished = [
        e.payload.step_id
        for e in events
        if e.type == "step_completed" and e.payload.step_id.startswith("tool:")
    ]
    assert finished == ["tool:c2@v1", "tool:c1@v1", "tool:c0@v1"]  # as each ended
    settled = [e.payload.call_id for e in events if e.type == "tool_call_settled"]
    assert settled == ["c0", "c1", "c2", "bad"]  # as the plan named them
    st = torpor.Client(store_url).state("par-order")
    assert st.usage.tool_calls == 3 and st.plan["bad"].status == "invalid"


def test_a_models_parallel_tool_calls_overlap_and_come_back_in_its_order(db_url: str) -> None:
    # One model turn asks for three calls; each finishes only after the next one's completion
    # is recorded, so they finish last-first; the model's next turn gets them in its order.
    model = ScriptedModel(
        [
            use(
                ("chain", {"name": "call-0-0", "after": "call-0-1"}),
                ("chain", {"name": "call-0-1", "after": "call-0-2"}),
                ("chain", {"name": "call-0-2"}),
            ),
            say("all three done"),
        ]
    )
    agent = torpor.Agent(
        "parallel.react",
        goal="three at once",
        tools=tools,
        planner=torpor.ReActPlanner(model),
        max_parallel=3,
    )
    STORE[:] = [db_url, "par-react"]
    with torpor.Runtime(db_url) as rt:
        res = rt.run(agent, {}, run_id="par-react")
    assert res.outcome == "succeeded" and res.result["final"] == "all three done", res
    answers = [(m.tool_call_id, m.content) for m in model.calls[1] if m.role == "tool"]
    assert [a[0] for a in answers] == ["call-0-0", "call-0-1", "call-0-2"], answers
    assert all(f"{cid} done" in text for cid, text in answers), answers


def test_max_parallel_is_checked() -> None:
    with pytest.raises(TorporError, match="max_parallel must be an int >= 1"):
        torpor.Agent(
            "parallel.bad", goal="g", tools=tools, planner=CodePlanner(_plan), max_parallel=0
        )


# ------------------------------------------------------------------ killed mid-batch

MODULE = '''
import json, os, signal, time

import torpor
from torpor.agents.models.scripted import ScriptedModel, say, use
from torpor.agents.planners import CodePlanner
from torpor.agents.proposals import ProposedStep

LEDGER = os.environ["PAR_LEDGER"]
DB = os.environ["PAR_DB"]


def ledger(kind, **fields):
    with open(LEDGER, "a") as f:
        f.write(json.dumps({"kind": kind, "pid": os.getpid(), **fields}) + "\\n")
        f.flush()
        os.fsync(f.fileno())


def rows(kind):
    if not os.path.exists(LEDGER):
        return []
    with open(LEDGER) as f:
        return [r for r in map(json.loads, filter(str.strip, f)) if r["kind"] == kind]


def hold(what):
    """In the first process: wait until c0 is recorded complete and c1 applied, then SIGKILL
    this process (c2 and c3 are still running)."""
    if not os.environ.get("PAR_KILL"):
        return
    ledger("holding", what=what)
    client = torpor.Client(DB)
    for _ in range(3000):
        done = {e.payload.step_id for e in client.events("par-kill") if e.type == "step_completed"}
        if "tool:c0@v1" in done and any(r["item"] == "c1" for r in rows("post")) and \\
                len(rows("holding")) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.01)
    raise RuntimeError("c0 never recorded")


tools = torpor.Tools()


@tools.tool(policy="read")
def fetch(item: str) -> str:
    ledger("fetch", item=item)
    if item == "c3":
        hold(item)
    return f"fetched {item}"


def find_post(call):
    hit = [r for r in rows("post") if r["key"] == call.idempotency_key]
    return torpor.Applied(f"posted {hit[0]['item']}") if hit else torpor.Absent()


@tools.tool(policy="effect", reconcile=find_post)
def post(item: str, idempotency_key: str) -> str:
    ledger("attempt", item=item)
    if item == "c2":
        hold(item)  # killed before it applied anything
    ledger("post", item=item, key=idempotency_key)
    return f"posted {item}"


def plan(view):
    if view.version:
        return torpor.Proposal.finish(",".join(str(s.observation) for s in view.steps))
    return [
        ProposedStep(call_id="c0", tool="fetch", args={"item": "c0"}),
        ProposedStep(call_id="c1", tool="post", args={"item": "c1"}),
        ProposedStep(call_id="c2", tool="post", args={"item": "c2"}),
        ProposedStep(call_id="c3", tool="fetch", args={"item": "c3"}),
    ]


agent = torpor.Agent("parallel.kill", goal="four calls at once", tools=tools,
                     planner=CodePlanner(plan), max_parallel=4)
'''

DRIVER = """
import dataclasses, json, torpor, parmod
rt = torpor.Runtime({db!r})
res = rt.resume("par-kill") if {resume!r} else rt.run(parmod.agent, {{}}, run_id="par-kill")
print("RESULT " + json.dumps(dataclasses.asdict(res)), flush=True)
"""


@pytest.mark.proc
def test_killed_mid_batch_redoes_only_the_unfinished(tmp_path: Path, db_url: str) -> None:
    (tmp_path / "parmod.py").write_text(MODULE)
    ledger = tmp_path / "ledger.jsonl"
    env = {"PAR_LEDGER": str(ledger), "PAR_DB": db_url}
    first = run_python(
        DRIVER.format(db=db_url, resume=False), cwd=tmp_path, env={**env, "PAR_KILL": "1"}
    )
    assert first.returncode == -signal.SIGKILL, first.stdout + first.stderr
    before = [json.loads(x) for x in ledger.read_text().splitlines()]
    second = run_python(DRIVER.format(db=db_url, resume=True), cwd=tmp_path, env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    res = json.loads(second.stdout.split("RESULT ", 1)[1])
    assert res["outcome"] == "succeeded", res
    assert res["result"]["final"] == "fetched c0,posted c1,posted c2,fetched c3"
    rows = [json.loads(x) for x in ledger.read_text().splitlines()]
    after = rows[len(before) :]

    def items(kind: str, part: list[dict[str, Any]]) -> list[str]:
        return sorted(r["item"] for r in part if r["kind"] == kind)

    # Before the kill all four had started; c0 and c1 had finished (c1's effect applied).
    assert items("fetch", before) == ["c0", "c3"] and items("attempt", before) == ["c1", "c2"]
    assert items("post", before) == ["c1"]
    # The resume redid only the unfinished: c3 read again, c2 performed once (reconciled
    # absent first); c0 was not read again, c1 not posted again (recorded, or reconciled).
    assert items("fetch", after) == ["c3"] and items("attempt", after) == ["c2"]
    assert items("post", rows) == ["c1", "c2"]
    events = torpor.Client(db_url).events("par-kill")
    settled = [e.payload.call_id for e in events if e.type == "tool_call_settled"]
    assert settled == ["c0", "c1", "c2", "c3"]
