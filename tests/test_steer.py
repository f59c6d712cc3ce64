"""Steering a running agent (issue 39), in one process on both backends: operators' messages
sent while a model call is in flight reach the agent at its next boundary, once and in order,
recorded with their disposition; an interrupting one retracts the reply in flight (its tokens
counted, none of its tool calls run); one the run never reached is refused on the record.
(Crashes in between: tests/test_steer_kill.py.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import torpor
from torpor import Agent, Client, ReActPlanner, Runtime, Tools
from torpor.agents.models import Message, ScriptedModel, ToolSpec, say, use
from torpor.errors import InboxError, RunFinishedError

_n = 0


def fresh(name: str) -> str:
    global _n
    _n += 1
    return f"test.steer.{name}.{_n}"


def texts(messages: Sequence[Message]) -> str:
    return "\n".join(m.content for m in messages)


def kinds(client: Client, run_id: str) -> list[str]:
    return [e.type for e in client.events(run_id)]


def test_messages_sent_during_a_model_call_are_seen_at_the_next_boundary_once_in_order(
    store_url: str,
) -> None:
    ran: list[str] = []
    tools = Tools()

    @tools.tool
    def lookup(word: str) -> dict[str, Any]:
        """Look a word up."""
        ran.append(word)
        return {"word": word}

    rt = Runtime(store_url)
    client = Client(rt.store)

    def turn0(messages: Sequence[Message], specs: Sequence[ToolSpec]) -> Message:
        # While this call is in flight, two operators steer the run.
        client.steer("s1", "use the staging database, not prod", by="alice")
        client.steer("s1", "and keep the change under 10 lines", by="bob")
        return use(("lookup", {"word": "alpha"}))

    model = ScriptedModel([turn0, use(("lookup", {"word": "beta"})), say("done")])
    agent = Agent(fresh("queued"), goal="look words up", tools=tools, planner=ReActPlanner(model))
    try:
        res = rt.run(agent, {}, run_id="s1")
        assert res.outcome == "succeeded", res
        # The reply in flight was acted on (queued by default); the next call saw both, in order.
        assert ran == ["alpha", "beta"]
        first, second, third = (texts(m) for m in model.calls)
        assert "staging database" not in first
        a, b = second.index("use the staging database"), second.index("under 10 lines")
        assert a < b
        assert third.count("use the staging database") == 1  # kept, not repeated
        events = client.events("s1")
        taken = [e for e in events if e.type == "steer_taken"]
        assert len(taken) == 1
        got = [e.payload for e in events if e.type == "steer_received"]
        assert taken[0].payload.message_ids == [g.message_id for g in got]  # type: ignore[attr-defined]
        assert [g.by for g in got] == ["alice", "bob"]  # type: ignore[attr-defined]
        # Taken before the second model call was made (its boundary), after the first returned.
        order = [e.type for e in events if e.type in ("steer_taken", "model_called")]
        assert order == ["model_called", "steer_taken", "model_called", "model_called"]
        st = client.state("s1")
        assert [x.status for x in st.steering] == ["taken", "taken"]
        # The disposition people see: taken, by which boundary.
        views = {m.message_id: m for m in client.messages("s1")}
        assert all(views[g.message_id].status == "consumed" for g in got)  # type: ignore[attr-defined]
    finally:
        rt.close()


def test_an_interrupting_message_retracts_the_reply_in_flight_and_its_tokens_count(
    store_url: str,
) -> None:
    sent: list[str] = []
    tools = Tools()

    @tools.tool(policy="effect")
    def deploy(env: str, idempotency_key: str) -> dict[str, Any]:
        """Deploy."""
        sent.append(env)
        return {"deployed": env}

    rt = Runtime(store_url)
    client = Client(rt.store)

    def turn0(messages: Sequence[Message], specs: Sequence[ToolSpec]) -> Message:
        if "do not deploy to prod" in texts(messages):
            return say("stopped: told not to deploy to prod")
        client.steer("s2", "stop: do not deploy to prod", by="alice", interrupt=True)
        return use(("deploy", {"env": "prod"}))

    model = ScriptedModel([turn0])
    agent = Agent(fresh("interrupt"), goal="deploy", tools=tools, planner=ReActPlanner(model))
    try:
        res = rt.run(agent, {}, run_id="s2")
        assert res.outcome == "succeeded", res
        assert sent == []  # the retracted reply's tool call never ran
        assert len(model.calls) == 2
        events = client.events("s2")
        [retract] = [e.payload for e in events if e.type == "reply_retracted"]
        assert retract.step_id == "model"  # type: ignore[attr-defined]
        st = client.state("s2")
        assert st.usage.model_calls == 2  # the retracted call's tokens count
        assert st.usage.input_tokens == 200
        assert [e.type for e in events if e.type in ("reply_retracted", "steer_taken")] == [
            "reply_retracted",
            "steer_taken",
        ]
        assert "plan_recorded" not in kinds(client, "s2")  # no tool call of it was planned
    finally:
        rt.close()


def test_a_message_no_boundary_took_is_refused_when_the_run_ends(runtime: Runtime) -> None:
    client = Client(runtime.store)
    tools = Tools()

    def turn0(messages: Sequence[Message], specs: Sequence[ToolSpec]) -> Message:
        client.steer("s3", "too late for this one")
        return say("done")

    agent = Agent(
        fresh("late"), goal="g", tools=tools, planner=ReActPlanner(ScriptedModel([turn0]))
    )
    assert runtime.run(agent, {}, run_id="s3").outcome == "succeeded"
    [refused] = [e.payload for e in client.events("s3") if e.type == "message_refused"]
    assert refused.kind == "steer"  # type: ignore[attr-defined]
    assert "before a boundary took it" in refused.reason  # type: ignore[attr-defined]
    assert [x.status for x in client.state("s3").steering] == ["refused"]
    with pytest.raises(RunFinishedError):
        client.steer("s3", "hello?")
    with pytest.raises(InboxError, match="needs its text"):
        torpor.Client(runtime.store).steer("s3", "  ")


def test_a_steering_message_is_kept_as_an_instruction_in_the_fact_ledger(
    runtime: Runtime,
) -> None:
    """The latest operator message stays in the buffer; once a later one arrives, compaction
    folds the earlier and the ledger keeps it as an operator's instruction (with provenance);
    every later context holds both (G13)."""
    from torpor.memory import Memory

    client = Client(runtime.store)
    tools = Tools()

    @tools.tool
    def read_notes(page: int) -> str:
        """Read a page of notes."""
        return f"page {page}: " + "lorem ipsum dolor sit amet " * 40

    def turn(n: int) -> Any:
        def respond(messages: Sequence[Message], specs: Sequence[ToolSpec]) -> Message:
            if n == 0:
                client.steer("s4", "always answer in French from now on", by="alice")
            if n == 2:
                client.steer("s4", "and give every length in metres", by="bob")
            return use(("read_notes", {"page": n})) if n < 12 else say("fini")

        return respond

    model = ScriptedModel([turn(n) for n in range(13)])
    agent = Agent(
        fresh("ledger"),
        goal="read the notes",
        tools=tools,
        planner=ReActPlanner(model),
        memory=Memory(budget_tokens=1500),
    )
    assert runtime.run(agent, {}, run_id="s4").outcome == "succeeded"
    assert any(e.type == "context_compacted" for e in client.events("s4"))
    kept = [r for r in client.ledger("s4") if r.kind == "instruction"]
    assert [(r.source, "answer in French" in r.text) for r in kept] == [("operator", True)]
    for msgs in model.calls[1:]:  # pinned in every later context, folded or not
        assert "always answer in French" in texts(msgs)
    for msgs in model.calls[3:]:
        assert "every length in metres" in texts(msgs)


@torpor.workflow("test.steer.plain")
def plain_gate(run: torpor.Run, inp: object) -> object:
    return run.wait_for("go")


def test_a_plain_workflow_refuses_steering_at_send_time_and_on_the_record(
    runtime: Runtime,
) -> None:
    """A workflow function has no boundary before a model call: a steering message to its run
    is refused when sent (the workflow is known here), and one that got into the inbox anyway
    (a client that could not know) is refused on the record as the run takes it, never left
    pending (G11)."""
    client = Client(runtime.store)
    assert runtime.run(plain_gate, None, run_id="p1").status == "waiting"
    with pytest.raises(InboxError, match="not an agent"):
        client.steer("p1", "use staging")
    runtime.store.post_inbox("p1", "steer", {"text": "use staging"}, message_id="m1")
    client.signal("p1", "go", 7)
    assert runtime.resume("p1").outcome == "succeeded"
    [refused] = [e.payload for e in client.events("p1") if e.type == "message_refused"]
    assert refused.message_id == "m1"  # type: ignore[attr-defined]
    assert "rejected: not an agent" in refused.reason  # type: ignore[attr-defined]
    assert "steer_received" not in kinds(client, "p1")
    assert [m.status for m in client.messages("p1")] == ["refused", "consumed"]
