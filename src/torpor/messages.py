"""The messages of a conversation with a model, provider-neutral: what an agent sends
(:class:`Message`, :class:`ToolSpec`), what a model answers (:class:`ModelResponse` with its
:class:`ToolCall` requests and :class:`TokenUsage`), and the one small :class:`Model` protocol.

Pure data, below both of their users: the agents (:mod:`torpor.agents`, whose adapters translate
these to each wire format) and the working memory (:mod:`torpor.memory`, which keeps, compacts
and counts them), so neither imports the other for them. :mod:`torpor.agents.models` re-exports
every name here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class ToolCall(BaseModel):
    """A tool call requested by a model. ``arguments`` is the parsed JSON object; when the
    model sent text that is not a JSON object, ``arguments`` is empty and ``raw_arguments``
    holds the text (the agent returns the parse error to the model as an observation)."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str | None = None


class Message(BaseModel):
    """One message of a conversation. ``tool`` messages answer the call ``tool_call_id``."""

    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    is_error: bool = False

    @classmethod
    def system(cls, text: str) -> Message:
        return cls(role="system", content=text)

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role="user", content=text)

    @classmethod
    def tool_result(cls, call_id: str, text: str, *, is_error: bool = False) -> Message:
        return cls(role="tool", content=text, tool_call_id=call_id, is_error=is_error)


class ToolSpec(BaseModel):
    """A tool as a model sees it: name, description, JSON schema of its arguments."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class TokenUsage(BaseModel):
    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


class ModelResponse(BaseModel):
    """What a model call returned. ``cost_usd`` is ``None`` when the price is unknown."""

    message: Message
    usage: TokenUsage = Field(default_factory=TokenUsage)
    model: str = ""
    stop_reason: str = ""
    cost_usd: float | None = None


@runtime_checkable
class Model(Protocol):
    """Anything that completes a conversation. ``model_id`` is recorded with every call."""

    model_id: str

    def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()
    ) -> ModelResponse: ...


__all__ = ["Message", "Model", "ModelResponse", "TokenUsage", "ToolCall", "ToolSpec"]
