"""The token estimate the working memory counts with: :mod:`torpor.tokens`, under the name it
had when it lived here (``from torpor.memory.tokens import estimate_text`` keeps working)."""

from ..tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    REQUEST_OVERHEAD_TOKENS,
    Calibration,
    estimate_message,
    estimate_request,
    estimate_text,
    estimate_tools,
)

__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "REQUEST_OVERHEAD_TOKENS",
    "Calibration",
    "estimate_message",
    "estimate_request",
    "estimate_text",
    "estimate_tools",
]
