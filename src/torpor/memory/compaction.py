"""Compaction: when the working buffer passes ``compact_at`` of its budget, its oldest settled
units are folded into a running summary, in one atomic recorded transition.

What is kept (the deterministic extractive summarizer, :func:`extract`): per unit one line —
its turn, each call as ``tool(args) -> outcome`` and the step that recorded it (the raw events
stay in the history; the line points back to them) — then the sentences of the model's or
operator's text that carry conclusions, decisions and their reasons, errors and their fixes,
approaches that failed and why, the error of a failed call, and the identifiers found anywhere
in the unit (paths, ids, hashes, numbers) verbatim. Raw tool outputs are dropped from the
*context*, never from the history.

The rules (tests/test_memory_compaction.py): a unit is the smallest thing moved, so a tool
call is never split from its result; a unit with a call not yet settled (a pending approval)
and the latest operator message are never folded; a summary that fails (the model call raised,
or returned nothing usable) leaves the buffer exactly as it was — never an empty history, never
an error text as the summary.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Protocol

from pydantic import BaseModel, Field

from ..errors import SummaryFailed, TorporError
from ..messages import Message, Model, ModelResponse, ToolSpec
from .buffer import Buffer, CallItem, Unit
from .context import RankedLine
from .decoding import decode_result
from .facts import (
    Fact,
    candidates,
    content_words,
    identifiers,
    result_facts,
    shape,
    supersede,
    text_segments,
    value_segments,
)
from .shares import fact_rank, positions
from .tokens import estimate_text


class ModelCaller(Protocol):
    """What a summarizer is given: a way to make a recorded model call (the agent's context,
    :class:`torpor.agents.context.Context`, is one)."""

    def call_model(
        self,
        model: Model,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        name: str = "model",
    ) -> ModelResponse: ...


class SummaryLine(BaseModel):
    """One line of the running summary: the ``turn`` it summarizes, its ``text``, its
    ``weight`` (2: carries a fact — a decision, an error, an identifier, an operator's words;
    1: a plain record of what ran), its ``score`` (how salient the fact is, :mod:`.facts`) and
    whether it is ``pinned`` (an operator's instruction not superseded: never cut); ``fact``:
    the record it shows, when it is one (kind, identifiers, provenance). Past a limit, plain
    lines go first, then the least salient facts (ties: the oldest first)."""

    turn: int
    text: str
    weight: int = 1
    #: The fact part alone (no call descriptions, no refs): what the line is shortened to
    #: before facts are dropped.
    core: str = ""
    score: float = 0.0
    pinned: bool = False
    fact: Fact | None = None

    def shown(self) -> str:
        """The line as the summary section shows it."""
        return f"- [t{self.turn}] {self.text}"


class Summary(BaseModel):
    """The running summary: its lines in turn order and how many turns it folded."""

    lines: list[SummaryLine] = Field(default_factory=list)
    turns_folded: int = 0
    model_turns_folded: int = 0
    dropped_lines: int = 0

    def header(self) -> str:
        """The summary's first line (empty before the first compaction)."""
        if not self.lines and not self.turns_folded:
            return ""
        head = (
            f"({self.turns_folded} earlier turns summarized, {self.model_turns_folded} of them "
            "model turns; their raw events stay in the history: torpor events RUN"
        )
        if self.dropped_lines:
            head += f"; {self.dropped_lines} low-value lines dropped"
        return head + ")"

    def text(self) -> str:
        """The whole summary (empty before the first compaction)."""
        head = self.header()
        if not head:
            return ""
        return head + "\n" + "\n".join(x.shown() for x in self.lines)

    def tokens(self) -> int:
        return estimate_text(self.text())

    def ranked(self) -> tuple[RankedLine, ...]:
        """The lines with their rank for the context builder (a pinned line is never cut;
        plain lines rank below every fact)."""
        pos = positions(self.lines)
        return tuple(
            RankedLine(
                x.shown(),
                x.score + 100.0
                if x.pinned and x.weight > 1
                else fact_rank(pos[i])
                if x.weight > 1
                else x.score,
                x.pinned,
            )
            for i, x in enumerate(self.lines)
        )

    def folded(
        self, units: Sequence[Unit], lines: Sequence[SummaryLine], keep_tokens: int
    ) -> Summary:
        """The summary after ``units`` are folded into it as ``lines`` (:func:`merged`),
        within ``keep_tokens`` (:meth:`trimmed`)."""
        return Summary(
            lines=merged(self.lines, lines),
            turns_folded=self.turns_folded + len(units),
            model_turns_folded=self.model_turns_folded + sum(u.kind == "model" for u in units),
            dropped_lines=self.dropped_lines,
        ).trimmed(keep_tokens)

    def trimmed(self, max_tokens: int) -> Summary:
        """The summary within ``max_tokens``: plain (weight-1) lines dropped first, then fact
        lines shortened to their facts, then the least salient facts dropped (ties: the oldest
        first); pinned lines last of all, oldest first."""
        lines = list(self.lines)
        dropped = self.dropped_lines
        size = self.tokens() + 12  # (room for the header's count of dropped lines)
        # (Token counts are kept by difference: the estimate of a line does not depend on the
        # others, within a token of rounding per line.)
        for stage in ("plain", "shorten", "facts", "pinned"):
            if size <= max_tokens:
                break
            if stage == "shorten":
                for i, x in enumerate(lines):
                    if size <= max_tokens:
                        break
                    if x.core and x.core != x.text:
                        size -= estimate_text(x.text) - estimate_text(x.core)
                        lines[i] = x.model_copy(update={"text": x.core})
                continue
            fact, pinned = {"plain": (False, False), "facts": (True, False)}.get(
                stage, (True, True)
            )
            pick = [i for i, x in enumerate(lines) if (x.weight > 1) == fact and x.pinned == pinned]
            if stage == "facts":  # by origin's share (:mod:`.shares`), then least salient
                pos = positions(lines)
                pick.sort(key=lambda i: (-pos[i], lines[i].score, lines[i].turn, i))
            else:
                pick.sort(key=lambda i: (lines[i].score, lines[i].turn, i))
            gone: set[int] = set()
            for i in pick:
                if size <= max_tokens:
                    break
                size -= estimate_text(lines[i].shown() + "\n")
                gone.add(i)
            dropped += len(gone)
            lines = [x for i, x in enumerate(lines) if i not in gone]
        out = self.model_copy(update={"lines": lines, "dropped_lines": dropped})
        while lines and out.tokens() > max_tokens:  # rounding, the header: until it holds
            worst = min(
                range(len(lines)),
                key=lambda i: (lines[i].pinned, lines[i].weight, lines[i].score, lines[i].turn),
            )
            del lines[worst]
            out = self.model_copy(update={"lines": lines, "dropped_lines": out.dropped_lines + 1})
        return out


class Summarizer(Protocol):
    """Writes the summary lines of ``units`` (oldest first); raises :class:`SummaryFailed` when
    it cannot. ``name`` is recorded with the compaction."""

    name: str

    def summarize(
        self, ctx: ModelCaller, units: Sequence[Unit], summary: Summary
    ) -> list[SummaryLine]: ...


# ------------------------------------------------------------------ the extractive summarizer

#: Shortest argument string searched for facts (a path or a name alone is the call's own
#: description; a message, a note or a document the agent writes is searched).
ARG_TEXT_CHARS = 60
#: Longest operator message or note kept in the summary, in characters.
OPERATOR_CHARS = 600


def _args_text(args: object) -> str:
    text = json.dumps(args, sort_keys=True, default=str, separators=(",", ":"))
    # Within 120 characters keeping the head and the tail (a command's last flags say what
    # was tried as often as its first words say what ran).
    return text if len(text) <= 120 else text[:72] + "..." + text[-45:]


def call_label(tool: str, args: object, status: str, step: str | None) -> str:
    """A call as the summary names it: ``tool(args) -> status [step]``."""
    where = f" [{step}]" if step else ""
    return f"{tool}({_args_text(args)}) -> {status}{where}"


def call_facts(c: CallItem, *, turn: int, goal: str = "") -> list[Fact]:
    """The facts of a settled call's result: those found when it settled (``c.facts``), or
    found now in its buffered text (decoded) for a call buffered before facts were kept."""
    if c.facts is not None:
        return list(c.facts)
    if c.status == "pending":
        return []
    value = decode_result(c.result)
    if c.status != "succeeded" and isinstance(value, dict) and "detail" in value:
        value = value["detail"]
    return result_facts(
        value,
        status=c.status,
        turn=turn,
        step=c.step,
        goal=goal,
        label=call_label(c.tool, c.args, c.status, c.step),
        args=c.args,
    )


def unit_lines(u: Unit, *, goal: str = "", shapes: Counter[str] | None = None) -> list[SummaryLine]:
    """The summary lines of one unit: one per fact found in it (:mod:`.facts`: the model's or
    operator's text, the calls' arguments and results), in order, then one plain line of what
    ran (each call as ``tool(args) -> outcome [step]``, and the unit's refs)."""
    goal_words = frozenset(content_words(goal))
    facts: list[Fact] = []
    if u.kind == "operator":
        text = f"operator said: {u.text[:OPERATOR_CHARS]}"
        facts.append(
            Fact(
                kind="instruction",
                text=text,
                ids=identifiers(u.text),
                turn=u.turn,
                source="operator",
                score=10.0,
                pinned=True,
            )
        )
    elif u.kind == "note":
        text = f"note: {u.text[:OPERATOR_CHARS]}"
        facts.append(Fact(kind="finding", text=text, turn=u.turn, source="note", score=4.0))
    else:
        segs = text_segments(u.text, "model")
        step = u.refs[0] if u.refs else None
        counts = shapes if shapes is not None else Counter(shape(s.text) for s in segs)
        facts += candidates(segs, goal_words, counts, u.turn, step)
    for c in u.calls:
        segs = value_segments(c.args, "args", min_chars=ARG_TEXT_CHARS)
        facts += candidates(segs, goal_words, Counter(), u.turn, c.step)
        facts += call_facts(c, turn=u.turn, goal=goal)
    seen: set[str] = set()
    out: list[SummaryLine] = []
    for f in facts:
        if f.text in seen:
            continue
        seen.add(f.text)
        out.append(
            SummaryLine(turn=u.turn, text=f.text, weight=2, score=f.score, pinned=f.pinned, fact=f)
        )
    ran = [call_label(c.tool, c.args, c.status, c.step) for c in u.calls]
    ran = [x for x in ran if not any(line.text.startswith(x) for line in out)]
    if u.refs:
        ran.append("refs: " + ", ".join(u.refs))
    if ran:
        out.append(SummaryLine(turn=u.turn, text="; ".join(ran)))
    return out


def extract_unit(u: Unit, *, goal: str = "") -> SummaryLine:
    """One unit as a single summary line (what a :class:`ModelSummarizer` is shown): its facts,
    then what ran; weight 2 when it has a fact, ``core`` its facts alone."""
    lines = unit_lines(u, goal=goal)
    facts = [x.text for x in lines if x.weight > 1]
    return SummaryLine(
        turn=u.turn,
        text="; ".join(x.text for x in lines),
        weight=2 if facts else 1,
        core="; ".join(facts),
        score=max((x.score for x in lines), default=0.0),
    )


#: How many fact lines of one shape (:func:`~torpor.memory.facts.shape`) from tool outputs a
#: summary takes as facts; later ones of that shape are plain lines
#: (:class:`ExtractiveSummarizer`).
TEMPLATE_REPEATS = 3


class ExtractiveSummarizer:
    """The deterministic default: the :func:`unit_lines` of each unit, a fact said before
    (the same text) kept once; never fails. ``goal``: the agent's goal (its words make a
    fact more relevant); ``forms``: how often each shape of a tool-output fact occurs in the
    run's ledger so far (a shape seen :data:`TEMPLATE_REPEATS` times is a template: its
    later lines are plain)."""

    name = "extractive"

    def __init__(self, goal: str = "", forms: Mapping[str, int] | None = None):
        self.goal = goal
        self.forms = forms or {}

    def summarize(
        self, ctx: ModelCaller, units: Sequence[Unit], summary: Summary
    ) -> list[SummaryLine]:
        # Novelty: what the model says in the same shape turn after turn is a template.
        shapes: Counter[str] = Counter(
            shape(s.text)
            for u in units
            if u.kind in ("model", "plan")
            for s in text_segments(u.text, "model")
        )
        shapes.update(shape(x.text) for x in summary.lines if x.weight > 1)
        out: list[SummaryLine] = []
        known = {x.text for x in summary.lines if x.weight > 1}
        # Novelty across the run: a line of a tool's output of a shape the run's ledger
        # (``forms``; without one, the summary) already holds TEMPLATE_REPEATS times (a
        # routine log line, a listing's row, a recurring warning) is a template, not news: it
        # stays a plain line (the ledger keeps its fact).
        seen: Counter[str] = Counter(self.forms)
        if not self.forms:
            seen.update(
                shape(x.text)
                for x in summary.lines
                if x.fact is not None and x.fact.source in ("result", "args")
            )
        for u in units:
            for line in unit_lines(u, goal=self.goal, shapes=shapes):
                if line.weight > 1 and line.text in known:
                    continue  # said before: the older line stands
                known.add(line.text)
                if line.fact is not None and line.fact.source in ("result", "args"):
                    form = shape(line.text)
                    seen[form] += 1
                    if seen[form] > TEMPLATE_REPEATS:
                        line = line.model_copy(update={"weight": 1})
                out.append(line)
        return out


class ModelSummarizer:
    """A model writes the summary: one recorded model call (step ``summarize``, never paid
    twice after a crash) per compaction, given the current summary and the units to fold; its
    answer's non-empty lines become summary lines (weight 2). An error from the model, or an
    answer with no line, raises :class:`SummaryFailed` (the buffer stays as it was)."""

    def __init__(self, model: Model, *, instructions: str = ""):
        self.model = model
        self.name = model.model_id
        self.instructions = instructions or (
            "Summarize these agent turns for the agent itself, one fact per line. Keep "
            "conclusions, decisions with their reasons, identifiers (paths, ids, hashes, "
            "numbers) verbatim, errors and their fixes, approaches that failed and why, and the "
            "step references in brackets. Drop raw tool output."
        )

    def summarize(
        self, ctx: ModelCaller, units: Sequence[Unit], summary: Summary
    ) -> list[SummaryLine]:
        body = "\n".join(extract_unit(u).text for u in units)
        msgs = [
            Message.system(self.instructions),
            Message.user(f"Summary so far:\n{summary.text() or '(none)'}\n\nTurns:\n{body}"),
        ]
        try:
            resp = ctx.call_model(self.model, msgs, name="summarize")
        except TorporError as exc:
            raise SummaryFailed(f"the summarizer model failed: {exc}") from exc
        lines = [x.strip().lstrip("-* ").strip() for x in resp.message.content.splitlines()]
        lines = [x for x in lines if x]
        if not lines:
            raise SummaryFailed("the summarizer model answered nothing")
        last = units[-1].turn
        return [SummaryLine(turn=last, text=x, weight=2) for x in lines]


def merged(old: Sequence[SummaryLine], new: Sequence[SummaryLine]) -> list[SummaryLine]:
    """The summary's lines after ``new`` are added to ``old``: an operator's instruction that
    restates an earlier pinned one (:func:`.facts.supersede`) unpins it (it stays, ranked like
    any fact, marked ``superseded_by``)."""
    out = list(old)
    for x in new:
        if x.pinned and x.fact is not None and x.fact.kind == "instruction":
            for i, y in enumerate(out):
                if y.pinned and y.fact is not None:
                    (f,) = supersede([y.fact], x.fact)
                    if not f.pinned:
                        out[i] = y.model_copy(update={"fact": f, "pinned": False})
        out.append(x)
    return out


def due(buffer: Buffer, buffer_tokens: int, compact_at: float) -> bool:
    """Whether compaction is due: the buffer holds more than ``compact_at`` of its budget."""
    return buffer.tokens() > buffer_tokens * compact_at


def choose(buffer: Buffer, target_tokens: int) -> list[int]:
    """Indexes of the units to fold, oldest first, until the buffer would be within
    ``target_tokens``: whole units only, never a pinned one (:meth:`Buffer.pinned`), and never
    the newest unit."""
    pinned = buffer.pinned()
    left = buffer.tokens()
    out: list[int] = []
    for i, u in enumerate(buffer.units[:-1]):
        if left <= target_tokens:
            break
        if i in pinned:
            continue
        out.append(i)
        left -= u.tokens()
    return out
