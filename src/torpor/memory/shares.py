"""Shares of the summary's facts by origin (issue 29): facts found in tool output never
starve the facts the agent itself stated, and the other way round.

A running summary keeps far more candidate facts than its budget holds, and the two origins
score on different scales: the model's own sentences (and an operator's words, a note, a
failed call's error) are few and said on purpose; a tool's output holds many lines, each
scored as evidence. Ranking them on one score either drops every tool-output fact (the
model's facts always outrank them) or, when tool-output facts are scored up, pushes the
model's facts out (what an earlier attempt at structural reading of tool output did).

So the facts are cut by **proportional share** instead: within each origin the lines are
ordered by score (best first; ties: the newer first) and each line's *position* is the tokens
of its origin's lines up to and including it divided by its origin's share
(:data:`SHARES`). Lines are cut in decreasing position. With room for both, each origin keeps
about its share of the facts' tokens; when one origin has fewer facts than its share, the
other grows into what it leaves (no budget is left empty while facts are cut). Pinned lines
and plain (weight-1) lines are not ranked here. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .facts import Fact
from .tokens import estimate_text


class SummaryLine(Protocol):
    """What is read of a summary line (:class:`~torpor.memory.compaction.SummaryLine`)."""

    turn: int
    weight: int
    score: float
    pinned: bool
    fact: Fact | None

    def shown(self) -> str: ...


#: Sources of a fact found in a tool's output (its result, or a long argument it was given).
TOOL_SOURCES = frozenset({"result", "args"})
#: Share of the summary's fact tokens each origin keeps when both have more than fits:
#: ``agent`` (the model's text, an operator's, a note, a failed call's error) and ``tool``.
SHARES = {"agent": 0.6, "tool": 0.4}


def origin(line: SummaryLine) -> str:
    """``tool`` for a fact found in a tool's output, else ``agent``."""
    f = line.fact
    return "tool" if f is not None and f.source in TOOL_SOURCES else "agent"


def positions(lines: Sequence[SummaryLine]) -> list[float]:
    """Each line's position in the cut order (see the module doc): the cumulative tokens of
    the lines of its origin that rank at or above it, over the origin's share. A line with a
    larger position is cut first. Plain and pinned lines get ``0.0`` (not ranked here)."""
    out = [0.0] * len(lines)
    for name, share in SHARES.items():
        idx = [
            i for i, x in enumerate(lines) if x.weight > 1 and not x.pinned and origin(x) == name
        ]
        idx.sort(key=lambda i: (-lines[i].score, -lines[i].turn, -i))
        total = 0
        for i in idx:
            total += estimate_text(lines[i].shown() + "\n")
            out[i] = total / share
    return out


def fact_rank(position: float) -> float:
    """A fact line's rank for the context builder from its :func:`positions` value: above
    every plain line (which rank by score, below 100), decreasing with the position."""
    return 100.0 + 100.0 / (1.0 + position / 100.0)
