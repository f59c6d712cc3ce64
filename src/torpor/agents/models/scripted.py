"""A scripted model for tests: implements the protocol without any network.

The response to a request is chosen by the *turn*: the number of assistant messages already in
the conversation — or, when the agent's working memory says how many model turns it has taken
(``(Model turns so far: N.)`` in the system message, see :mod:`torpor.memory.working`), that
number, whatever compaction or the budget left out of the context. So a process
that crashed and resumed gets the same answer for the same turn, and a test can tell a
repeated call (the same turn asked twice) from a new one. Every call is appended to ``calls``
and, with ``counter_file``, to a file (one JSON line, fsynced), so a test in another process
can count calls made before a crash.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from .base import Message, ModelResponse, TokenUsage, ToolCall, ToolSpec

#: How an agent's context says how many model turns it has taken.
TURNS = re.compile(r"\(Model turns so far: (\d+)\.\)")

Script = ModelResponse | Message | Callable[[Sequence[Message], Sequence[ToolSpec]], Any]


def say(text: str) -> Message:
    """An assistant message with text and no tool calls (a ReAct agent's final answer)."""
    return Message(role="assistant", content=text)


def use(*calls: tuple[str, dict[str, Any]] | ToolCall, text: str = "", turn: int = 0) -> Message:
    """An assistant message requesting tool calls ``(name, arguments)``; ids ``call-T-I``."""
    out = []
    for i, c in enumerate(calls):
        if isinstance(c, ToolCall):
            out.append(c)
        else:
            out.append(ToolCall(id=f"call-{turn}-{i}", name=c[0], arguments=c[1]))
    return Message(role="assistant", content=text, tool_calls=out)


def turn_of(messages: Sequence[Message]) -> int:
    """The conversation's turn: the agent's count of its model turns when the context states
    it, else the number of assistant messages."""
    for m in messages:
        if m.role == "system":
            hit = TURNS.search(m.content)
            if hit:
                return int(hit.group(1))
    return sum(1 for m in messages if m.role == "assistant")


class ScriptedModel:
    """``ScriptedModel([use(("search", {"q": "x"})), say("done")], usage=TokenUsage(...))``."""

    def __init__(
        self,
        script: Sequence[Script],
        *,
        model_id: str = "scripted",
        usage: TokenUsage | None = None,
        cost_usd: float | None = None,
        counter_file: str | os.PathLike[str] | None = None,
    ):
        self.script = list(script)
        self.model_id = model_id
        self.usage = usage or TokenUsage(input_tokens=100, output_tokens=20)
        self.cost_usd = cost_usd
        self.counter_file = counter_file
        self.calls: list[list[Message]] = []

    def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()
    ) -> ModelResponse:
        turn = turn_of(messages)
        self.calls.append(list(messages))
        if self.counter_file is not None:
            with open(self.counter_file, "a") as f:
                f.write(json.dumps({"turn": turn, "pid": os.getpid()}) + "\n")
                f.flush()
                os.fsync(f.fileno())
        if turn >= len(self.script):
            raise IndexError(f"scripted model has no response for turn {turn}")
        item = self.script[turn]
        if callable(item) and not isinstance(item, ModelResponse | Message):
            item = item(messages, tools)
        if isinstance(item, ModelResponse):
            return item
        msg = item if isinstance(item, Message) else Message(role="assistant", content=str(item))
        # Ids unique per turn, so a script may reuse `use(...)` without an explicit turn.
        calls = [
            c if c.id != f"call-0-{i}" else c.model_copy(update={"id": f"call-{turn}-{i}"})
            for i, c in enumerate(msg.tool_calls)
        ]
        return ModelResponse(
            message=msg.model_copy(update={"tool_calls": calls}),
            usage=self.usage,
            model=self.model_id,
            stop_reason="tool_use" if calls else "end_turn",
            cost_usd=self.cost_usd,
        )
