"""G9 for an agent's working memory (issue 17, adversarial review defect 8): a run killed with
SIGKILL between a tool call's recorded outcome and the next checkpoint (or after a model call,
a plan or a compaction was recorded), then resumed, records the very contexts and compactions
an uninterrupted run records — the replayed outcome keeps the step that ran the call
(``tool:<call>@v<n>``, not its ``settle:`` step); every checkpoint restores to the state it was
taken from; and every dict in the working memory is read the same whether it came from this
process or from the store (canonical JSON has its keys sorted)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import torpor
from torpor import serde
from torpor.agents.calls import executed_by
from torpor.agents.working import WorkingMemory
from torpor.memory.buffer import CallItem, Unit
from torpor.memory.working import AgentSnapshot, next_context

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the examples package lives at the repository root
    sys.path.insert(0, str(ROOT))

from examples.long_agent.agent import make_agent  # noqa: E402

from memory_kit import contexts, fresh, killed_child, payloads, world  # noqa: E402

TURNS = 24
BUDGET = 2500


def _compare(client: torpor.Client, a: str, b: str) -> None:
    def key(rid: str, etype: str) -> list[object]:
        return [p.model_dump(mode="json") for p in payloads(client, rid, etype)]

    for etype in ("context_built", "context_compacted", "tool_call_settled", "model_called"):
        left, right = key(a, etype), key(b, etype)
        assert len(left) == len(right), etype
        for i, (x, y) in enumerate(zip(left, right, strict=True)):
            assert x == y, (etype, i, x, y)
    assert client.state(a).result == client.state(b).result


@pytest.mark.slow
@pytest.mark.parametrize(
    "crash_at",
    [
        "agent.tool.settled@6",  # (the reviewer's case: before the fix the summary said settle:)
        "model.recorded@11",
        "agent.plan.recorded@9",
        "memory.compacted@2",
    ],
)
def test_killed_after_a_tool_outcome_resumes_to_the_uninterrupted_record(
    store_url: str, tmp_path: Path, crash_at: str
) -> None:
    world(tmp_path, TURNS)
    name = fresh("equal")
    agent = make_agent(name, budget_tokens=BUDGET)
    with torpor.Runtime(store_url) as rt:
        assert rt.run(agent, {"turns": TURNS, "seed": 7}, run_id="straight").outcome == "succeeded"
    killed_child(
        tmp_path,
        store_url,
        name=name,
        rid="killed",
        turns=TURNS,
        budget=BUDGET,
        crash_at=crash_at,
    )
    with contexts(), torpor.Runtime(store_url) as rt:
        assert rt.resume("killed").outcome == "succeeded"
    _compare(torpor.Client(store_url), "straight", "killed")


def _wire(messages: list[Any]) -> str:
    """The messages as bytes on the wire: JSON in the dicts' own order (not sorted)."""
    return json.dumps([m.model_dump(mode="json") for m in messages])


def test_every_checkpoint_restores_to_the_state_it_was_taken_from(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At each checkpoint of a long run (compactions, failed reads, operator messages), the
    state a resumed process rebuilds from it — the checkpoint read back from the store, then
    :meth:`WorkingMemory.load` — snapshots to the same data, and builds the same next context,
    byte for byte, as the state it was taken from."""
    world(tmp_path, TURNS)
    agent = make_agent(fresh("load"), budget_tokens=BUDGET)
    seen: list[int] = []
    problems: list[str] = []
    save = WorkingMemory.save

    def checked(self: WorkingMemory, need_plan: bool) -> None:
        save(self, need_plan)
        if self.legacy:
            return
        here = self.snapshot(need_plan)
        raw = serde.loads(serde.dumps(self.ctx.run.restore(None)))  # as the store reads it
        other = WorkingMemory(copy.copy(self.ctx))
        other.load(AgentSnapshot.model_validate(raw))
        back = other.snapshot(need_plan)
        mine = next_context(here, instructions=self.instructions, extra=here.extra_sections())
        theirs = next_context(back, instructions=self.instructions, extra=back.extra_sections())
        if back.model_dump(mode="json") != here.model_dump(mode="json"):
            problems.append(f"turn {self.turn}: the restored state snapshots differently")
        if serde.dumps(raw) != serde.dumps(here.model_dump(mode="json")):
            problems.append(f"turn {self.turn}: the checkpoint is not the state's snapshot")
        if _wire(mine.messages) != _wire(theirs.messages):
            problems.append(f"turn {self.turn}: the restored state builds another context")
        seen.append(self.turn)

    monkeypatch.setattr(WorkingMemory, "save", checked)
    with torpor.Runtime(store_url) as rt:
        assert rt.run(agent, {"turns": TURNS, "seed": 7}, run_id="load").outcome == "succeeded"
    assert not problems, problems[:3]
    client = torpor.Client(store_url)
    assert len(seen) >= TURNS - 2
    assert payloads(client, "load", "context_compacted")  # compacted state restored too


def test_call_arguments_in_any_key_order_send_the_same_bytes() -> None:
    """A model's arguments in its own key order, and the same unit read back from a
    checkpoint (canonical JSON: keys sorted), give the same messages on the wire."""
    unit = Unit(
        turn=3,
        kind="model",
        text="reading",
        calls=[
            CallItem(
                call_id="c",
                tool_call_id="c",
                tool="t",
                args={"z": 1, "a": {"y": 2, "b": [{"q": 1, "p": 2}]}},
            )
        ],
    )
    back = Unit.model_validate(serde.loads(serde.dumps(unit.model_dump(mode="json"))))
    assert _wire(unit.messages()) == _wire(back.messages())


def test_an_outcome_recorded_before_it_named_its_step_replays_with_the_step_that_ran() -> None:
    """Outcomes recorded before the settle step kept ``executed_by``: a succeeded or failed
    call ran in its ``tool:`` step (the fold requires a step for those), the others in none."""
    assert executed_by({"outcome": "succeeded", "observation": 1}, "c@v2") == "tool:c@v2"
    assert executed_by({"outcome": "failed", "observation": {}}, "c@v2") == "tool:c@v2"
    assert executed_by({"outcome": "invalid", "observation": {}}, "c@v2") is None
    assert executed_by({"outcome": "skipped", "executed_by": None}, "c@v2") is None
    assert executed_by({"outcome": "succeeded", "executed_by": "tool:x@v1"}, "c@v2") == "tool:x@v1"


@pytest.mark.slow
def test_outcomes_offloaded_to_the_artifact_store_replay_the_same(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a small inline limit the tool outcomes are recorded as references to the artifact
    store (issue 22); a resume after a SIGKILL reads them back, not the references."""
    monkeypatch.setenv("TORPOR_INLINE_VALUE_BYTES", "300")  # the child's limit
    monkeypatch.setattr(serde, "INLINE_VALUE_BYTES", 300)  # this process's
    world(tmp_path, TURNS)
    name = fresh("offload")
    agent = make_agent(name, budget_tokens=BUDGET)
    with torpor.Runtime(store_url) as rt:
        assert rt.run(agent, {"turns": TURNS, "seed": 7}, run_id="straight").outcome == "succeeded"
    killed_child(
        tmp_path,
        store_url,
        name=name,
        rid="killed",
        turns=TURNS,
        budget=BUDGET,
        crash_at="agent.tool.settled@6",
    )
    with torpor.Runtime(store_url) as rt:
        assert rt.resume("killed").outcome == "succeeded"
    _compare(torpor.Client(store_url), "straight", "killed")
