"""The working buffer: an agent's recent turns as recorded state of its run, each unit with a
token count.

A :class:`Unit` is what compaction moves as a whole: a model turn (its message and every tool
call it made, each with its result), a plan a code planner proposed (its calls and their
results), an operator message, or a note. A tool call and its result live in the same unit, so
nothing can ever split them. The buffer is plain JSON data (pydantic): it is saved in the
agent's checkpoint and read back on resume.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from ..messages import Message, ToolCall
from .facts import Fact
from .tokens import MESSAGE_OVERHEAD_TOKENS, estimate_message, estimate_text

#: Longest tool result kept in the buffer by default, in characters
#: (``Memory(result_chars=...)``): a longer one keeps its head and its tail (where errors are
#: reported), the middle elided; the raw observation stays in the history
#: (``tool_call_settled``), its facts are found in the whole of it when it settles.
RESULT_CHARS = 8000

UnitKind = Literal["model", "plan", "operator", "note"]


class CallItem(BaseModel):
    """A tool call of a unit with its result. ``status`` is ``pending`` until it settles
    (a call waiting for a person's approval is pending)."""

    call_id: str
    tool_call_id: str
    tool: str
    args: Any = None
    status: str = "pending"
    result: str = ""
    step: str | None = None
    #: The facts found in the whole result when it settled (:func:`.facts.result_facts`);
    #: ``None`` for a call buffered before facts were kept (found in ``result`` then).
    facts: list[Fact] | None = None

    @field_validator("args")
    @classmethod
    def _sorted_args(cls, v: Any) -> Any:
        """Keys in sorted order: the arguments read back from a checkpoint come in canonical
        JSON's order, so a resumed run's messages must not depend on the order the model or
        planner gave them in (G9: the same context, byte for byte)."""
        return sorted_keys(v)


class Unit(BaseModel):
    """One unit of the working buffer (see the module doc).

    ``turn``: the agent's turn that made it (1, 2, …); ``text``: the model's message, the
    plan's reason, the operator's message or the note; ``refs``: the recorded steps it came from
    (``model#3``, ``settle:c1@v3``): raw events stay in the history, the unit points to them;
    ``reported_tokens``: the output tokens a provider reported for the model's message, used
    instead of the estimate for that message."""

    turn: int
    kind: UnitKind
    text: str = ""
    calls: list[CallItem] = Field(default_factory=list)
    refs: list[str] = Field(default_factory=list)
    reported_tokens: int | None = None

    @property
    def settled(self) -> bool:
        """Every call of the unit has its outcome."""
        return all(c.status != "pending" for c in self.calls)

    def messages(self) -> list[Message]:
        """The unit as conversation messages: a model turn (or plan) is an assistant message
        with its tool calls followed by one result per call; an operator message or a note is a
        user message."""
        if self.kind == "operator":
            return [Message.user(f"Operator: {self.text}")]
        if self.kind == "note":
            return [Message.user(f"Note: {self.text}")]
        calls = [
            ToolCall(
                id=c.tool_call_id,
                name=c.tool,
                arguments=c.args if isinstance(c.args, dict) else {"value": c.args},
            )
            for c in self.calls
        ]
        out = [Message(role="assistant", content=self.text, tool_calls=calls)]
        for c in self.calls:
            text = c.result if c.status != "pending" else json.dumps({"status": "pending"})
            out.append(
                Message.tool_result(
                    c.tool_call_id, text, is_error=c.status not in ("succeeded", "pending")
                )
            )
        return out

    def tokens(self) -> int:
        """The unit's token count: for the model's message the larger of the provider's figure
        (when one was reported) and the estimate, the estimate (:mod:`.tokens`) for everything
        else."""
        msgs = self.messages()
        if self.kind == "model" and self.reported_tokens is not None:
            # The provider's count of its own message when it is the larger: the context
            # builder's budget is then never below the estimate of what it sends.
            head = max(MESSAGE_OVERHEAD_TOKENS + self.reported_tokens, estimate_message(msgs[0]))
            return head + sum(estimate_message(m) for m in msgs[1:])
        return sum(estimate_message(m) for m in msgs)


def result_text(
    status: str, observation: Any, limit: int = RESULT_CHARS, facts: Sequence[Fact] = ()
) -> str:
    """A settled call's result as the buffer keeps it: the observation's JSON when it
    succeeded, ``{"status", "detail"}`` otherwise; past ``limit`` characters its first two
    thirds and its last third are kept around a ``[... N chars clipped ...]`` mark, which
    names the ``facts`` (found in the whole result) that were in the part clipped."""
    if status == "succeeded":
        text = json.dumps(observation, sort_keys=True, default=str)
    else:
        text = json.dumps({"status": status, "detail": observation}, sort_keys=True, default=str)
    if len(text) <= limit:
        return text
    room = max(limit - 40, 0)
    head, tail = room * 2 // 3, room - room * 2 // 3
    kept = text[:head] + text[len(text) - tail :]
    lost = [f.text for f in facts if not f.ids or not all(i in kept for i in f.ids)]
    lost = [x for x in lost if json.dumps(x)[1:-1] not in kept]
    note = f"; in them: {' | '.join(lost)}" if lost else ""
    if note:  # the facts take their room from the head
        head = max(head - len(note), 0)
    gone = len(text) - head - tail
    mark = f" [... {gone} chars clipped{note} ...] "
    return text[:head] + mark + (text[-tail:] if tail else "")


class Buffer(BaseModel):
    """The units in order, oldest first."""

    units: list[Unit] = Field(default_factory=list)

    def tokens(self) -> int:
        return sum(u.tokens() for u in self.units)

    def find_call(self, call_id: str) -> CallItem | None:
        """The newest call item with ``call_id``."""
        for u in reversed(self.units):
            for c in u.calls:
                if c.call_id == call_id:
                    return c
        return None

    def pinned(self) -> set[int]:
        """Indexes of units compaction must keep: any unit with a call not yet settled (a
        pending approval among them) and the latest operator message."""
        keep = {i for i, u in enumerate(self.units) if not u.settled}
        for i in range(len(self.units) - 1, -1, -1):
            if self.units[i].kind == "operator":
                keep.add(i)
                break
        return keep


def text_tokens(text: str) -> int:
    """Tokens of a text section (a message's overhead included)."""
    return MESSAGE_OVERHEAD_TOKENS + estimate_text(text)


def sorted_keys(v: Any) -> Any:
    """``v`` with every dict's keys in sorted order (lists keep theirs), as canonical JSON
    reads it back."""
    if isinstance(v, dict):
        return {k: sorted_keys(v[k]) for k in sorted(v, key=str)}
    if isinstance(v, list):
        return [sorted_keys(x) for x in v]
    return v
