"""Adapter for the OpenAI-compatible Chat Completions API (OpenAI, vLLM, llama.cpp server,
Ollama, most gateways), through the official ``openai`` SDK (``pip install 'torpor[models]'``).

The SDK retries connection errors, 408/409/429 and 5xx answers itself (``max_retries``),
honouring ``retry-after`` / ``retry-after-ms``; what still fails is raised as a
:class:`~torpor.agents.models.base.ModelError` subclass.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
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
    stream_errors,
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
    recorded as unknown. ``stream="reply"``: each call made as a recorded step
    (:func:`~torpor.agents.models.call_model`) streams its reply to that stream of the run
    (:meth:`complete_stream`, :mod:`torpor.streams`).
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
        stream: str | None = None,
    ):
        import openai

        #: The run stream each call's reply is streamed to (``"reply"``), or None: calls are
        #: not streamed (:mod:`torpor.streams`).
        self.stream = stream
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

    def _request(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        req: dict[str, Any] = {"model": self.model_id, "messages": to_wire(messages)}
        if tools:
            req["tools"] = tools_to_wire(tools)
        if self.max_tokens is not None:
            req["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            req["temperature"] = self.temperature
        return req

    def _response(
        self, content: str, calls: list[ToolCall], usage: TokenUsage, model: str, stop: str
    ) -> ModelResponse:
        return ModelResponse(
            message=Message(role="assistant", content=content, tool_calls=calls),
            usage=usage,
            model=model or self.model_id,
            stop_reason=stop,
            cost_usd=self.price.cost(usage) if self.price else None,
        )

    def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()
    ) -> ModelResponse:
        import openai

        req = self._request(messages, tools)
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
        return self._response(
            msg.content or "", calls, usage, resp.model, choice.finish_reason or ""
        )

    def complete_stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        on_text: Callable[[str], None],
    ) -> ModelResponse:
        """:meth:`complete` over server-sent events (``stream: true`` with
        ``stream_options.include_usage``, as the Chat Completions API documents): each
        content delta goes to ``on_text`` as it arrives; tool calls are assembled from their
        indexed deltas; the usage comes in the last chunk. The same response as
        :meth:`complete` gives for the same answer."""
        import openai

        req = self._request(messages, tools)
        req["stream"] = True
        req["stream_options"] = {"include_usage": True}
        text: list[str] = []
        slots: dict[int, dict[str, str]] = {}
        usage, model, stop = TokenUsage(), "", ""
        with (
            sdk_errors(self.model_id, openai, openai.OpenAIError),
            stream_errors(self.model_id),
        ):
            chunks = self.client.chat.completions.create(**req)
            try:
                for ch in chunks:
                    model = ch.model or model
                    if ch.usage:
                        usage = TokenUsage(
                            input_tokens=ch.usage.prompt_tokens,
                            output_tokens=ch.usage.completion_tokens,
                        )
                    for choice in ch.choices[:1]:
                        d = choice.delta
                        if d is not None and d.content:
                            text.append(d.content)
                            on_text(d.content)
                        for tc in (d.tool_calls if d is not None else None) or []:
                            slot = slots.setdefault(tc.index, {"id": "", "name": "", "args": ""})
                            slot["id"] = tc.id or slot["id"]
                            if tc.function is not None:
                                slot["name"] += tc.function.name or ""
                                slot["args"] += tc.function.arguments or ""
                        stop = choice.finish_reason or stop
            finally:
                chunks.close()
        calls = []
        for _, slot in sorted(slots.items()):
            args, raw = parse_arguments(slot["args"])
            calls.append(
                ToolCall(id=slot["id"], name=slot["name"], arguments=args, raw_arguments=raw)
            )
        return self._response("".join(text), calls, usage, model, stop)
