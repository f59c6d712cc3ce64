"""The long agent: a ReAct agent whose (scripted, offline) model reads one notes file per turn
for hundreds of turns, with a bounded working memory.

Its input is ``{"turns": N, "seed": S}``; its world is a directory of real notes files
(:func:`~.script.write_world`), named by ``$LONG_AGENT_WORLD`` (or the explorer's
``$TORPOR_EXPLORE_WORLD``). The model is a :class:`~torpor.agents.models.ScriptedModel` whose
answer at each turn is generated from the seed (:mod:`.script`): a remark (sometimes a
decision, or an approach that failed) and a ``read_file`` call. An operator message reaches it
at the turns the script says. Every model call goes through :data:`ON_CALL` hooks (the command
prints the context size per turn; the bench captures the first context after a resume).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import torpor
from torpor.agents.models import Message, ScriptedModel, TokenUsage, ToolCall, ToolSpec
from torpor.agents.models.scripted import turn_of
from torpor.memory import Memory

from .script import Script, make_script, notes_name

NAME = "long_agent"
#: ``hook(turn, messages)`` called before each model call of this process.
ON_CALL: list[Callable[[int, Sequence[Message]], None]] = []
#: The memory budget (tokens): ``$LONG_AGENT_BUDGET`` when set at import.
BUDGET_TOKENS = int(os.environ.get("LONG_AGENT_BUDGET") or 6000)


def world() -> Path:
    root = os.environ.get("LONG_AGENT_WORLD") or os.environ.get("TORPOR_EXPLORE_WORLD")
    if not root:
        raise RuntimeError("set LONG_AGENT_WORLD to the directory of the notes files")
    return Path(root)


tools = torpor.Tools()


@tools.tool(description="Read a notes file (a path under the world directory).", retry=None)
def read_file(path: str) -> dict[str, Any]:
    p = world() / path
    if not p.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    return {"path": path, "text": p.read_text()}


@cache
def _script(turns: int, seed: int) -> Script:
    return make_script(turns, seed)


def _input(messages: Sequence[Message]) -> dict[str, Any]:
    first = next(m for m in messages if m.role == "user")
    data: dict[str, Any] = json.loads(first.content.split("Input (JSON): ", 1)[1])
    return data


def answer(messages: Sequence[Message], specs: Sequence[ToolSpec]) -> Message:
    """The scripted model's answer at the conversation's turn (see the module doc)."""
    inp = _input(messages)
    script = _script(int(inp["turns"]), int(inp.get("seed", 7)))
    turn = turn_of(messages)
    for hook in ON_CALL:
        hook(turn, messages)
    if turn >= script.turns - 1:
        return Message(role="assistant", content=f"Done: read {script.turns - 1} notes files.")
    text, path = f"Turn {turn}: reading the next notes file.", notes_name(turn)
    decision = script.fact_at(turn, "decision")
    if decision is not None:
        text += " " + decision.text
    failed = script.fact_at(turn, "failed")
    if failed is not None:
        text += " " + failed.text
        path = f"missing/{failed.key.split()[0]}.txt"
    call = ToolCall(id=f"t{turn}", name="read_file", arguments={"path": path})
    return Message(role="assistant", content=text, tool_calls=[call])


class LongPlanner(torpor.ReActPlanner):
    """ReAct with the script's operator messages added to the agent's buffer at their turns."""

    def propose(self, ctx: Any) -> torpor.Proposal:
        inp = ctx.input
        script = _script(int(inp["turns"]), int(inp.get("seed", 7)))
        wm = ctx.memory
        turn = wm.summary.model_turns_folded + sum(1 for u in wm.buffer_units if u.kind == "model")
        op = script.fact_at(turn, "operator")
        if op is not None and not any(
            u.kind == "operator" and u.text == op.text for u in wm.buffer_units
        ):
            ctx.note(op.text, operator=True)
        return super().propose(ctx)


def build_model(
    model_id: str = "scripted-a", turns: int = 5000, usage: TokenUsage | None = None
) -> ScriptedModel:
    return ScriptedModel([answer] * turns, model_id=model_id, usage=usage)


def make_agent(
    name: str = NAME,
    *,
    budget_tokens: int = BUDGET_TOKENS,
    model_id: str = "scripted-a",
    summarizer: Any = None,
    usage: TokenUsage | None = None,
) -> torpor.Agent:
    """The long agent registered as workflow ``name`` (tests make several, with small budgets,
    another model, a model summarizer, or a model reporting ``usage``)."""
    return torpor.Agent(
        name,
        goal="read every notes file and remember what matters",
        tools=tools,
        planner=LongPlanner(build_model(model_id, usage=usage)),
        memory=Memory(
            budget_tokens=budget_tokens,
            summary_share=0.45,
            buffer_share=0.45,
            summarizer=summarizer,
        ),
        budget=torpor.Budget(steps=100_000),
        max_plan_versions=1_000_000,
    )


agent = make_agent(model_id=os.environ.get("LONG_AGENT_MODEL") or "scripted-a")
