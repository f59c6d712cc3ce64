"""The context builder: the messages a model call gets, built from sections within a token
budget whatever the history's length, and what was sent (hash, tokens per section).

A :class:`ContextSection` is a named part with a priority (higher is kept longer) and either a
text or a list of message *units* (the working buffer: a tool call and its result are one
unit, never split). The agent builds its sections (:data:`PRIORITIES`: the goal, pinned units,
the running summary, the recent buffer, the plan with step statuses, the latest checkpoint's
four answers, artifact excerpts) and adds any a caller provides: a :data:`SectionProvider` given
to :class:`~torpor.memory.Memory` (``sections=[...]``) is asked before every model call — the
extension point episodic memory plugs into as an ``episodes`` section.

How the budget cuts (:func:`build_context`): the tool definitions (``fixed_tokens``) and the
pinned units (a call not yet settled, a pending approval, the latest operator message) are
charged first; then sections are taken in descending priority (ties: the order given). A
section that does not fit whole is cut — a text keeps its head, a unit section keeps its
newest units — and every section of lower priority is left out entirely. So the least
important go first, in the documented order, and a lower-priority section never keeps anything
while a higher one lost something.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from .. import scrub, serde
from ..errors import BadInputError
from ..messages import Message
from .tokens import MESSAGE_OVERHEAD_TOKENS, REQUEST_OVERHEAD_TOKENS, estimate_message
from .tokens import estimate_text as _estimate_text

#: Default priorities of the agent's sections (higher is kept longer); a provider's section
#: takes the priority it gives (``episodes``: 40 is suggested, between the checkpoint and the
#: artifacts). ``recall``: the ledger records and past turns relevant to the current step
#: (:mod:`.recall`), after the buffer and before the plan.
PRIORITIES: dict[str, int] = {
    "goal": 100,
    "summary": 80,
    "buffer": 70,
    "recall": 65,
    "plan": 60,
    "checkpoint": 50,
    "episodes": 40,
    "artifacts": 30,
}

#: Where a section goes: ``system`` — the system message; ``goal`` — the first user message;
#: ``brief`` — a ``## name`` block appended to the system message; ``conversation`` — its units,
#: as messages after the goal.
Placement = Literal["system", "goal", "brief", "conversation"]


#: The context a model is given and ``torpor context`` prints (every section, as built).
MEMORY = scrub.sink("memory", "the context built for a model and shown by torpor context")


class RankedLine(NamedTuple):
    """A line of a ranked section (``ContextSection(ranked=...)``): cut lowest ``rank`` first
    (ties: the earlier line first), never when ``pinned``."""

    text: str
    rank: float
    pinned: bool = False


@dataclass(frozen=True)
class ContextSection:
    """One part of a context.

    ``name``: unique in a context (``summary``, ``plan``, ``episodes`` …); ``priority``: higher
    is kept longer (:data:`PRIORITIES`); ``text``: the section's text, or ``units``: groups of
    messages cut oldest first and never split; ``pinned``: indexes of units never cut (charged
    before any section); ``unit_tokens``: the tokens of each unit when known better than the
    estimate (a provider's reported count); ``placement``: see :data:`Placement`.
    """

    name: str
    priority: int
    text: str = ""
    units: tuple[tuple[Message, ...], ...] = ()
    pinned: frozenset[int] = frozenset()
    unit_tokens: tuple[int, ...] | None = None
    placement: Placement = "brief"
    ranked: tuple[RankedLine, ...] = ()
    cap: int | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise BadInputError("ContextSection: name must not be empty")
        if self.unit_tokens is not None and len(self.unit_tokens) != len(self.units):
            raise BadInputError(
                f"ContextSection {self.name!r}: {len(self.unit_tokens)} unit_tokens for "
                f"{len(self.units)} units"
            )
        if (self.text or self.ranked) and self.units:
            raise BadInputError(f"ContextSection {self.name!r}: give text or units, not both")
        if self.cap is not None and (self.cap < 0 or self.units):
            raise BadInputError(
                f"ContextSection {self.name!r}: cap={self.cap} must be >= 0, on a text section"
            )


@dataclass(frozen=True)
class SectionRequest:
    """What a :data:`SectionProvider` is told before a model call: the run, its goal and input,
    and ``focus`` — the text of the agent's latest unit (what it is working on now)."""

    run_id: str
    workflow: str
    goal: str
    input: Any
    focus: str
    budget_tokens: int


#: A caller's source of one more section (``None``: nothing this time). Asked before every
#: model call; what it returns must depend only on recorded data (the run's history, a store
#: it reads) so that a resumed run builds the same context an uninterrupted one would.
SectionProvider = Callable[[SectionRequest], "ContextSection | None"]


@dataclass
class BuiltContext:
    """A built context: the ``messages`` to send; ``sections``: tokens of each section as sent
    (0 for one left out); ``cut``: sections shortened or left out; ``total_tokens`` (tools and
    request overhead included) <= ``budget_tokens``; ``context_hash``: sha256 of the messages."""

    messages: list[Message]
    sections: dict[str, int]
    cut: list[str]
    total_tokens: int
    budget_tokens: int
    texts: dict[str, str] = field(default_factory=dict)

    @property
    def context_hash(self) -> str:
        return serde.hash_value([m.model_dump(mode="json") for m in self.messages])


def section_tokens(text: str, name: str = "") -> int:
    """Tokens of a text section as placed: its ``## name`` header and text (plus a message's
    overhead)."""
    return MESSAGE_OVERHEAD_TOKENS + _estimate_text(_block(name, text))


def _block(name: str, text: str) -> str:
    return f"## {name}\n{text}" if name else text


def _unit_costs(s: ContextSection) -> list[int]:
    if s.unit_tokens is not None:
        return list(s.unit_tokens)
    return [sum(estimate_message(m) for m in u) for u in s.units]


def _truncate(text: str, name: str, tokens: int) -> str:
    """The longest head of ``text`` (whole lines where possible) within ``tokens``."""
    if section_tokens(text, name) <= tokens:
        return text
    lo, hi = 0, len(text)
    while lo < hi:  # the longest prefix that fits
        mid = (lo + hi + 1) // 2
        if section_tokens(text[:mid] + " [...]", name) <= tokens:
            lo = mid
        else:
            hi = mid - 1
    if lo == 0:
        return ""
    head = text[:lo]
    cut = head.rfind("\n")
    if cut > lo // 2:
        head = head[:cut]
    return head + " [...]"


def _left_out(n: int) -> str:
    return f"({n} less relevant lines left out of this context)"


#: Tokens of the line a cut ranked section ends with (for any count up to a billion).
_NOTE_TOKENS = _estimate_text("\n" + _left_out(10**9))


def _ranked_fit(s: ContextSection, allowance: int) -> tuple[str, int, bool]:
    """The text of ranked section ``s`` within ``allowance`` tokens (its pinned lines and head
    whatever the allowance: they are charged before any section): ``(text, tokens, cut)``."""
    name = s.name if s.placement == "brief" else ""
    lines = [x.text for x in s.ranked]
    whole = "\n".join([s.text, *lines]) if s.text else "\n".join(lines)
    need = section_tokens(whole, name)
    if need <= allowance:
        return whole, need, False
    # Each line's cost alone: their sum is never below the text's estimate (ceilings).
    cost = [_estimate_text(x + "\n") for x in lines]
    size = section_tokens(s.text, name) + _NOTE_TOKENS  # the head, the line of what was left out
    keep = {i for i, x in enumerate(s.ranked) if x.pinned}
    size += sum(cost[i] for i in keep)
    order = sorted(
        (i for i in range(len(lines)) if i not in keep), key=lambda i: (-s.ranked[i].rank, -i)
    )
    for i in order:
        if size + cost[i] <= allowance:
            keep.add(i)
            size += cost[i]
    left_out = len(lines) - len(keep)
    body = [lines[i] for i in sorted(keep)]
    note = _left_out(left_out)
    text = "\n".join([*([s.text] if s.text else []), *body, note])
    return text, section_tokens(text, name), True


def _reserved(s: ContextSection) -> int:
    """Tokens a ranked section must have whatever the budget: its head and pinned lines."""
    if not s.ranked or not any(x.pinned for x in s.ranked):
        return 0
    name = s.name if s.placement == "brief" else ""
    pinned = [x.text for x in s.ranked if x.pinned]
    return (
        section_tokens(s.text, name) + _NOTE_TOKENS + sum(_estimate_text(x + "\n") for x in pinned)
    )


def build_context(
    budget_tokens: int, sections: Sequence[ContextSection], *, fixed_tokens: int = 0
) -> BuiltContext:
    """Build the messages from ``sections`` within ``budget_tokens`` (see the module doc).

    ``fixed_tokens``: tokens charged before anything (the tool definitions sent with the call).
    Raises BadInputError for duplicate section names or a budget too small to hold the fixed
    tokens and the pinned units and lines.
    """
    names = [s.name for s in sections]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise BadInputError(f"context sections named twice: {sorted(dup)}")
    left = budget_tokens - fixed_tokens - REQUEST_OVERHEAD_TOKENS
    costs = {s.name: _unit_costs(s) for s in sections if s.units}
    pinned_cost = sum(costs[s.name][i] for s in sections if s.units for i in s.pinned)
    reserved = {s.name: _reserved(s) for s in sections if s.ranked}
    pinned_cost += sum(reserved.values())
    if pinned_cost > left:
        raise BadInputError(
            f"context budget of {budget_tokens} tokens cannot hold the tool definitions "
            f"({fixed_tokens}) and the units and lines that must stay ({pinned_cost}): raise "
            "Memory(budget_tokens=...)"
        )
    left -= pinned_cost
    texts: dict[str, str] = {}
    kept_units: dict[str, list[int]] = {}
    spent: dict[str, int] = {}
    cut: list[str] = []
    capped: list[ContextSection] = []  # cut by their own cap: they grow in the second pass
    stopped = False
    for s in sorted(sections, key=lambda s: -s.priority):  # stable: ties keep their order
        if s.units:
            c = costs[s.name]
            keep = sorted(s.pinned)
            spent[s.name] = sum(c[i] for i in keep)
            if not stopped:
                for i in range(len(s.units) - 1, -1, -1):  # newest first
                    if i in s.pinned:
                        continue
                    if c[i] > left:
                        stopped = True
                        break
                    left -= c[i]
                    spent[s.name] += c[i]
                    keep.append(i)
            if len(keep) < len(s.units):
                cut.append(s.name)
                stopped = True
            kept_units[s.name] = sorted(keep)
            continue
        if not s.text and not s.ranked:
            spent[s.name] = 0
            continue
        own = reserved.get(s.name, 0)
        room = left + own
        by_cap = s.cap is not None and s.cap < room
        if by_cap:
            room = max(s.cap or 0, own)
        if stopped:
            room = own
        text, used, was_cut = _fit(s, room)
        if text:
            texts[s.name] = text
        spent[s.name] = used
        left -= used - own
        if was_cut:
            if by_cap and not stopped:
                capped.append(s)
            else:
                cut.append(s.name)
                stopped = True
    for s in capped:  # the second pass: into what the others left
        own = reserved.get(s.name, 0)
        text, used, was_cut = _fit(s, spent[s.name] + left)
        if text:
            texts[s.name] = text
        left -= used - spent[s.name]
        spent[s.name] = used
        if was_cut:
            cut.append(s.name)
    messages = _assemble(sections, texts, kept_units)
    if MEMORY.active:  # what a model is given and `torpor context` prints: no secret (G12)
        messages = [m.model_copy(update={"content": MEMORY.text(m.content)}) for m in messages]
        texts = {n: MEMORY.text(t) for n, t in texts.items()}
    total = budget_tokens - left
    return BuiltContext(
        messages=messages,
        sections={n: spent.get(n, 0) for n in names},
        cut=cut,
        total_tokens=total,
        budget_tokens=budget_tokens,
        texts=texts,
    )


def _fit(s: ContextSection, room: int) -> tuple[str, int, bool]:
    """A text section within ``room`` tokens: ``(text, tokens, cut)`` — a ranked one leaves
    out its lowest-ranked lines, a plain one keeps its head."""
    if s.ranked:
        return _ranked_fit(s, room)
    name = s.name if s.placement == "brief" else ""
    need = section_tokens(s.text, name)
    if need <= room:
        return s.text, need, False
    head = _truncate(s.text, name, room)
    return head, section_tokens(head, name) if head else 0, True


def _assemble(
    sections: Sequence[ContextSection], texts: dict[str, str], kept: dict[str, list[int]]
) -> list[Message]:
    """System (its sections, then each ``brief`` as a ``## name`` block), the goal as the first
    user message, then the conversation's kept units in order."""
    system = [texts[s.name] for s in sections if s.placement == "system" and s.name in texts]
    brief = [
        _block(s.name, texts[s.name])
        for s in sections
        if s.placement == "brief" and s.name in texts
    ]
    goal = [texts[s.name] for s in sections if s.placement == "goal" and s.name in texts]
    out: list[Message] = []
    if system or brief:
        out.append(Message.system("\n\n".join([*system, *brief])))
    if goal:
        out.append(Message.user("\n\n".join(goal)))
    for s in sections:
        if s.units:
            for i in kept.get(s.name, []):
                out.extend(s.units[i])
    return out
