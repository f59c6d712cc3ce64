"""The memory bench's agent: a ReAct agent whose scripted model walks a planted-fact world
(:mod:`bench.memory_world`) turn by turn, with torpor's default working memory at a given
budget.

The world is named by ``$MEMORY_WORLD`` (``turns:seed:family``) and regenerated from it (it is
deterministic). At turn ``t`` the model says the world's text for ``t`` and makes its one
call; the tools (``sh``, ``read_file``, ``http_get``) answer with the world's output for that
call, or raise with its message; an operator message reaches the agent before the model call
of its turn. Every model call goes through :data:`ON_CALL` hooks (the bench captures the
context there). Only public torpor names are used.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import torpor
from torpor.agents.models import Message, ScriptedModel, ToolCall, ToolSpec
from torpor.agents.models.scripted import turn_of
from torpor.memory import Memory

from .memory_world import Turn, World, make_world

#: ``hook(turn, messages)`` called before each model call of this process.
ON_CALL: list[Callable[[int, Sequence[Message]], None]] = []


@cache
def world_of(spec: str) -> World:
    turns, seed, family = spec.split(":")
    return make_world(int(turns), int(seed), family)


def world() -> World:
    spec = os.environ.get("MEMORY_WORLD")
    if not spec:
        raise RuntimeError("set MEMORY_WORLD=turns:seed:family")
    return world_of(spec)


@cache
def _calls(spec: str) -> dict[str, Turn]:
    return {t.tool + json.dumps(t.args, sort_keys=True): t for t in world_of(spec).turns}


def _answer(tool: str, args: dict[str, Any]) -> Any:
    world()
    turn = _calls(os.environ["MEMORY_WORLD"]).get(tool + json.dumps(args, sort_keys=True))
    if turn is None:
        raise FileNotFoundError(f"{tool}: nothing at {json.dumps(args)}")
    if turn.raises is not None:
        raise RuntimeError(turn.raises)
    return turn.output


tools = torpor.Tools()


@tools.tool(
    description="Run a shell command in the workspace; its exit code and output.", retry=None
)
def sh(cmd: str) -> Any:
    return _answer("sh", {"cmd": cmd})


@tools.tool(description="Read a file of the workspace (a path relative to its root).", retry=None)
def read_file(path: str) -> Any:
    return _answer("read_file", {"path": path})


@tools.tool(description="GET a URL; the decoded JSON body.", retry=None)
def http_get(url: str) -> Any:
    return _answer("http_get", {"url": url})


def answer(messages: Sequence[Message], specs: Sequence[ToolSpec]) -> Message:
    """The scripted model's answer at the conversation's turn."""
    w = world()
    turn = turn_of(messages)
    for hook in ON_CALL:
        hook(turn, messages)
    if turn >= len(w.turns) - 1:
        return Message(role="assistant", content=f"Done after {turn} turns.")
    t = w.turns[turn]
    call = ToolCall(id=f"t{turn}", name=t.tool, arguments=dict(t.args))
    return Message(role="assistant", content=t.say, tool_calls=[call])


class WorldPlanner(torpor.ReActPlanner):
    """ReAct with the world's operator message added to the buffer before its turn's call."""

    def propose(self, ctx: Any) -> torpor.Proposal:
        messages = ctx.conversation(self.instructions)
        w = world()
        turn = turn_of(messages)
        op = w.turns[turn].operator if turn < len(w.turns) else None
        if op is not None and not any(op in m.content for m in messages):
            ctx.note(op, operator=True)
        return super().propose(ctx)


def make_agent(name: str, budget_tokens: int) -> torpor.Agent:
    """The agent registered as workflow ``name``, with ``Memory(budget_tokens=...)`` and every
    other memory setting at torpor's default."""
    model = ScriptedModel([answer] * 100_000, model_id="scripted-world")
    return torpor.Agent(
        name,
        goal=world().goal,
        tools=tools,
        planner=WorldPlanner(model),
        memory=Memory(budget_tokens=budget_tokens),
        budget=torpor.Budget(steps=1_000_000),
        max_plan_versions=1_000_000,
    )
