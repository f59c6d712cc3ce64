"""The one small model protocol: messages + tool definitions in; a message, tool calls and
token usage out. The provider-neutral types live in :mod:`torpor.messages` (below the agents
and the memory that both use them) and are re-exported here; the adapters translate them to
each wire format. Prices and the translation of SDK errors are here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel, ConfigDict

from ...errors import (
    ModelContextTooLongError,
    ModelError,
    ModelRateLimitedError,
    ModelRequestError,
    ModelTimeoutError,
    ModelUnavailableError,
)
from ...messages import Message, Model, ModelResponse, TokenUsage, ToolCall, ToolSpec


class Price(BaseModel):
    """USD per million tokens; gives a call's cost when the provider's price is known."""

    model_config = ConfigDict(frozen=True)

    input_per_mtok: float
    output_per_mtok: float

    def cost(self, usage: TokenUsage) -> float:
        return (
            usage.input_tokens * self.input_per_mtok + usage.output_tokens * self.output_per_mtok
        ) / 1_000_000


# ------------------------------------------------------------------ errors


def retry_after_s(headers: Any) -> float | None:
    """Seconds from ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return float(ra)
    except ValueError:
        import email.utils
        import time

        try:
            when = email.utils.parsedate_to_datetime(ra)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())


def _detail(exc: Any) -> str:
    """``HTTP <status>: <provider message>`` from an SDK status error (both body shapes)."""
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    msg = body.get("message") if isinstance(body, dict) else None
    if msg is None and isinstance(body, dict) and isinstance(body.get("error"), dict):
        msg = body["error"].get("message")
    return f"HTTP {status}: {msg or exc}"


_TOO_LONG = re.compile(
    r"context[_ ]length[_ ]exceeded|maximum context length|prompt is too long|"
    r"context window|too many (input )?tokens|request[_ ]too[_ ]large|reduce the length",
    re.IGNORECASE,
)
_OPENAI_SIZES = re.compile(r"maximum context length is (\d+) tokens.*?(\d+) tokens", re.S)
_ANTHROPIC_SIZES = re.compile(r"(\d+) tokens > (\d+)")


def context_too_long(status: int, body: Any, message: str) -> tuple[int | None, int | None] | None:
    """``(limit, sent)`` when a provider's error answer says the context is too long (either
    may be None when the message does not say it), else None. The shapes: OpenAI's 400 with
    ``code: context_length_exceeded`` ("This model's maximum context length is 8192 tokens.
    However, your messages resulted in 9000 tokens…"), Anthropic's 400 ``prompt is too long:
    210000 tokens > 200000 maximum`` or 413 ``request_too_large``."""
    err = body.get("error", body) if isinstance(body, dict) else None
    code = str(err.get("code") or err.get("type") or "") if isinstance(err, dict) else ""
    if status not in (400, 413) or not (_TOO_LONG.search(code) or _TOO_LONG.search(message)):
        return None
    m = _OPENAI_SIZES.search(message)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = _ANTHROPIC_SIZES.search(message)
    if m:
        return int(m.group(2)), int(m.group(1))
    return None, None


@contextmanager
def sdk_errors(model_id: str, sdk: Any, base: type[BaseException]) -> Iterator[None]:
    """Translate an official SDK's errors into :class:`ModelError` subclasses, at the seam.

    ``sdk`` is the ``openai`` or ``anthropic`` module: both are generated from one template and
    share the hierarchy ``RateLimitError`` < ``APIStatusError``, ``APITimeoutError`` <
    ``APIConnectionError``, all under ``base`` (``OpenAIError`` / ``AnthropicError``). The SDK's
    own retries have already run when an error reaches here. The driver error stays the cause.
    """
    try:
        yield
    except sdk.RateLimitError as exc:
        raise ModelRateLimitedError(
            model_id, _detail(exc), retry_after=retry_after_s(exc.response.headers)
        ) from exc
    except sdk.APITimeoutError as exc:
        raise ModelTimeoutError(model_id, f"timed out: {exc}") from exc
    except sdk.APIConnectionError as exc:
        raise ModelUnavailableError(model_id, f"connection failed: {exc}") from exc
    except sdk.APIStatusError as exc:
        too_long = context_too_long(exc.status_code, getattr(exc, "body", None), _detail(exc))
        if too_long is not None:
            limit, sent = too_long
            raise ModelContextTooLongError(
                model_id, _detail(exc), status=exc.status_code, limit=limit, sent=sent
            ) from exc
        cls = ModelUnavailableError if exc.status_code >= 500 else ModelRequestError
        raise cls(model_id, _detail(exc), status=exc.status_code) from exc
    except base as exc:
        raise ModelError(model_id, f"{type(exc).__name__}: {exc}") from exc


@contextmanager
def stream_errors(model_id: str) -> Iterator[None]:
    """A stream that breaks after its answer began (the SDKs raise the transport's own
    ``httpx`` error while it is read) as :class:`ModelUnavailableError` (the call may be made
    again); inside :func:`sdk_errors`, which maps what the SDK raised itself."""
    import httpx

    try:
        yield
    except httpx.TransportError as exc:
        raise ModelUnavailableError(
            model_id, f"the stream broke: {type(exc).__name__}: {exc}"
        ) from exc


__all__ = [
    "Message",
    "Model",
    "ModelError",
    "ModelRateLimitedError",
    "ModelRequestError",
    "ModelResponse",
    "ModelTimeoutError",
    "ModelUnavailableError",
    "Price",
    "TokenUsage",
    "ToolCall",
    "ToolSpec",
    "retry_after_s",
    "sdk_errors",
    "stream_errors",
]
