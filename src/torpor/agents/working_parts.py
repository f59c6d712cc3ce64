"""Pieces of the agent's working memory (:mod:`.working`) that need none of its state: the
``context_compacted`` event of a fold, a call as the checkpoint keeps it, and the excerpts of
the artifacts the next step works on."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .. import serde
from ..history import SHA256_RE, ContextCompacted
from ..memory.buffer import Unit
from ..memory.compaction import Summary
from ..memory.working import OBSERVATION_INLINE_CHARS, CallState
from .calls import PlannedCall


def artifact_excerpts(
    known: set[str],
    calls: Iterable[PlannedCall | None],
    last_text: str,
    read: Callable[[str], bytes],
    chars: int,
) -> dict[str, str]:
    """Excerpts (``chars`` characters each, read by ``read(sha256)``) of the artifacts among
    ``known`` (the run's, by sha256) that the plan's ``calls`` name — in their arguments or
    results — or ``last_text`` (the newest unit's text) does: what the next step works on."""
    if not known:
        return {}
    texts: list[str] = []
    for c in calls:
        if c is not None:
            texts += _strings(c.args) + _strings(c.observation)
    if last_text:
        texts.append(last_text)
    want = {h for t in texts for h in SHA256_RE.findall(t) if h in known}
    return {h: read(h)[: chars * 2].decode("utf-8", "replace")[:chars] for h in sorted(want)}


def compacted_event(
    sid: str,
    number: int,
    units: Sequence[Unit],
    new: Summary,
    summary_data: Any,
    before: int,
    summarizer: str,
    ledger: list[dict[str, Any]] | None = None,
) -> ContextCompacted:
    """The ``context_compacted`` event of folding ``units`` into ``new``."""
    refs = [r for u in units for r in u.refs] + [c.step for u in units for c in u.calls if c.step]
    return ContextCompacted(
        step_id=sid,
        number=number,
        turns=[u.turn for u in units],
        call_ids=[c.call_id for u in units for c in u.calls],
        refs=refs[:200],
        summarizer=summarizer,
        summary_hash=serde.hash_value(summary_data),
        summary_tokens=new.tokens(),
        buffer_tokens_before=before,
        buffer_tokens_after=before - sum(u.tokens() for u in units),
        ledger=ledger or [],
    )


def call_state(c: PlannedCall) -> CallState:
    """A call as the checkpoint keeps it: a large settled observation stays in the history."""
    state = CallState(**vars(c))
    if c.status not in ("pending", "superseded") and c.observation is not None:
        size = len(json.dumps(c.observation, default=str))
        if size > OBSERVATION_INLINE_CHARS:
            state = state.model_copy(update={"observation": None, "in_history": True})
    return state


def _strings(v: Any) -> list[str]:
    if isinstance(v, str):
        return [v]
    if isinstance(v, dict):
        return [s for x in v.values() for s in _strings(x)]
    if isinstance(v, list | tuple):
        return [s for x in v for s in _strings(x)]
    return []
