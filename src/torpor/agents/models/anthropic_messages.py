"""Adapter for Anthropic's Messages API through the official ``anthropic`` SDK
(``pip install 'torpor[models]'``).

System messages go to the ``system`` parameter; tool results become ``tool_result`` blocks of
one user turn; the SDK's own retries (``max_retries``) honour ``retry-after`` and retry 429,
529 (overloaded) and 5xx answers before an error is raised here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from .base import (
    Message,
    ModelResponse,
    Price,
    TokenUsage,
    ToolCall,
    ToolSpec,
    sdk_errors,
    stream_errors,
)


def to_wire(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """``(system, messages)`` in the Messages API wire format."""
    system = "\n\n".join(m.content for m in messages if m.role == "system")
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id,
                "content": m.content,
            }
            if m.is_error:
                block["is_error"] = True
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif m.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            for c in m.tool_calls:
                blocks.append(
                    {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                )
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": "user", "content": [{"type": "text", "text": m.content}]})
    return system, out


class AnthropicModel:
    """``AnthropicModel("claude-sonnet-4-5")``. ``api_key`` defaults to
    ``$TORPOR_MODEL_API_KEY`` then ``$ANTHROPIC_API_KEY``; ``max_tokens`` is required by the
    API (default 1024). ``stream="reply"``: each recorded call streams its reply to that
    stream of the run (:meth:`complete_stream`, :mod:`torpor.streams`)."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_tokens: int = 1024,
        price: Price | None = None,
        temperature: float | None = None,
        client: Any = None,
        stream: str | None = None,
    ):
        import anthropic

        #: The run stream each call's reply is streamed to (``"reply"``), or None: calls are
        #: not streamed (:mod:`torpor.streams`).
        self.stream = stream
        self.model_id = model
        self.max_tokens = max_tokens
        self.price = price
        self.temperature = temperature
        key = (
            api_key
            or os.environ.get("TORPOR_MODEL_API_KEY")
            or os.environ.get("ANTHROPIC_API_KEY")
            or "unset"
        )
        self.client = client or anthropic.Anthropic(
            base_url=base_url, api_key=key, timeout=timeout, max_retries=max_retries
        )

    def _request(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        system, wire = to_wire(messages)
        req: dict[str, Any] = {
            "model": self.model_id,
            "max_tokens": self.max_tokens,
            "messages": wire,
        }
        if system:
            req["system"] = system
        if tools:
            req["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
        if self.temperature is not None:
            req["temperature"] = self.temperature
        return req

    def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()
    ) -> ModelResponse:
        import anthropic

        req = self._request(messages, tools)
        with sdk_errors(self.model_id, anthropic, anthropic.AnthropicError):
            resp = self.client.messages.create(**req)
        return self._parse(resp)

    def complete_stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        on_text: Callable[[str], None],
    ) -> ModelResponse:
        """:meth:`complete` over server-sent events (the SDK's ``messages.stream``: the
        Messages API's ``message_start`` … ``content_block_delta`` … ``message_stop``): each
        ``text_delta`` goes to ``on_text`` as it arrives; the final message (tool uses with
        their assembled input, usage, stop reason) is read as :meth:`complete` reads one."""
        import anthropic

        req = self._request(messages, tools)
        with (
            sdk_errors(self.model_id, anthropic, anthropic.AnthropicError),
            stream_errors(self.model_id),
            self.client.messages.stream(**req) as events,
        ):
            for text in events.text_stream:
                on_text(text)
            resp = events.get_final_message()
        return self._parse(resp)

    def _parse(self, resp: Any) -> ModelResponse:
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in resp.content:
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use":
                args = block.input if isinstance(block.input, dict) else {}
                raw = None if isinstance(block.input, dict) else str(block.input)
                calls.append(
                    ToolCall(id=block.id, name=block.name, arguments=args, raw_arguments=raw)
                )
        usage = TokenUsage(
            input_tokens=resp.usage.input_tokens, output_tokens=resp.usage.output_tokens
        )
        return ModelResponse(
            message=Message(role="assistant", content="".join(texts), tool_calls=calls),
            usage=usage,
            model=resp.model or self.model_id,
            stop_reason=resp.stop_reason or "",
            cost_usd=self.price.cost(usage) if self.price else None,
        )
