"""An agent's working memory (DESIGN.md G9): the agent wakes knowing where it was.

- :mod:`.tokens` — offline token counts (a documented conservative estimate, calibrated
  against the usage providers reported);
- :mod:`.buffer` — the working buffer: recent turns as units (a tool call and its result are
  one unit), each with a token count;
- :mod:`.compaction` — the oldest units folded into a running summary (extractive by default,
  or a recorded model call), one atomic recorded transition (``context_compacted``);
- :mod:`.context` — the context builder: prioritised sections within a token budget, and the
  extension point for more sections (:class:`ContextSection`, :data:`SectionProvider`);
- :mod:`.config` — :class:`Memory`, how it is sized.

The agent loop (:mod:`torpor.agents.loop`) keeps this state in its checkpoint, so a resumed
agent reads its latest checkpoint instead of replaying every model turn.
"""

from .buffer import Buffer, CallItem, Unit
from .compaction import ModelSummarizer, Summarizer, Summary, SummaryFailed
from .config import Memory
from .context import (
    PRIORITIES,
    BuiltContext,
    ContextSection,
    SectionProvider,
    SectionRequest,
    build_context,
)
from .tokens import Calibration, estimate_message, estimate_request, estimate_text

__all__ = [
    "PRIORITIES",
    "Buffer",
    "BuiltContext",
    "Calibration",
    "CallItem",
    "ContextSection",
    "Memory",
    "ModelSummarizer",
    "SectionProvider",
    "SectionRequest",
    "Summarizer",
    "Summary",
    "SummaryFailed",
    "Unit",
    "build_context",
    "estimate_message",
    "estimate_request",
    "estimate_text",
]
