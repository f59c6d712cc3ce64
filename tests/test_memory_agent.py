"""An agent with a bounded working memory, on both stores (issue 17): the long agent
(examples/long_agent: a scripted ReAct model reading real notes files) stays within its token
budget for every model call while its buffer is compacted; a run killed with SIGKILL and
resumed builds the very context an uninterrupted run builds, without replaying earlier model
turns; a run resumed under another model continues without repeating finished steps and its
first context holds the summary and the checkpoint; a failed summary changes nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import torpor
from torpor.agents.models import Message, ScriptedModel, TokenUsage
from torpor.errors import ModelUnavailableError
from torpor.memory import ModelSummarizer, estimate_request
from torpor.memory.working import AgentSnapshot

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the examples package lives at the repository root
    sys.path.insert(0, str(ROOT))

from examples.long_agent.agent import make_agent, tools  # noqa: E402
from examples.long_agent.script import make_script  # noqa: E402

from memory_kit import contexts, fresh, killed_child, payloads, tool_pairs_whole, world  # noqa: E402

TURNS = 40
BUDGET = 2500


def _run(
    url: str, agent: torpor.Agent, rid: str, turns: int = TURNS, outcome: str = "succeeded"
) -> torpor.Client:
    with torpor.Runtime(url) as rt:
        # Each run in a scope of its own: none is given another's lessons (episodes), so the
        # contexts of two runs of one agent compare.
        res = rt.run(agent, {"turns": turns, "seed": 7}, run_id=rid, scope=rid)
        assert res.outcome == outcome, res
    return torpor.Client(url)


def test_long_run_stays_within_budget_and_compacts_keeping_calls_whole(
    store_url: str, tmp_path: Path
) -> None:
    world(tmp_path, TURNS)
    agent = make_agent(fresh("bounded"), budget_tokens=BUDGET)
    with contexts() as seen:
        client = _run(store_url, agent, "long")
    script = make_script(TURNS)
    assert sorted(seen) == list(range(TURNS))  # one model call per turn, none repeated
    specs = tools.specs()
    for turn, msgs in seen.items():
        assert estimate_request(msgs, specs) <= BUDGET, turn
        assert tool_pairs_whole(msgs), turn
    built = payloads(client, "long", "context_built")
    assert len(built) == TURNS and all(b.total_tokens <= BUDGET for b in built)
    assert {"goal", "summary", "plan", "checkpoint", "buffer"} <= set(built[-1].sections)
    compacted = payloads(client, "long", "context_compacted")
    assert len(compacted) >= 5
    assert [c.number for c in compacted] == list(range(1, len(compacted) + 1))
    assert all(c.buffer_tokens_after < c.buffer_tokens_before for c in compacted)
    # The latest operator message is in every context from its turn on.
    ops = [f for f in script.facts if f.kind == "operator"]
    for turn, msgs in seen.items():
        latest = [f for f in ops if f.turn <= turn]
        if latest:
            text = "\n".join(m.content for m in msgs)
            assert latest[-1].text in text, (turn, latest[-1].text)
    # Context stays flat while the transcript grows.
    late = [estimate_request(seen[t]) for t in range(TURNS // 2, TURNS)]
    assert max(late) <= BUDGET and compacted[-1].summary_tokens > 0


@pytest.mark.slow
def test_a_killed_run_resumes_from_its_checkpoint_with_the_uninterrupted_context(
    store_url: str, tmp_path: Path
) -> None:
    world(tmp_path, TURNS)
    name = fresh("resume")
    agent = make_agent(name, budget_tokens=BUDGET)
    with contexts() as straight:
        _run(store_url, agent, "straight")
    # The same run, killed right after its 25th checkpoint (past several compactions).
    killed_child(
        tmp_path,
        store_url,
        name=name,
        rid="killed",
        turns=TURNS,
        budget=BUDGET,
        crash_at="checkpoint.saved@25",
    )
    client = torpor.Client(store_url)
    snap = AgentSnapshot.model_validate(client.state("killed").user_state)
    assert snap.compactions >= 2 and snap.turn >= 20
    with contexts() as resumed, torpor.Runtime(store_url) as rt:
        assert rt.resume("killed").outcome == "succeeded"
    first = min(resumed)
    # No earlier model turn was replayed through the model, and every context from the first
    # new call on is exactly the uninterrupted run's.
    done = snap.summary.model_turns_folded + sum(u.kind == "model" for u in snap.buffer.units)
    assert first == done and first > 15
    assert sorted(resumed) == list(range(first, TURNS))
    for turn in resumed:
        assert resumed[turn] == straight[turn], turn
    for rid in ("straight", "killed"):
        called = payloads(client, rid, "model_called")
        assert len(called) == TURNS  # each turn paid for once
    assert client.state("killed").result == client.state("straight").result


@pytest.mark.slow
def test_resumed_under_another_model_with_a_compacted_context(
    store_url: str, tmp_path: Path
) -> None:
    world(tmp_path, TURNS)
    name = fresh("switch")
    killed_child(
        tmp_path,
        store_url,
        name=name,
        rid="switch",
        turns=TURNS,
        budget=BUDGET,
        crash_at="memory.compacted@3",
        model="scripted-a",
    )
    client = torpor.Client(store_url)
    before = payloads(client, "switch", "model_called")
    assert before and {c.model for c in before} == {"scripted-a"}
    agent = make_agent(name, budget_tokens=BUDGET, model_id="scripted-b")
    with contexts() as seen, torpor.Runtime(store_url) as rt:
        assert rt.resume("switch").outcome == "succeeded"
    called = payloads(client, "switch", "model_called")
    assert len(called) == TURNS  # no model turn repeated
    after = called[len(before) :]
    assert after and {c.model for c in after} == {"scripted-b"}
    # No finished step ran again: every tool step completed once.
    tool_steps = [
        e.payload.step_id
        for e in client.events("switch")
        if e.type == "step_completed" and e.payload.step_id.startswith("tool:")
    ]
    failed = sum(f.kind == "failed" for f in make_script(TURNS).facts)  # reads a missing file
    assert len(tool_steps) == len(set(tool_steps)) == TURNS - 1 - failed
    first = seen[min(seen)]
    system = first[0].content
    assert "earlier turns summarized" in system and "## checkpoint" in system
    assert "establishing:" in system and "## plan" in system
    assert agent.name == name


class _Failing:
    model_id = "summarizer-down"

    def complete(self, messages, tools=()):  # type: ignore[no-untyped-def]
        raise ModelUnavailableError(self.model_id, "connection refused")


def test_a_failed_summary_changes_nothing_and_the_budget_still_holds(
    store_url: str, tmp_path: Path
) -> None:
    turns = 16
    world(tmp_path, turns)
    empty = ScriptedModel([Message(role="assistant", content="  \n")] * 100, model_id="empty")
    for summarizer, rid in ((_Failing(), "down"), (empty, "empty")):
        agent = make_agent(
            fresh("nosummary"), budget_tokens=BUDGET, summarizer=ModelSummarizer(summarizer)
        )
        with contexts() as seen:
            client = _run(store_url, agent, rid, turns, "succeeded_with_warnings")
        assert payloads(client, rid, "context_compacted") == []
        warned = [w.message for w in payloads(client, rid, "warning_recorded")]
        assert warned and all("compaction skipped, the buffer is unchanged" in w for w in warned)
        snap = AgentSnapshot.model_validate(client.state(rid).user_state)
        # Every turn is still in the buffer; the summary is empty, never an error text.
        assert [u.turn for u in snap.buffer.units] == list(range(1, snap.turn + 1))
        assert snap.summary.text() == "" and snap.failed_summaries == len(warned)
        built = payloads(client, rid, "context_built")
        assert all(b.total_tokens <= BUDGET for b in built)
        assert "buffer" in built[-1].cut  # the oldest turns left the context, not the record
        assert all(tool_pairs_whole(m) for m in seen.values())


def test_a_model_summarizer_is_a_recorded_call_paid_once(store_url: str, tmp_path: Path) -> None:
    turns = 16
    world(tmp_path, turns)
    writer = ScriptedModel(
        [
            lambda msgs, tools: Message(
                role="assistant", content="- read the notes so far\n- nothing failed"
            )
        ]
        * 100,
        model_id="summarizer-1",
        usage=TokenUsage(input_tokens=300, output_tokens=12),
    )
    agent = make_agent(fresh("modelsum"), budget_tokens=BUDGET, summarizer=ModelSummarizer(writer))
    client = _run(store_url, agent, "ms", turns)
    compacted = payloads(client, "ms", "context_compacted")
    assert compacted and all(c.summarizer == "summarizer-1" for c in compacted)
    summarize_calls = [
        c for c in payloads(client, "ms", "model_called") if c.model == "summarizer-1"
    ]
    assert len(summarize_calls) == len(writer.calls) == len(compacted)
    snap = AgentSnapshot.model_validate(client.state("ms").user_state)
    assert "read the notes so far" in snap.summary.text()


def test_reported_input_tokens_calibrate_the_budget(store_url: str, tmp_path: Path) -> None:
    """A provider that counts more input tokens than the estimate: the ratio is kept and the
    next contexts are built within the budget divided by it."""
    turns = 8
    world(tmp_path, turns)
    agent = make_agent(
        fresh("calibrated"),
        budget_tokens=BUDGET,
        usage=TokenUsage(input_tokens=400, output_tokens=30),
    )
    with contexts() as seen:
        client = _run(store_url, agent, "cal", turns)
    first = estimate_request(seen[0], tools.specs())
    ratio = 400 / first
    assert ratio > 1.5
    built = payloads(client, "cal", "context_built")
    assert built[0].budget_tokens == BUDGET
    assert all(b.budget_tokens == int(BUDGET / ratio) for b in built[1:])
    assert all(b.total_tokens <= b.budget_tokens for b in built)
    snap = AgentSnapshot.model_validate(client.state("cal").user_state)
    assert snap.calibration.ratio == ratio and snap.calibration.observed == turns - 1


BIG = """
import torpor
from torpor.agents.models import ScriptedModel, say, use
from torpor.memory import Memory

tools = torpor.Tools()


@tools.tool
def big(i: int) -> dict:
    return {"i": i, "blob": f"{i}:" + "x" * 300_000}


def whole(ctx):
    res = ctx.results()
    return sorted(v["i"] for v in res.values()) == list(range(6)) and all(
        len(v["blob"]) > 300_000 for v in res.values()
    )


agent = torpor.Agent(
    "test.memory.big",
    goal="collect six large results",
    tools=tools,
    planner=torpor.ReActPlanner(
        ScriptedModel([use(("big", {"i": k})) for k in range(6)] + [say("done")])
    ),
    criteria={"whole": whole},
    memory=Memory(budget_tokens=3000),
)
"""


@pytest.mark.slow
def test_large_observations_stay_in_the_history_and_come_back_on_resume(
    store_url: str, tmp_path: Path
) -> None:
    """Six results of 300 KB: the checkpoints stay far below the payload limit (large
    observations are read back from the history on resume), and a verifier still sees every
    result whole — those compaction took out of the view too — after a SIGKILL."""
    from conftest import run_python

    (tmp_path / "bigflow.py").write_text(BIG)
    code = (
        "import torpor, bigflow\n"
        f"with torpor.Runtime({store_url!r}) as rt:\n"
        "    rt.run(bigflow.agent, {}, run_id='big')\n"
    )
    proc = run_python(code, cwd=tmp_path, env={"TORPOR_FAULTS": "crash:checkpoint.saved@5"})
    assert proc.returncode == -9, proc.stderr[-2000:]
    sys.path.insert(0, str(tmp_path))
    try:
        import bigflow  # type: ignore[import-not-found]

        with torpor.Runtime(store_url) as rt:
            res = rt.resume("big")
    finally:
        sys.path.remove(str(tmp_path))
    assert res.outcome == "succeeded", res
    client = torpor.Client(store_url)
    assert [v.passed for v in payloads(client, "big", "verification_recorded")] == [True]
    snap = AgentSnapshot.model_validate(client.state("big").user_state)
    assert snap.retired and all("@v" in r for r in snap.retired)  # compaction retired calls
    sizes = [
        len(json.dumps(e.payload.state))
        for e in client.events("big")
        if e.type == "checkpoint_saved"
    ]
    assert len(sizes) == 6 and max(sizes) < 64_000
    assert bigflow.agent.name == "test.memory.big"


def test_the_context_holds_excerpts_of_the_artifacts_the_plan_names(
    store_url: str, tmp_path: Path
) -> None:
    """An artifact named by sha256 in the current plan's arguments: its excerpt is a section of
    the next context (and only that one)."""
    tools = torpor.Tools()

    @tools.tool
    def review(spec: str) -> dict:
        return {"reviewed": spec[:12]}

    seen: list[list[Message]] = []

    class Reviewer(torpor.CodePlanner):
        def __init__(self) -> None:
            super().__init__(lambda view: None, name="reviewer")

        def propose(self, ctx):  # type: ignore[no-untyped-def]
            if ctx.view().steps:
                seen.append(ctx.conversation())
                return torpor.Proposal.finish("reviewed")
            ctx.run.artifact("other", "not needed")
            ref = ctx.run.artifact("spec", "SPEC: the parser keeps unicode paths.\\n" * 3)
            return torpor.Proposal(steps=[torpor.step("r1", "review", spec=ref.sha256)])

    agent = torpor.Agent(
        fresh("artifacts"), goal="review the spec", tools=tools, planner=Reviewer()
    )
    with torpor.Runtime(store_url) as rt:
        assert rt.run(agent, None, run_id="arts").outcome == "succeeded"
    system = seen[0][0].content
    assert "## artifacts" in system and "SPEC: the parser keeps unicode paths." in system
    assert "not needed" not in system
