"""Token counts that work offline: a documented conservative estimate, calibrated against the
provider usage that model adapters record.

The estimate (no tokenizer, nothing downloaded at run time) of a text is

    ceil(utf8_bytes / 3) + ceil(hexdigit_or_digit_run_chars / 3)

and a message adds :data:`MESSAGE_OVERHEAD_TOKENS` (role, separators) plus its tool calls'
names and JSON arguments. Why it is conservative for the byte-level BPE tokenizers providers use
(GPT, Claude): English prose averages about 4 bytes per token and code or JSON about 3, so
``bytes / 3`` over-counts them; CJK is 3 bytes per character and about one token per character;
long runs of digits and hex digits (ids, hashes) tokenize at about 1.5 characters per token, so
they are counted twice over (``2 * chars / 3``). A run's own recorded usage then calibrates the
estimate (:class:`Calibration`): when a provider reported more input tokens for a context than
its estimate, the ratio is kept and every later estimate is multiplied by it.

The one estimator of torpor: the working memory's context (:mod:`torpor.memory`) and the
episodes section (:mod:`torpor.episodes`) both count with it; it sits below both (it needs only
:mod:`torpor.messages`). ``torpor.memory.tokens`` is the same module's names, kept.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from .messages import Message, ToolSpec

#: Tokens a provider adds per message (role marker, separators), counted on top of its text.
MESSAGE_OVERHEAD_TOKENS = 4
#: Tokens a provider adds once per request (the reply's priming).
REQUEST_OVERHEAD_TOKENS = 3

_DENSE = re.compile(r"[0-9a-fA-F]{6,}|[0-9]{2,}")


def estimate_text(text: str) -> int:
    """The conservative token estimate of ``text`` (see the module doc): an int >= 0."""
    if not text:
        return 0
    size = len(text) if text.isascii() else len(text.encode())
    dense = sum(len(m.group()) for m in _DENSE.finditer(text))
    return math.ceil(size / 3) + math.ceil(dense / 3)


def estimate_message(message: Message) -> int:
    """Tokens of one message: overhead + content + each tool call's name and JSON arguments."""
    n = MESSAGE_OVERHEAD_TOKENS + estimate_text(message.content)
    for tc in message.tool_calls:
        args = tc.raw_arguments if tc.raw_arguments is not None else _json(tc.arguments)
        n += MESSAGE_OVERHEAD_TOKENS + estimate_text(tc.name) + estimate_text(args)
    if message.tool_call_id:
        n += estimate_text(message.tool_call_id)
    return n


def estimate_tools(tools: Sequence[ToolSpec]) -> int:
    """Tokens of the tool definitions sent with a request (name, description, JSON schema)."""
    return sum(
        MESSAGE_OVERHEAD_TOKENS
        + estimate_text(t.name)
        + estimate_text(t.description)
        + estimate_text(_json(t.parameters))
        for t in tools
    )


def estimate_request(messages: Iterable[Message], tools: Sequence[ToolSpec] = ()) -> int:
    """Input tokens of a whole request: every message, the tools, the request overhead."""
    return REQUEST_OVERHEAD_TOKENS + sum(map(estimate_message, messages)) + estimate_tools(tools)


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


class Calibration(BaseModel):
    """How the estimate compares with what providers reported for this run.

    ``ratio`` (>= 1.0) multiplies every estimate: the largest ``reported / estimated`` seen for
    a request whose input tokens a provider reported (``observe``). It never goes below 1: the
    estimate is only ever made more conservative by the record.
    """

    ratio: float = 1.0
    observed: int = 0

    def observe(self, estimated: int, reported: int) -> None:
        """Take one request: ``estimated`` by :func:`estimate_request`, ``reported`` by the
        provider (``ModelCalled.input_tokens``); a report of 0 (unknown) is ignored."""
        if estimated <= 0 or reported <= 0:
            return
        self.observed += 1
        self.ratio = max(self.ratio, reported / estimated)

    def scale(self, tokens: int) -> int:
        """``tokens`` multiplied by the ratio, rounded up."""
        return tokens if self.ratio <= 1.0 else math.ceil(tokens * self.ratio)


__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "REQUEST_OVERHEAD_TOKENS",
    "Calibration",
    "estimate_message",
    "estimate_request",
    "estimate_text",
    "estimate_tools",
]
