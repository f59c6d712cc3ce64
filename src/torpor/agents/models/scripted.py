"""A scripted model for tests: implements the protocol without any network.

The response to a request is chosen by the *turn*: the number of assistant messages already in
the conversation, plus the model turns its running summary says it folded (``N of them model
turns``, see :mod:`torpor.memory.compaction`) when the agent's memory compacted. So a process
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

#: How a compacted context says how many model turns its summary folded.
FOLDED = re.compile(r"(\d+) of them model turns")

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
    """The conversation's turn: assistant messages + model turns folded into its summary."""
    folded = 0
    for m in messages:
        if m.role == "system":
            hit = FOLDED.search(m.content)
            if hit:
                folded = int(hit.group(1))
    return folded + sum(1 for m in messages if m.role == "assistant")


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
