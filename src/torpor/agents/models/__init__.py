"""Model adapters behind one small protocol; model calls are recorded steps.

- :class:`Model` — ``complete(messages, tools) -> ModelResponse`` (message, tool calls, usage).
- :class:`OpenAIChatModel` — OpenAI-compatible Chat Completions (``openai`` SDK).
- :class:`AnthropicModel` — Anthropic Messages API (``anthropic`` SDK).
- :class:`ScriptedModel` — answers from a script, for tests.
- :func:`call_model` — one model call as a recorded ``read`` step (never paid twice).

The SDK-backed adapters import their SDK when constructed (``pip install 'torpor[models]'``).
"""

from .anthropic_messages import AnthropicModel
from .base import (
    Message,
    Model,
    ModelError,
    ModelRateLimitedError,
    ModelRequestError,
    ModelResponse,
    ModelTimeoutError,
    ModelUnavailableError,
    Price,
    TokenUsage,
    ToolCall,
    ToolSpec,
)
from .openai_chat import OpenAIChatModel
from .record import call_model, prompt_hash
from .scripted import ScriptedModel, say, use

__all__ = [
    "AnthropicModel",
    "Message",
    "Model",
    "ModelError",
    "ModelRateLimitedError",
    "ModelRequestError",
    "ModelResponse",
    "ModelTimeoutError",
    "ModelUnavailableError",
    "OpenAIChatModel",
    "Price",
    "ScriptedModel",
    "TokenUsage",
    "ToolCall",
    "ToolSpec",
    "call_model",
    "prompt_hash",
    "say",
    "use",
]
