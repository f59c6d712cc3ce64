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
import re
from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, Field

from ..errors import SummaryFailed, TorporError
from ..messages import Message, Model, ModelResponse, ToolSpec
from .buffer import Buffer, Unit
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
    """One line of the running summary: the ``turn`` it summarizes, its ``text``, and its
    ``weight`` (2: carries a fact — a decision, an error, an identifier, an operator's words;
    1: a plain record of what ran). Past the summary's budget, weight-1 lines go first, oldest
    first."""

    turn: int
    text: str
    weight: int = 1
    #: The fact part alone (no call descriptions, no refs): what the line is shortened to
    #: before facts are dropped.
    core: str = ""


class Summary(BaseModel):
    """The running summary: its lines in turn order and how many turns it folded."""

    lines: list[SummaryLine] = Field(default_factory=list)
    turns_folded: int = 0
    model_turns_folded: int = 0
    dropped_lines: int = 0

    def text(self) -> str:
        """The summary as its context section shows it (empty before the first compaction)."""
        if not self.lines and not self.turns_folded:
            return ""
        head = (
            f"({self.turns_folded} earlier turns summarized, {self.model_turns_folded} of them "
            "model turns; their raw events stay in the history: torpor events RUN"
        )
        if self.dropped_lines:
            head += f"; {self.dropped_lines} low-value lines dropped"
        return head + ")\n" + "\n".join(f"- [t{x.turn}] {x.text}" for x in self.lines)

    def tokens(self) -> int:
        return estimate_text(self.text())

    def trimmed(self, max_tokens: int) -> Summary:
        """The summary within ``max_tokens``: weight-1 lines dropped oldest first, then weight-2
        lines oldest first."""
        lines = list(self.lines)
        dropped = self.dropped_lines
        size = self.tokens() + 12  # (room for the header's count of dropped lines)
        # (Token counts are kept by difference: the estimate of a line does not depend on the
        # others, within a token of rounding per line.)
        for stage in ("plain", "shorten", "facts"):
            i = 0
            while size > max_tokens and i < len(lines):
                x = lines[i]
                if (stage == "plain" and x.weight == 1) or stage == "facts":
                    size -= estimate_text(f"- [t{x.turn}] {x.text}\n")
                    del lines[i]
                    dropped += 1
                    continue
                if stage == "shorten" and x.core and x.core != x.text:
                    size -= estimate_text(x.text) - estimate_text(x.core)
                    lines[i] = x.model_copy(update={"text": x.core})
                i += 1
        out = self.model_copy(update={"lines": lines, "dropped_lines": dropped})
        while lines and out.tokens() > max_tokens:  # rounding, the header: until it holds
            plain = [i for i, x in enumerate(lines) if x.weight == 1]
            del lines[plain[0] if plain else 0]
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

_EXT = "py|md|json|txt|toml|yaml|yml|cfg|ini|sql|js|ts|rs|go|c|h|log|csv|lock"
_PATH = rf"(?:[\w.-]+/)+[\w.-]+|\b[\w-]+\.(?:{_EXT})\b"
_HEX = r"\b[0-9a-f]{7,64}\b"
_ID = r"\b(?=[\w:-]*\d)[A-Za-z]\w*(?:[-:]\w+)+"
_NUM = r"(?<![\w.])\d{3,}(?:\.\d+)?\b|#\d+"
#: Identifiers kept verbatim: paths, hex hashes, ids with a digit, numbers of 3+ digits, #seq.
IDENTIFIER = re.compile(f"{_PATH}|{_HEX}|{_ID}|{_NUM}")
#: The identifiers that make a line a fact by themselves (a bare number does not: it is kept
#: verbatim with the others, but "turn 123" alone is no reason to keep a line).
STRONG_IDENTIFIER = re.compile(f"{_PATH}|{_HEX}|{_ID}")
#: A sentence that carries a conclusion, a decision and its reason, an error and its fix, or a
#: failed approach and why.
SIGNAL = re.compile(
    r"\b(decid\w*|decision|because|since|so that|conclu\w*|found|result\w*|therefore|chose|"
    r"choose|instead|error\w*|fail\w*|fix\w*|broke\w*|work\w*around|didn't work|does not work|"
    r"doesn't work|must|never|always|do not|don't|should|note|important|blocked|denied)\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
#: Most identifiers kept from one unit's tool results (the model's text keeps all of its own).
MAX_RESULT_IDS = 8
SENTENCE_CHARS = 300


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def _args_text(args: object) -> str:
    text = json.dumps(args, sort_keys=True, default=str, separators=(",", ":"))
    return text if len(text) <= 120 else text[:117] + "..."


def _ids(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for m in IDENTIFIER.finditer(text):
        seen.setdefault(m.group(), None)
    return list(seen)


def extract_unit(u: Unit) -> SummaryLine:
    """The summary line of one unit (see the module doc)."""
    parts: list[str] = []
    weight = 1
    if u.kind == "operator":
        parts.append(f"operator said: {u.text[: SENTENCE_CHARS * 2]}")
        weight = 2
    elif u.kind == "note":
        parts.append(f"note: {u.text[:SENTENCE_CHARS]}")
        weight = 2
    else:
        keep = [s[:SENTENCE_CHARS] for s in _sentences(u.text) if SIGNAL.search(s)]
        keep += [
            s[:SENTENCE_CHARS]
            for s in _sentences(u.text)
            if s[:SENTENCE_CHARS] not in keep and STRONG_IDENTIFIER.search(s)
        ]
        if keep:
            parts.append(" ".join(keep))
            weight = 2
    for c in u.calls:
        where = f" [{c.step}]" if c.step else ""
        call = f"{c.tool}({_args_text(c.args)}) -> {c.status}{where}"
        if c.status not in ("succeeded", "pending"):
            call += f": {c.result[:SENTENCE_CHARS]}"
            weight = 2
        parts.append(call)
    found = [i for i in _ids(" ".join(c.result for c in u.calls if c.status == "succeeded"))]
    found = [i for i in found if i not in " ".join(parts)][:MAX_RESULT_IDS]
    if found:
        parts.append("ids: " + ", ".join(found))
        if any(STRONG_IDENTIFIER.fullmatch(i) for i in found):
            weight = 2
    core = [p for p in parts if not any(p.startswith(f"{c.tool}(") for c in u.calls)]
    if u.refs:
        parts.append("refs: " + ", ".join(u.refs))
    return SummaryLine(
        turn=u.turn,
        text="; ".join(parts),
        weight=weight,
        core="; ".join(core) if weight > 1 else "",
    )


class ExtractiveSummarizer:
    """The deterministic default: one :func:`extract_unit` line per unit; never fails."""

    name = "extractive"

    def summarize(
        self, ctx: ModelCaller, units: Sequence[Unit], summary: Summary
    ) -> list[SummaryLine]:
        return [extract_unit(u) for u in units]


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
