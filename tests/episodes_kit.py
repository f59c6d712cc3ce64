"""An agent that fails approach A with a reason and succeeds with approach B: the episodic
memory tests' subject (tests/test_episodes*.py, bench/episodes.py).

``WORLD["a_works"]`` decides whether approach A works (a later run may find it fixed: the
contradiction that supersedes the old lesson). Two planners: a code planner that tries A first
unless A already failed in this run, and a scripted model (ReAct) that tries A first *unless its
context says A failed* — the day-three planner.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torpor
from torpor.agents.models import ScriptedModel
from torpor.agents.models.base import Message, ToolSpec
from torpor.agents.models.scripted import say, use
from torpor.agents.proposals import PlanView, step

#: The world the tools act on (mutable: a test may fix approach A).
WORLD: dict[str, Any] = {"a_works": False, "log": []}

A_ERROR = "legacy deploy API refused the connection: it only speaks TLS 1.0"

tools = torpor.Tools()


@tools.tool(retry=None)
def approach_a(target: str) -> dict[str, Any]:
    """Deploy through the legacy API (approach A)."""
    WORLD["log"].append(("a", target))
    if not WORLD["a_works"]:
        raise RuntimeError(A_ERROR)
    return {"deployed": target, "via": "a"}


@tools.tool(retry=None)
def approach_b(target: str) -> dict[str, Any]:
    """Deploy through the new API (approach B)."""
    WORLD["log"].append(("b", target))
    return {"deployed": target, "via": "b"}


def _deployed(ctx: Any) -> bool:
    return any(isinstance(r, dict) and r.get("deployed") for r in ctx.results().values())


def code_plan(view: PlanView) -> Any:
    """Try A; after A failed, B; done once either succeeded."""
    if view.succeeded():
        return None
    target = (view.input or {}).get("target", "prod")
    if view.status("a") in ("failed", "invalid"):
        return [step("b", "approach_b", why="approach A failed; use the new API", target=target)]
    return [step("a", "approach_a", why="the legacy API is what ops documented", target=target)]


def code_agent(name: str = "ep.deployer") -> torpor.Agent:
    return torpor.Agent(
        name,
        goal="deploy the service to the target environment",
        tools=tools,
        planner=torpor.CodePlanner(code_plan),
        criteria={"deployed": _deployed},
        task_type="deploy",
    )


def system_text(messages: Sequence[Message]) -> str:
    return "\n".join(m.content for m in messages if m.role == "system")


def told_a_failed(messages: Sequence[Message]) -> bool:
    """Whether the context names approach A as failed (the episodes section's lesson)."""
    text = system_text(messages)
    return "approach_a" in text and "failed" in text


def day_three_turn(messages: Sequence[Message], specs: Sequence[ToolSpec]) -> Message:
    """The scripted planner: A unless told A failed; after a failed call, B; then done."""
    last = messages[-1]
    if last.role == "tool":
        if last.is_error:
            return use(("approach_b", {"target": "prod"}), text="A failed; trying B")
        return say("deployed")
    if told_a_failed(messages):
        return use(("approach_b", {"target": "prod"}), text="an earlier run: A fails; use B")
    return use(("approach_a", {"target": "prod"}), text="trying the documented legacy API")


def scripted_agent(name: str = "ep.react") -> tuple[torpor.Agent, ScriptedModel]:
    model = ScriptedModel([day_three_turn] * 6)
    agent = torpor.Agent(
        name,
        goal="deploy the service to the target environment",
        tools=tools,
        planner=torpor.ReActPlanner(model),
        criteria={"deployed": _deployed},
        task_type="deploy",
    )
    return agent, model


def tried(run_log: list[tuple[str, str]]) -> list[str]:
    return [k for k, _ in run_log]


__all__ = [
    "A_ERROR",
    "WORLD",
    "code_agent",
    "scripted_agent",
    "system_text",
    "told_a_failed",
    "tried",
]
