"""Agents in one process: replanning, budgets, invalid arguments, approvals bound to the exact
arguments, secrets kept out of the history, verifiers. (Crashes: tests/test_agent_kill.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import torpor
from torpor import (
    Agent,
    Budget,
    Client,
    CodePlanner,
    ModelJudge,
    PlanView,
    Proposal,
    ReActPlanner,
    Runtime,
    Secret,
    Tools,
    step,
)
from torpor.agents.models import Message, ScriptedModel, TokenUsage, say, use
from torpor.cli import app

_n = 0


def fresh(name: str) -> str:
    """A workflow name unique in this process (agents register workflows by name)."""
    global _n
    _n += 1
    return f"test.agent.{name}.{_n}"


def events_of(client: Client, run_id: str, etype: str) -> list[Any]:
    return [e.payload for e in client.events(run_id) if e.type == etype]


# ------------------------------------------------------------------ replanning


def test_replan_after_a_tool_failure_makes_plan_v2_and_keeps_finished_steps(
    runtime: Runtime, client: Client
) -> None:
    ran: list[str] = []
    tools = Tools()

    @tools.tool
    def fetch(source: str) -> list[int]:
        ran.append(f"fetch:{source}")
        return [3, 1, 2]

    @tools.tool(policy="compute", retry=None)
    def transform(rows: list[int], method: str) -> list[int]:
        ran.append(f"transform:{method}")
        if method == "fast":
            raise ValueError("fast path cannot sort")
        return sorted(rows)

    @tools.tool(policy="effect", requires_approval=True)
    def publish(rows: list[int], idempotency_key: str) -> dict[str, Any]:
        ran.append(f"publish:{rows}")
        return {"published": rows, "key": idempotency_key}

    def planner(view: PlanView) -> Proposal:
        if view.version == 0:
            return Proposal(
                steps=[
                    step("a", "fetch", source="db"),
                    step("b", "transform", after=["a"], rows=[3, 1, 2], method="fast"),
                    step("c", "publish", after=["b"], rows=[1, 2, 3]),
                ]
            )
        if view.status("b") == "failed" and view.get("b2") is None:
            return Proposal(
                steps=[
                    step("b2", "transform", after=["a"], rows=[3, 1, 2], method="careful"),
                    step("c", "publish", after=["b2"], rows=[1, 2, 3]),
                ],
                reason="the fast transform failed",
            )
        return Proposal.finish("published")

    agent = Agent(
        fresh("replan"),
        goal="publish sorted rows",
        tools=tools,
        planner=CodePlanner(planner),
        criteria={
            "published": lambda ctx: ctx.results().get("c", {}).get("published") == [1, 2, 3]
        },
    )
    res = runtime.run(agent, {"source": "db"}, run_id="replan")
    assert res.status == "waiting"  # the effect waits for its approval (bound to its arguments)
    client.decide("replan", None, "approve", "alice")
    res = runtime.resume("replan")  # replays v1 and v2 from the record, then publishes
    assert res.outcome == "succeeded", res.reason

    assert ran == ["fetch:db", "transform:fast", "transform:careful", "publish:[1, 2, 3]"]
    plans = events_of(client, "replan", "plan_recorded")
    assert [p.version for p in plans] == [1, 2]
    assert [s.call_id for s in plans[1].steps] == ["b2", "c"]
    settled = [(p.call_id, p.outcome) for p in events_of(client, "replan", "tool_call_settled")]
    assert settled == [("a", "succeeded"), ("b", "failed"), ("b2", "succeeded"), ("c", "succeeded")]
    st = client.state("replan")
    assert st.plan_version == 2
    assert {k: (v.status, v.version) for k, v in st.plan.items()} == {
        "a": ("succeeded", 1),
        "b": ("failed", 1),
        "b2": ("succeeded", 2),
        "c": ("succeeded", 2),
    }
    steps = {s.step_id: s for s in client.steps("replan")}
    assert steps["tool:a@v1"].attempts == 1 and "tool:a@v2" not in steps
    assert "tool:c@v1" not in steps  # planned under v1, superseded before it could run
    assert st.usage.tool_calls == 4 and st.result["plan_version"] == 2


# ------------------------------------------------------------------ budgets


def counting_tools(log: list[str]) -> Tools:
    tools = Tools()

    @tools.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        log.append(f"add({a},{b})")
        return a + b

    return tools


def test_budget_exhausted_blocks_and_raising_it_resumes(
    runtime: Runtime, client: Client, db_url: str
) -> None:
    log: list[str] = []
    model = ScriptedModel(
        [
            use(("add", {"a": 1, "b": 2})),
            use(("add", {"a": 3, "b": 4})),
            use(("add", {"a": 5, "b": 6})),
            say("the sums are 3, 7 and 11"),
        ],
        usage=TokenUsage(input_tokens=80, output_tokens=20),
        cost_usd=0.01,
    )
    agent = Agent(
        fresh("budget"),
        goal="add three pairs",
        tools=counting_tools(log),
        planner=ReActPlanner(model),
        criteria={"answered": lambda ctx: "11" in ctx.final},
        budget=Budget(tokens=250),
    )
    res = runtime.run(agent, None, run_id="budget")
    assert (res.status, res.outcome) == ("finished", "blocked")
    assert "budget exhausted (tokens: 300 used of 250)" in res.reason
    assert "torpor budget budget" in res.reason
    # Blocked before the third tool call: the model asked for it, it is pending, not lost.
    assert log == ["add(1,2)", "add(3,4)"] and len(model.calls) == 3
    st = client.state("budget")
    assert st.usage.tokens == 300 and st.usage.model_calls == 3 and st.budget.tokens == 250
    assert st.usage.cost_usd == pytest.approx(0.03)
    assert [v.status for v in st.plan.values()] == ["succeeded", "succeeded", "pending"]

    out = CliRunner().invoke(
        app, ["--db", db_url, "budget", "budget", "--tokens", "1000", "--as", "alice", "--json"]
    )
    assert out.exit_code == 0, out.output
    info = json.loads(out.output)
    assert info["usage"]["tokens"] == 300 and info["limits"]["tokens"] == 1000

    res = runtime.resume("budget")
    assert res.outcome == "succeeded", res.reason
    assert log == ["add(1,2)", "add(3,4)", "add(5,6)"]  # nothing repeated
    assert len(model.calls) == 4  # the three recorded calls were not made again
    st = client.state("budget")
    assert st.usage.tokens == 400 and st.budget.tokens == 1000
    reopened = events_of(client, "budget", "run_reopened")
    assert [r.by for r in reopened] == ["alice"]
    budgets = events_of(client, "budget", "budget_set")
    assert [(b.by, b.tokens) for b in budgets] == [("agent", 250), ("alice", 1000)]


def test_steps_budget_counts_model_and_tool_calls(runtime: Runtime, client: Client) -> None:
    log: list[str] = []
    model = ScriptedModel([use(("add", {"a": 1, "b": 1})), say("2")])
    agent = Agent(
        fresh("steps"),
        goal="add",
        tools=counting_tools(log),
        planner=ReActPlanner(model),
        budget=Budget(steps=2),
    )
    res = runtime.run(agent, None, run_id="steps")
    assert res.outcome == "blocked" and "steps: 2 used of 2" in res.reason
    assert log == ["add(1,1)"] and len(model.calls) == 1
    client.reopen("steps", "bob", steps=5)
    res = runtime.resume("steps")
    assert res.outcome == "succeeded", res.reason
    assert log == ["add(1,1)"] and len(model.calls) == 2
    with pytest.raises(torpor.errors.RunFinishedError, match="only a blocked run"):
        client.reopen("steps", "bob", steps=7)


def test_an_agents_run_records_the_module_that_built_it(runtime: Runtime, client: Client) -> None:
    """So `torpor resume RUN` imports it by itself, as for a plain workflow (it recorded
    torpor's own module, and a resume without --import found no such workflow)."""
    agent = Agent(
        fresh("where"),
        goal="add",
        tools=counting_tools([]),
        planner=ReActPlanner(ScriptedModel([say("2")])),
    )
    assert runtime.run(agent, None, run_id="where").outcome == "succeeded"
    assert client.state("where").module == __name__


# ------------------------------------------------------------------ invalid arguments


def test_invalid_arguments_go_back_to_the_model_and_nothing_runs(
    runtime: Runtime, client: Client
) -> None:
    log: list[str] = []
    model = ScriptedModel(
        [
            use(("add", {"a": "three", "b": 2}), ("nope", {}), ("add", {"a": 1})),
            use(("add", {"a": 3, "b": 2})),
            say("5"),
        ]
    )
    agent = Agent(
        fresh("invalid"),
        goal="add 3 and 2",
        tools=counting_tools(log),
        planner=ReActPlanner(model),
        criteria={"five": lambda ctx: ctx.final == "5"},
    )
    res = runtime.run(agent, None, run_id="invalid")
    assert res.outcome == "succeeded", res.reason
    assert log == ["add(3,2)"]  # the invalid calls executed nothing
    second = model.calls[1]
    results = [m for m in second if m.role == "tool"]
    assert [m.is_error for m in results] == [True, True, True]
    assert "a: Input should be a valid integer" not in results[0].content  # JSON, by field:
    err = json.loads(results[0].content)
    assert err["status"] == "invalid"
    assert {d["loc"] for d in err["detail"]["details"]} == {"a"}
    assert "unknown tool 'nope'" in results[1].content
    assert '"loc": "b"' in results[2].content and "Field required" in results[2].content
    settled = [p.outcome for p in events_of(client, "invalid", "tool_call_settled")]
    assert settled == ["invalid", "invalid", "invalid", "succeeded"]
    assert not [s for s in client.steps("invalid") if s.step_id.startswith("tool:call-0")]


# ------------------------------------------------------------------ approvals


def test_approved_arguments_changed_by_a_replan_need_a_new_approval(
    runtime: Runtime, client: Client
) -> None:
    deployed: list[str] = []
    tools = Tools()

    @tools.tool(policy="effect", requires_approval=lambda args: args["env"] == "prod", retry=None)
    def deploy(env: str, version: str, idempotency_key: str) -> dict[str, str]:
        if version == "1.0":
            raise torpor.EffectNotApplied("1.0 is not deployable: the window closed")
        deployed.append(f"{env}:{version}")
        return {"deployed": version}

    def planner(view: PlanView) -> Proposal:
        if view.version == 0:
            return Proposal(steps=[step("d", "deploy", env="prod", version="1.0")])
        if view.status("d") == "failed" and view.version == 1:
            return Proposal(steps=[step("d", "deploy", env="prod", version="1.1")])
        return Proposal.finish()

    agent = Agent(fresh("appr"), goal="deploy", tools=tools, planner=CodePlanner(planner))
    assert runtime.run(agent, None, run_id="appr").status == "waiting"
    (first,) = client.pending_approvals("appr").items()
    client.decide("appr", first[0], "approve", "alice")
    res = runtime.resume("appr")
    # v1's arguments were approved and consumed by the attempt that failed; v2 changed the
    # arguments, so the run waits for a new approval bound to the new arguments' hash.
    assert res.status == "waiting" and deployed == []
    (second,) = client.pending_approvals("appr").items()
    assert second[0] != first[0] and set(second[1]).isdisjoint(first[1])
    st = client.state("appr")
    assert st.approvals[first[0]].status == "consumed" and st.plan_version == 2
    arts = {a.name: a for a in client.artifacts("appr")}
    doc = json.loads(client.artifact_bytes(arts["tool-args/d@v2"].sha256))
    assert doc == {"tool": "deploy", "args": {"env": "prod", "version": "1.1"}}
    assert arts["tool-args/d@v2"].sha256 in second[1]
    client.decide("appr", second[0], "approve", "bob")
    res = runtime.resume("appr")
    assert res.outcome == "succeeded" and deployed == ["prod:1.1"]


def test_a_denied_tool_call_blocks_the_run_with_the_call_settled(
    runtime: Runtime, client: Client
) -> None:
    tools = Tools()

    @tools.tool(policy="effect", requires_approval=True)
    def wipe(target: str) -> str:
        raise AssertionError("never runs")

    agent = Agent(
        fresh("deny"),
        goal="wipe",
        tools=tools,
        planner=CodePlanner(lambda v: [step("w", "wipe", target="/")] if not v.version else None),
    )
    runtime.run(agent, None, run_id="deny")
    client.decide("deny", None, "deny", "carol")
    res = runtime.resume("deny")
    assert res.outcome == "blocked" and "denied by carol" in res.reason
    assert [(p.call_id, p.outcome) for p in events_of(client, "deny", "tool_call_settled")] == [
        ("w", "denied")
    ]


# ------------------------------------------------------------------ secrets


def test_secrets_never_reach_the_history(
    runtime: Runtime, client: Client, torpor_home: Path
) -> None:
    password = "hunter2-PASSWORD-0451"
    token = "tok-SERVICE-TOKEN-9917"
    seen: dict[str, str] = {}
    tools = Tools()

    @tools.tool
    def login(user: str, password: Secret) -> dict[str, str]:
        seen["password"] = password
        return {"session": f"{user} logged in with {password}"}  # echoes it: scrubbed

    @tools.tool(policy="effect", secrets={"token": lambda: token}, retry=None)
    def post(text: str, token: Secret, idempotency_key: str) -> str:
        seen["token"] = token
        raise torpor.EffectNotApplied(f"service refused token {token}")

    model = ScriptedModel(
        [
            use(("login", {"user": "bob", "password": password})),
            use(("post", {"text": "hello"})),
            say("logged in; the post was refused"),
        ]
    )
    agent = Agent(fresh("secrets"), goal="post", tools=tools, planner=ReActPlanner(model))
    res = runtime.run(agent, None, run_id="secrets")
    assert res.outcome == "succeeded", res.reason
    assert seen == {"password": password, "token": token}  # the tools got the real values
    assert "token" not in json.dumps(tools["post"].spec().parameters["properties"])
    assert tools["login"].spec().parameters["properties"]["password"]["writeOnly"] is True
    # The model saw its own call redacted, and the refusal with the token scrubbed.
    later = json.dumps([m.model_dump() for m in model.calls[2]])
    assert password not in later and token not in later and "[secret:" in later
    # Nothing recorded holds either secret: the database files and the artifacts.
    runtime.store.close()
    blobs = b"".join(
        p.read_bytes() for p in torpor_home.rglob("*") if p.is_file() and "torpor.db" in p.name
    )
    assert blobs and password.encode() not in blobs and token.encode() not in blobs
    for p in torpor_home.rglob("*"):
        if p.is_file():
            assert password.encode() not in p.read_bytes(), p
    # ... but the keyed hash is there, for matching.
    plan = events_of(client, "secrets", "plan_recorded")[0]
    marker = plan.steps[0].args["password"]
    assert set(marker) == {"$secret"} and re.fullmatch(r"[0-9a-f]{64}", marker["$secret"])


# ------------------------------------------------------------------ verifiers


def test_code_verifiers_first_and_a_model_judge_only_where_declared(
    runtime: Runtime, client: Client
) -> None:
    judge = ScriptedModel(
        [use(("verdict", {"passed": True, "reason": "polite enough"}))], model_id="judge"
    )
    order: list[str] = []

    def has_answer(ctx: torpor.agents.AgentContext) -> bool:
        order.append("code")
        return bool(ctx.final)

    agent = Agent(
        fresh("judge"),
        goal="greet",
        tools=Tools(),
        planner=ReActPlanner(ScriptedModel([say("Hello there!")])),
        criteria={"polite": ModelJudge(judge, "Is the answer polite?"), "answered": has_answer},
    )
    res = runtime.run(agent, None, run_id="judge")
    assert res.outcome == "succeeded", res.reason
    assert order == ["code"] and len(judge.calls) == 1
    verifs = events_of(client, "judge", "verification_recorded")
    assert [(v.name, v.passed) for v in verifs] == [("answered", True), ("polite", True)]
    assert verifs[1].detail == {"judge": "judge", "reason": "polite enough"}
    prompt = judge.calls[0][1].content
    assert "Is the answer polite?" in prompt and "Hello there!" in prompt
    assert isinstance(judge.calls[0][0], Message)


def test_cancelled_run_records_an_outcome_for_every_call_not_run(
    runtime: Runtime, client: Client
) -> None:
    tools = Tools()

    @tools.tool(requires_approval=True)
    def read_secret_file(path: str) -> str:
        raise AssertionError("never runs")

    @tools.tool
    def summarize(text: str) -> str:
        raise AssertionError("never runs")

    def planner(view: PlanView) -> Proposal:
        return Proposal(
            steps=[
                step("r", "read_secret_file", path="/etc/shadow"),
                step("s", "summarize", after=["r"], text="…"),
            ]
        )

    agent = Agent(fresh("cancel"), goal="g", tools=tools, planner=CodePlanner(planner))
    assert runtime.run(agent, None, run_id="cancel").status == "waiting"
    client.cancel("cancel", by="dave", reason="wrong file")
    res = runtime.resume("cancel")
    assert res.outcome == "cancelled"
    # The engine stopped the run before the agent's code ran again: the outcome of the calls
    # that never ran comes with the run's outcome (the fold of run_finished).
    assert {k: v.status for k, v in client.state("cancel").plan.items()} == {
        "r": "skipped",
        "s": "skipped",
    }
