"""Adapter for the OpenAI-compatible Chat Completions API (OpenAI, vLLM, llama.cpp server,
Ollama, most gateways), through the official ``openai`` SDK (``pip install 'torpor[models]'``).

The SDK retries connection errors, 408/409/429 and 5xx answers itself (``max_retries``),
honouring ``retry-after`` / ``retry-after-ms``; what still fails is raised as a
:class:`~torpor.agents.models.base.ModelError` subclass.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from .base import (
    Message,
    ModelError,
    ModelResponse,
    Price,
    TokenUsage,
    ToolCall,
    ToolSpec,
    sdk_errors,
)


def to_wire(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages in the Chat Completions wire format."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        elif m.role == "assistant":
            d: dict[str, Any] = {"role": "assistant", "content": m.content or None}
            if m.tool_calls:
                d["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": c.name,
                            "arguments": c.raw_arguments
                            if c.raw_arguments is not None
                            else json.dumps(c.arguments),
                        },
                    }
                    for c in m.tool_calls
                ]
            out.append(d)
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def tools_to_wire(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


def parse_arguments(text: str | None) -> tuple[dict[str, Any], str | None]:
    """``(arguments, None)`` for a JSON object, ``({}, text)`` otherwise."""
    if not text:
        return {}, None
    try:
        value = json.loads(text)
    except ValueError:
        return {}, text
    return (value, None) if isinstance(value, dict) else ({}, text)


class OpenAIChatModel:
    """``OpenAIChatModel("gpt-4o-mini")``; ``base_url`` for any compatible server.

    ``api_key`` defaults to ``$TORPOR_MODEL_API_KEY`` then ``$OPENAI_API_KEY`` (a local server
    usually accepts anything). ``price`` gives the cost of each call; without it the cost is
    recorded as unknown.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        price: Price | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        client: Any = None,
    ):
        import openai

        self.model_id = model
        self.price = price
        self.max_tokens = max_tokens
        self.temperature = temperature
        key = (
            api_key
            or os.environ.get("TORPOR_MODEL_API_KEY")
            or os.environ.get("OPENAI_API_KEY")
            or "unset"
        )
        self.client = client or openai.OpenAI(
            base_url=base_url, api_key=key, timeout=timeout, max_retries=max_retries
        )

    def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()
    ) -> ModelResponse:
        import openai

        req: dict[str, Any] = {"model": self.model_id, "messages": to_wire(messages)}
        if tools:
            req["tools"] = tools_to_wire(tools)
        if self.max_tokens is not None:
            req["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            req["temperature"] = self.temperature
        with sdk_errors(self.model_id, openai, openai.OpenAIError):
            resp = self.client.chat.completions.create(**req)
        if not resp.choices:
            raise ModelError(self.model_id, "the response has no choices")
        choice = resp.choices[0]
        msg = choice.message
        calls = []
        for tc in msg.tool_calls or []:
            fn = getattr(tc, "function", None)
            if fn is None:
                continue
            args, raw = parse_arguments(fn.arguments)
            calls.append(ToolCall(id=tc.id, name=fn.name, arguments=args, raw_arguments=raw))
        usage = TokenUsage(
            input_tokens=resp.usage.prompt_tokens if resp.usage else 0,
            output_tokens=resp.usage.completion_tokens if resp.usage else 0,
        )
        return ModelResponse(
            message=Message(role="assistant", content=msg.content or "", tool_calls=calls),
            usage=usage,
            model=resp.model or self.model_id,
            stop_reason=choice.finish_reason or "",
            cost_usd=self.price.cost(usage) if self.price else None,
        )
