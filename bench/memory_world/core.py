"""The planted-fact world's data: probes, facts, turns, the cue words, and the allocator of
unique values (see the package doc)."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Literal

KINDS = ("identifier", "decision", "failed", "instruction", "commitment", "question")
PLACES = ("model", "tool", "operator")

#: Words an extractive summarizer keyed on cue words would look for. At least a third of the
#: facts carry none of them, as a case-insensitive substring, anywhere in the turn that plants
#: them (the model's text, the call, the tool's output, the operator's message).
CUE_WORDS = (
    "decision",
    "decided",
    "decide",
    "because",
    "since",
    "so that",
    "chose",
    "choose",
    "conclude",
    "concluded",
    "found",
    "result",
    "therefore",
    "failed",
    "failure",
    "error",
)
_CUE_RE = re.compile("|".join(re.escape(w) for w in CUE_WORDS), re.IGNORECASE)


def cue_words_in(text: str) -> list[str]:
    """The cue words in ``text`` (case-insensitive substrings), in order of appearance."""
    return [m.group(0).lower() for m in _CUE_RE.finditer(text)]


ProbeKind = Literal["exact", "term", "near"]


@dataclass(frozen=True)
class Probe:
    """What must be in a context for a fact to count as kept.

    ``exact``: ``text`` verbatim and case-sensitive, not part of a longer token (a path that
    lost its leading ``/``, a hash cut short or an id glued to an escape's ``n`` do not count);
    numbers are bounded by non-word characters before and non-digits after (``840ms``
    counts for ``840``, ``840f95`` does not). ``term``: ``text`` case-insensitive, bounded
    by non-word characters.
    ``near``: ``text`` and ``other`` (both case-insensitive, bounded) at most ``window``
    words apart, in either order (a number with what it names).
    """

    kind: ProbeKind
    text: str
    other: str = ""
    window: int = 6

    def pattern(self) -> re.Pattern[str]:
        if self.kind == "exact":
            if self.text.isdigit():
                return re.compile(rf"(?<![\w.]){re.escape(self.text)}{_NUM_END}")
            return re.compile(rf"(?<![\w/.\-]){re.escape(self.text)}(?![\w/\-]|\.\w)")
        a, b = _bounded(self.text), _bounded(self.other)
        if self.kind == "term":
            return re.compile(a, re.IGNORECASE)
        gap = rf"\W+(?:\w+\W+){{0,{self.window}}}"
        return re.compile(rf"{a}{gap}{b}|{b}{gap}{a}", re.IGNORECASE)

    def found_in(self, haystack: str) -> bool:
        return self.pattern().search(haystack) is not None

    def __str__(self) -> str:
        return f"{self.text}~{self.other}" if self.kind == "near" else self.text


#: After a number: not more digits, a decimal part, or more hex with a digit (a hash).
_NUM_END = r"(?!\d|\.\d|[0-9a-fA-F]+\d)"


def _bounded(term: str) -> str:
    if term.isdigit():
        return rf"(?<![\w.]){re.escape(term)}{_NUM_END}"
    return rf"(?<![\w\-]){re.escape(term)}(?![\w\-]|\.\w)"


@dataclass(frozen=True)
class Fact:
    """A planted fact. ``kind`` (:data:`KINDS`), ``place`` (:data:`PLACES`: the model's text,
    a tool's output, an operator's message), ``turn`` (0-based model turn; an operator message
    reaches the agent before that turn's model call, a tool output is in the context of the
    next one), ``statement``: the words that state it, ``probes``: all must be found,
    ``template``: which phrasing planted it, ``cue_free``: the whole turn has no cue word,
    ``subject``: instructions on the same subject supersede earlier ones, ``superseded_by``:
    the id of the instruction that replaced this one (None: still in force)."""

    id: str
    kind: str
    place: str
    turn: int
    statement: str
    probes: tuple[Probe, ...]
    template: str
    cue_free: bool
    subject: str = ""
    superseded_by: str | None = None
    #: What the fact is about in the world's words (a decision's topic, a failed approach, what
    #: an identifier names, a commitment's or question's term and service, an instruction's
    #: subject): what a probe turn names (bench/memory_probes.py).
    about: str = ""

    def kept(self, haystack: str) -> bool:
        """Whether every probe is in ``haystack`` (see :func:`haystack`)."""
        return all(p.found_in(haystack) for p in self.probes)


@dataclass(frozen=True)
class Turn:
    """What happens at one model turn: the model's text ``say`` and its one call (``tool``,
    ``args``); the tool's ``output`` (a JSON-shaped value) or the message it raises with
    (``raises``); an ``operator`` message delivered before the turn's model call."""

    index: int
    say: str
    tool: str
    args: dict[str, Any]
    output: Any = None
    raises: str | None = None
    operator: str | None = None

    def texts(self) -> list[str]:
        """Every text of the turn, as a model could be shown it."""
        import json

        out = [self.say, json.dumps(self.args), self.operator or "", self.raises or ""]
        if isinstance(self.output, str):
            out.append(self.output)
        elif self.output is not None:
            out.append(json.dumps(self.output, indent=1))
            out.append(json.dumps(self.output))
        return out


@dataclass(frozen=True)
class World:
    """A seeded world: its ``turns`` and the ``facts`` planted in them."""

    family: str
    seed: int
    goal: str
    turns: tuple[Turn, ...]
    facts: tuple[Fact, ...]

    def required(self, before: int) -> list[Fact]:
        """The facts the context of model call ``before`` must hold: planted before that turn
        (an operator message of that turn included) and not superseded before it."""
        by_id = {f.id: f for f in self.facts}
        out = []
        for f in self.facts:
            if f.turn > before or (f.turn == before and f.place != "operator"):
                continue
            later = by_id.get(f.superseded_by or "")
            if later is not None and (
                later.turn < before or (later.turn == before and later.place == "operator")
            ):
                continue
            out.append(f)
        return out


def haystack(texts: list[str]) -> str:
    """The text probes are matched against: the context's texts as given, and again with JSON
    string escapes decoded (a model reads ``\\n`` in a tool result as a line break)."""
    raw = "\n".join(texts)
    decoded = (
        raw.replace("\\n", "\n").replace("\\t", "\t").replace('\\"', '"').replace("\\\\", "\\")
    )
    return raw + "\n" + decoded


@dataclass
class Names:
    """Unique values for one world: numbers and terms handed out at most once."""

    rng: random.Random
    used_nums: set[int] = field(default_factory=set)
    used_terms: set[str] = field(default_factory=set)
    avoid: set[int] = field(default_factory=set)

    def num(self, lo: int = 1000, hi: int = 99999) -> int:
        # A long world (thousands of turns) uses up a small range: past it, the range grows by
        # a digit (5.41.31 becomes 5.1041.31); a world that never uses one up is unchanged.
        while sum(1 for x in self.used_nums if lo <= x <= hi) > hi - lo:
            lo, hi = hi + 1, hi * 10 + 9
        for tries in range(10_000):  # (past 200 tries, one a distractor has will do)
            n = self.rng.randint(lo, hi)
            if n not in self.used_nums and (tries > 200 or n not in self.avoid):
                self.used_nums.add(n)
                return n
        raise RuntimeError(f"no unused number left in [{lo}, {hi}]")

    def term(self, pool: tuple[str, ...]) -> str:
        free = [t for t in pool if t not in self.used_terms]
        if not free:
            base = self.rng.choice(pool)
            t = f"{base}-{self.num(2, 999)}"
        else:
            t = self.rng.choice(free)
        self.used_terms.add(t)
        return t

    def hexs(self, n: int) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(n))
