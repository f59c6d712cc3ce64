"""Facts extracted from a unit of the working buffer: typed records (:class:`Fact`) with their
provenance, found by structure, salience and novelty rather than by cue words alone.

Where a fact can come from: the model's text, an operator's or a note's words, a tool call's
arguments and its result — each *decoded* first (a result is walked as the JSON value it is,
never searched as escaped text, so ``\\n2026-…`` stays a line break and a date; a string that
holds JSON is decoded in turn).

How a segment (a sentence of prose, a line of a log or listing) is scored — the classic
features of extractive summarization (Edmundson 1969; Kupiec et al. 1995: cue phrases,
location, title words, proper nouns and numbers) adapted to an agent's turns:

- *what it says*: broad lexicons of failure (errors, refusals, timeouts, exit codes, log levels,
  exceptions), decision (chose, went with, switched to, rather than, ruled out …), instruction
  (must, never, make sure …, or an imperative operator message), commitment (I'll, will, next
  …) and open question (``?``, unclear, whether …); a cue alone is worth less than its
  structure;
- *structure*: the JSON key a string sits under (``error``, ``reason``, ``decision`` …), the
  markdown heading or ``Label:`` it sits under, a log line's level, a traceback's last line, the
  tail of a long output (where failures are reported);
- *specificity*: identifiers (absolute paths with their ``/``, URLs, hashes, ids with a digit,
  versions, numbers with the word they count) and code-like or capitalised names; an
  identifier named by the words before it (``release rel-…``, ``commit 3f9c…``) counts more;
- *novelty*: a segment whose shape (digits and ids masked) repeats within the batch being
  folded is a template (filler like ``Turn 12: reading the next file.``, routine log lines)
  and counts less; a segment with almost no content words counts for nothing;
- *relevance*: words shared with the goal.

Only segments scoring at least :data:`MIN_SCORE` become facts: a line is never a fact merely
because it holds a path or an id (a realistic log would flood the summary), and at most
:data:`MAX_RESULT_FACTS` come from one tool result (the best-scoring). The score ranks facts
when the context has no room for all of them (:mod:`.context`): the least relevant go first.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, Field

from .decoding import leaves
from .facts_output import (
    is_underline,
    named_value,
    prose_key,
    setext_heading,
    skeleton,
    table_rows,
)

FactKind = Literal[
    "instruction", "decision", "failure", "commitment", "question", "identifier", "finding"
]
FactSource = Literal["model", "operator", "note", "args", "result", "error"]


class Fact(BaseModel):
    """One extracted fact: what ``kind`` it is, its ``text`` (verbatim, decoded, shortened to
    :data:`FACT_CHARS` keeping its salient part), the identifiers it carries (``ids``), and its
    provenance — the buffer ``turn``, where in the unit it was found (``source``) and the
    recorded ``step`` it came from (``model#3``, ``tool:c1@v3``; the run's history has the
    raw event). ``score`` ranks it (higher is kept longer); ``pinned``: never cut from the
    context (an operator's instruction until a later one ``superseded_by`` that turn)."""

    kind: FactKind
    text: str
    ids: list[str] = Field(default_factory=list)
    turn: int = 0
    source: FactSource = "model"
    step: str | None = None
    score: float = 0.0
    pinned: bool = False
    superseded_by: int | None = None


#: Least score of a fact (see the module doc).
MIN_SCORE = 1.0
#: Most facts taken from one tool result (the best-scoring ones).
MAX_RESULT_FACTS = 5
#: Longest fact text, in characters (a longer segment keeps its salient clauses).
FACT_CHARS = 280

# ------------------------------------------------------------------ identifiers

_EXT = "py|md|json|txt|toml|yaml|yml|cfg|ini|sql|js|ts|rs|go|c|h|log|csv|lock|sh|html|xml|conf"
_URL = r"\b[a-z][a-z0-9+.-]*://[^\s\"'<>()\[\]{},]+"
_PATH = rf"(?<![\w/.-])(?:~|\.{{1,2}})?/?(?:[\w.@-]+/)+[\w.@-]*[\w@-]|\b[\w-]+\.(?:{_EXT})\b"
_HEX = r"\b[0-9a-f]{7,64}\b"
_ID = r"\b(?=[\w:.-]*\d)[A-Za-z][\w]*(?:[-:.][\w]+)+"
_ALNUM = r"\b(?=[A-Za-z_]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]+_?[A-Za-z0-9_]*\d[A-Za-z0-9_]*\b"
_NUM = r"(?<![\w.])\d{3,}(?:\.\d+)?\b|#\d+|\bv?\d+\.\d+(?:\.\d+)+\b"
#: Identifiers kept verbatim: URLs, paths (absolute ones with their leading ``/``), hex
#: hashes, ids with a digit, versions, numbers of 3+ digits, ``#seq``.
IDENTIFIER = re.compile(f"{_URL}|{_PATH}|{_HEX}|{_ID}|{_ALNUM}|{_NUM}")
#: The identifiers that are specific (a bare number is not).
STRONG_IDENTIFIER = re.compile(f"{_URL}|{_PATH}|{_HEX}|{_ID}|{_ALNUM}")
_TIMESTAMP = re.compile(
    r"\b\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)?"
)
_NAMING = re.compile(
    r"\b(id|key|hash|sha|digest|commit|release|version|build|ticket|issue|path|file|dir|"
    r"token|tag|branch|image|url|port|host|account|order|number|no|ref|run|job|pr|record|"
    r"revision|checksum|batch|invoice|customer|user|table|bucket|region|endpoint|artifact|"
    r"archive|bundle|report|dump|snapshot|backup|package|manifest|"
    r"(?:stored|saved|written|created|uploaded|moved|copied|located|published|found|kept|"
    r"lives?|deployed|pushed|tagged) (?:at|to|in|as|under|on))\b"
    r"(?:\s+(?:is|are|was|were|now|becomes|became|set to|of|for))?[\s:=#'\"]*$",
    re.IGNORECASE,
)


def identifiers(text: str) -> list[str]:
    """The identifiers of ``text`` in order, once each (timestamps are not identifiers)."""
    spans = [m.span() for m in _TIMESTAMP.finditer(text)]
    seen: dict[str, None] = {}
    for m in IDENTIFIER.finditer(text):
        if any(a <= m.start() < b for a, b in spans):
            continue
        seen.setdefault(m.group().rstrip(".:"), None)
    return list(seen)


# ------------------------------------------------------------------ lexicons

_FAIL = re.compile(
    r"\b(fail\w*|error\w*|exception|traceback|crash\w*|panic\w*|fatal|refus\w*|denied|"
    r"timed? ?out|timeout\w*|unable|cannot|can't|couldn't|could not|didn't|did not|doesn't|"
    r"does not|won't|broke\w*|broken|regress\w*|revert\w*|rolled back|roll(ed)?back|abort\w*|"
    r"non-?zero|not found|no such|permission|forbidden|unauthori[sz]ed|invalid|mismatch\w*|"
    r"corrupt\w*|leak\w*|oom|out of memory|killed|unreachable|reject\w*|stuck|hang\w*|hung|"
    r"deadlock\w*|flak\w*|conflict\w*|gave up|give up|no luck|dead end|wrong|bug|segfault|"
    r"overflow|exceeded|exhausted|quota|expired|throttl\w*|unavailable|missing|lost|dropped|"
    r"stale|violat\w*|retrying|giving up|disk full|no space|exit (code|status) "
    r"[1-9]\d*|HTTP [45]\d\d|status[ =:]+[45]\d\d|warn(ing)?|err|critical)\b",
    re.IGNORECASE,
)
_DECIDE = re.compile(
    r"\b(decid\w*|decision|chose|choose|chosen|choosing|pick(ed|ing)?|opt(ed|ing)? (for|to)|"
    r"go(ing)? with|went with|settle[ds]? on|adopt\w*|prefer\w*|selected|selecting|"
    r"switch(ed|ing)? to|"
    r"mov(e|ed|ing) to|migrat\w* to|replac\w*|instead( of)?|rather than|in favou?r of|"
    r"rul(e|ed|ing) out|stick(ing)? with|stay(ing)? with|keep using|standardi[sz]\w* on|"
    r"agreed|approved|conclu\w*|verdict|accepted|resolution|trade-?offs?|alternative\w*|"
    r"approach|strategy|we('ll| will) use|use [\w-]+ for|plan is|consensus|outcome)\b",
    re.IGNORECASE,
)
_REASON = re.compile(
    r"\b(because|since|due to|so that|given that|as a result|otherwise|to avoid|which means|"
    r"therefore|thus|hence|reason\w*|why)\b",
    re.IGNORECASE,
)
_INSTRUCT = re.compile(
    r"\b(must|never|always|do not|don't|avoid|make sure|ensure|remember|please|required?|"
    r"mandatory|only|prohibit\w*|forbid\w*|policy|rule|should|shall|need to|needs to|"
    r"no more|stop|until|before any|under no)\b",
    re.IGNORECASE,
)
_COMMIT = re.compile(
    r"\b(i'll|i will|we'll|we will|going to|plan(ning)? to|intend\w*|promis\w*|todo|to-do|"
    r"follow[ -]up|next step|will (do|send|check|add|fix|run|write|look|retry|review|ship)|"
    r"by (monday|tuesday|wednesday|thursday|friday|tomorrow|eod|end of day)|deadline|"
    r"committed to|owe)\b",
    re.IGNORECASE,
)
_QUESTION = re.compile(
    r"\?\s*$|\b(unclear|unknown|not sure|unsure|open question|tbd|to be determined|"
    r"find out|whether|wonder\w*|investigat\w*|unresolved|undecided|unanswered)\b",
    re.IGNORECASE,
)
#: An event that produced or changed something (what the identifier on its line names).
_EVENT = re.compile(
    r"\b(publish\w*|releas\w*|deploy\w*|ship\w*|merg\w*|creat\w*|complet\w*|finish\w*|"
    r"done|succeed\w*|pass(ed)?|promot\w*|tagg\w*|upload\w*|generat\w*|built|assign\w*|"
    r"allocat\w*|open(ed)?|filed|approv\w*|issued|minted|provision\w*|registered|rotated|"
    r"restor\w*|migrat\w*|snapshot\w*|wrote|written|saved|stored|signed|reserved)\b",
    re.IGNORECASE,
)
_LEVEL = re.compile(r"\b(TRACE|DEBUG|INFO|NOTICE|WARN(?:ING)?|ERROR|ERR|FATAL|CRITICAL|SEVERE)\b")
_QUIET_LEVELS = {"TRACE", "DEBUG", "INFO", "NOTICE"}
_LOUD_LEVELS = {"WARN", "WARNING", "ERROR", "ERR", "FATAL", "CRITICAL", "SEVERE"}
_EXC_LINE = re.compile(r"^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit|Failure|Fault)\b.*:")
_HEADING = re.compile(r"^\s*(?:#{1,6}\s+(.+?)\s*#*\s*$|([A-Z][\w /-]{1,40}):\s*$)")
_ASSIGN = re.compile(r"->|=>|\u2192|[:=]\s")
_TABLE_LINE = re.compile(r"^\s*\|.*\|\s*$")
#: Headings over a comparison (what a decision record's options sit under).
_OPTIONS = re.compile(r"\b(options?|considered|choices?|comparison|candidates)\b", re.I)
_SALIENT_KEYS = re.compile(
    r"^(error|errors|err|exception|stderr|reason|cause|message|msg|detail|details|decision|"
    r"decisions|outcome|status|warning|warnings|failure|failures|note|notes|summary|"
    r"conclusion|result|resolution|why|rationale|instruction|instructions|todo|question|"
    r"questions|next)$",
    re.IGNORECASE,
)
_STOP_WORDS = (
    "a an the and or but if then of to in on at by for with from into onto over under this that "
    "these those it its is are was were be been being am do does did done have has had having "
    "i we you he she they them us our your my me his her their there here what which who whom "
    "when where why how all any each few more most other some such no nor not only own same so "
    "than too very can will just should now also as about again once up down out off above "
    "below until while between through during before after both get got let lets it's i'm "
    "nothing else something thing things one two per via yes okay ok"
)
_STOP = frozenset(_STOP_WORDS.split())
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")
_CODE = re.compile(r"\b\w+_\w+\b|\b[a-z]+[A-Z]\w*\b|\b\w+\.\w+\(|`[^`]+`")
_CAPS = re.compile(r"(?<=[a-z,;] )[A-Z][\w-]+")
_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[`/])|\n+")
_CLAUSE = re.compile(r"(?<=[;,:])\s+|\s+(?:\u2014|\u2013|-){1,2}\s+")


def content_words(text: str) -> list[str]:
    """The lower-cased words of ``text`` that are not stop words (3+ letters)."""
    return [w for w in (x.lower() for x in _WORD.findall(text)) if len(w) > 2 and w not in _STOP]


def shape(text: str) -> str:
    """``text`` with identifiers and digits masked, lower-cased: what repeats in a template."""
    masked = IDENTIFIER.sub("#", _TIMESTAMP.sub("T", text))
    return re.sub(r"\d+", "0", masked).lower().strip()


# ------------------------------------------------------------------ segments and scores


@dataclass(frozen=True, slots=True)
class Segment:
    """A sentence of prose or a line of a log or listing, where it was found: the ``source``,
    the JSON ``key`` it sat under, the ``heading`` above it, whether it is in the output's
    ``tail``, is a ``logline``, or is the last exception line of a traceback (``last_exc``)."""

    text: str
    source: FactSource
    key: str = ""
    heading: str = ""
    tail: bool = False
    logline: bool = False
    last_exc: bool = False
    #: A markdown table row read as a record (:mod:`.facts_output`); ``emphasised``: a cell
    #: of it was marked; ``authored``: a person's comment (a one-line prose value of a JSON
    #: ``body``, ``comment``, ``text`` … key).
    row: bool = False
    emphasised: bool = False
    authored: bool = False


def _segments(text: str, source: FactSource, key: str = "") -> list[Segment]:
    """Sentences of prose and lines of logs or listings, each with the heading it sits under
    and whether it is in the output's tail."""
    lines = [x for x in text.splitlines() if x.strip()]
    out: list[Segment] = []
    heading = ""
    exc_idx = max((i for i, x in enumerate(lines) if _EXC_LINE.match(x)), default=-1)
    rows = table_rows(lines)
    authored = prose_key(key) and len(lines) == 1 and len(text.strip()) <= FACT_CHARS
    for i, line in enumerate(lines):
        h = _HEADING.match(line)
        if h and h.group(1) and _ASSIGN.search(line) and STRONG_IDENTIFIER.search(line):
            h = None  # a comment line of a script or a listing (``# latest x -> id``)
        under = setext_heading(lines, i)
        if h or under:
            heading = under or (h.group(1) or h.group(2) or "").strip() if h else under
            continue
        if is_underline(line) or (_TABLE_LINE.match(line) and i not in rows):
            continue  # a heading's underline, a table's header or separator
        if i in rows:
            r = rows[i]
            out.append(Segment(r.text, source, key, heading, row=True, emphasised=r.emphasised))
            continue
        tail = len(lines) > 4 and i >= len(lines) - 3
        logline = bool(_LEVEL.search(line[:60]) or _TIMESTAMP.match(line.strip()))
        # A line short enough to be one fact stays whole (its sentences say one thing:
        # "X it is. Y is out; Z." keeps the choice with its reason); a longer paragraph is
        # split into its sentences.
        whole = logline or len(line.strip()) <= FACT_CHARS
        parts = [line.strip()] if whole else _SPLIT.split(line.strip())
        for p in parts:
            p = p.strip(" -*\t")
            if p:
                seg = Segment(p, source, key, heading, tail, logline, i == exc_idx)
                out.append(seg if not authored else replace(seg, authored=True))
    return out


def _strength(pattern: re.Pattern[str], text: str) -> float:
    n = len(pattern.findall(text))
    return 0.0 if n == 0 else min(1.0 + 0.25 * (n - 1), 1.5)


def _score(
    seg: Segment, goal_words: frozenset[str], repeats: int, *, lines: int = 0
) -> tuple[float, FactKind]:
    """The score and kind of ``seg``; ``repeats``: how often its shape occurs where it was
    found, ``lines``: how many segments the output it was found in has (a shape unique in a
    long output is news in it)."""
    t = seg.text
    words = content_words(t)
    ids = [i for i in identifiers(t) if STRONG_IDENTIFIER.fullmatch(i)]
    level = _LEVEL.search(t[:60])
    lvl = level.group(1) if level else ""
    cls: dict[FactKind, float] = {
        "failure": _strength(_FAIL, t),
        "decision": _strength(_DECIDE, t),
        "instruction": _strength(_INSTRUCT, t) * (0.6 if seg.source != "operator" else 1.0),
        "commitment": _strength(_COMMIT, t),
        "question": _strength(_QUESTION, t),
    }
    context = f"{seg.key} {seg.heading}"
    if context.strip():
        structural: tuple[tuple[FactKind, re.Pattern[str]], ...] = (
            ("failure", _FAIL),
            ("decision", _DECIDE),
            ("question", _QUESTION),
        )
        for k, pat in structural:
            if pat.search(context):
                cls[k] = max(cls[k], 1.2)
        if seg.row and _OPTIONS.search(context):
            cls["decision"] = max(cls["decision"], 1.2)
    if lvl in _LOUD_LEVELS or seg.last_exc:
        loud = 1.0 if lvl.startswith("WARN") else 1.5
        cls["failure"] = max(cls["failure"], loud)
    base = {"model": 1.5, "operator": 6.0, "note": 2.0, "args": 0.2, "result": -0.3, "error": 3.0}
    score = base[seg.source]
    kind: FactKind = max(cls, key=lambda k: cls[k])
    strength = cls[kind]
    salient_place = bool(seg.heading or _SALIENT_KEYS.match(seg.key))
    if len(words) > 20 and not (salient_place or lvl or seg.last_exc):
        strength *= 20 / len(words)  # one cue word in a page of prose is no signal
    score += 1.6 * strength
    if strength and _REASON.search(t):
        score += 0.6
    if ids:
        score += 0.5 * min(len(ids), 3)
        if _EVENT.search(t):
            score += 0.5
        before = t[: t.find(ids[0])] if ids[0] in t else ""
        if _NAMING.search(before[-40:]) or named_value(t, ids):
            score += 0.9
        if not seg.logline:
            score += 0.4
    score += 0.3 * min(len(_CODE.findall(t)) + len(_CAPS.findall(t)), 3)
    if goal_words:
        score += 0.4 * min(len(goal_words.intersection(words)), 3)
    if seg.key and _SALIENT_KEYS.match(seg.key):
        score += 0.8
    if seg.tail and strength:
        score += 0.5
    unique = lines >= 8 and repeats <= 1
    if unique and ids:
        score += 0.4
    if lvl in _QUIET_LEVELS and not strength:
        score -= 0.7 if unique else 1.5
    if repeats >= 3 and strength < 1.5 and lvl not in _LOUD_LEVELS:
        score -= 2.0 + 0.1 * min(repeats, 10)
    if len(words) < 3 and not ids:
        score -= 1.2
    # Layout (:mod:`.facts_output`): a table row of a document, a person's comment.
    laid_out = (seg.row and len(words) >= 3) or (seg.authored and _authored(t))
    if laid_out:
        score += 1.0 + (0.5 if seg.emphasised else 0.0)
    if not strength and not _specific(t):
        # Narration ("Reading the next module."): no identifier, number, name or cue says
        # anything a later turn could need (Edmundson 1969's proper nouns and numbers).
        score = min(score, NARRATION_SCORE)
    if not strength:
        kind = "identifier" if ids else "finding"
        if seg.source in ("result", "args"):
            # Evidence in an output, saying nothing itself: ranked below the output's
            # statements (its laid-out records and named values rank above its plain lines).
            score = min(score, 2.4 if laid_out or named_value(t, ids) else 1.4)
    return round(score, 3), kind


def _authored(text: str) -> bool:
    """A comment that says something: three content words besides its identifiers' and the
    key it sits under, and something specific (``LGTM``, ``+1, seen on x-2 too`` do not)."""
    rest = IDENTIFIER.sub(" ", text.split(": ", 1)[1] if ": " in text[:24] else text)
    return len(content_words(rest)) >= 3 and _specific(text)


_SKEL = "\x00"  # (a skeleton's key among the shapes counted)


#: Most a segment that only narrates scores (below :data:`MIN_SCORE`: never a fact).
NARRATION_SCORE = 0.5
_UPPER = re.compile(r"\b[A-Z][A-Z0-9_]{2,}\b")


def _specific(text: str) -> bool:
    """Whether ``text`` names something specific: an identifier or a number of 3+ digits
    (:func:`identifiers`), a code-like name, a capitalised name mid-sentence, or an all-caps
    token (``SIGBUS``, ``FIPS``)."""
    return bool(
        identifiers(text) or _CODE.search(text) or _CAPS.search(text) or _UPPER.search(text)
    )


def shorten(text: str, limit: int = FACT_CHARS) -> str:
    """``text`` within ``limit`` characters keeping its salient clauses (an error, a decision,
    its reason, identifiers) whole: the clauses without any are dropped first."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    clauses = _CLAUSE.split(text)
    salient = [
        c
        for c in clauses
        if _FAIL.search(c) or _DECIDE.search(c) or _REASON.search(c) or identifiers(c)
    ]
    kept = " … ".join(salient or clauses)
    if len(kept) <= limit:
        return kept
    # Still too long: keep the head and the tail (an error is usually at the end).
    head = limit * 2 // 5
    return kept[:head].rstrip() + " … " + kept[-(limit - head - 3) :].lstrip()


def candidates(
    segs: Iterable[Segment],
    goal_words: frozenset[str],
    shapes: Counter[str],
    turn: int,
    step: str | None,
    lines: int = 0,
) -> list[Fact]:
    """The segments scoring at least :data:`MIN_SCORE` as facts (``shapes``: the counts of
    segment shapes where they were found; ``lines``: segments in the output they came from)."""
    out: list[Fact] = []
    for seg in segs:
        repeats = max(shapes[shape(seg.text)], shapes[_SKEL + skeleton(seg.text)])
        score, kind = _score(seg, goal_words, repeats, lines=lines)
        if seg.source == "operator":
            kind = "instruction" if kind in ("finding", "identifier") else kind
        if score < MIN_SCORE:
            continue
        text = shorten(seg.text)
        out.append(
            Fact(
                kind=kind,
                text=text,
                ids=identifiers(text),
                turn=turn,
                source=seg.source,
                step=step,
                score=score,
                pinned=seg.source == "operator",
            )
        )
    return out


def text_segments(text: str, source: FactSource) -> list[Segment]:
    """The segments of a text of the model, an operator or a note."""
    return _segments(text, source)


def value_segments(
    value: Any, source: FactSource, *, min_chars: int = 0, known: frozenset[str] = frozenset()
) -> list[Segment]:
    """The segments of a decoded JSON value (a tool's arguments or result), from its strings of
    at least ``min_chars`` characters, leaving out the ``known`` ones (a result echoing the
    call's arguments says nothing new)."""
    out: list[Segment] = []
    for key, text in leaves(value):
        if len(text) >= min_chars and not any(len(k) > 3 and text.endswith(k) for k in known):
            out += _segments(text, source, key)
    return out


def strings(value: Any) -> frozenset[str]:
    """The strings of a JSON value (its arguments: what a result may echo)."""
    if isinstance(value, str):
        return frozenset([value])
    if isinstance(value, dict):
        return frozenset().union(*(strings(v) for v in value.values()))
    if isinstance(value, list | tuple):
        return frozenset().union(*(strings(v) for v in value))
    return frozenset()


def result_facts(
    observation: Any,
    *,
    status: str = "succeeded",
    turn: int = 0,
    step: str | None = None,
    goal: str = "",
    label: str = "",
    args: Any = None,
) -> list[Fact]:
    """The facts of one tool result (the decoded ``observation``; at most
    :data:`MAX_RESULT_FACTS`, best first then in order). A call that did not succeed yields its
    error as a ``failure`` fact first, prefixed with ``label`` (the call's description). A
    string of the result that only echoes one of the call's ``args`` is not searched."""
    goal_words = frozenset(content_words(goal))
    # Every line of an output is the tool's evidence, an error's detail too (a failed call's
    # own error is the head fact below): a long log raised with ranks as a log.
    segs = value_segments(observation, "result", known=strings(args))
    shapes = Counter(shape(s.text) for s in segs)
    shapes.update(_SKEL + skeleton(s.text) for s in segs)  # rows of one template
    facts = candidates(segs, goal_words, shapes, turn, step, lines=len(segs))
    order = {id(s): i for i, s in enumerate(facts)}
    facts.sort(key=lambda f: -f.score)
    facts = facts[:MAX_RESULT_FACTS]
    best_failure = next((f for f in facts if f.kind == "failure"), None)
    facts.sort(key=lambda f: order[id(f)])
    if status == "succeeded" and label and best_failure is not None:
        # What was tried stays with what went wrong: the call (its tail too: the flags).
        tried = label.rsplit(" -> ", 1)[0]
        text = shorten(f"{tried} printed: {best_failure.text}")
        facts = [
            f
            if f is not best_failure
            else f.model_copy(update={"text": text, "ids": identifiers(text)})
            for f in facts
        ]
    if status not in ("succeeded", "pending") and label:
        ranked = sorted(facts, key=lambda f: (-f.score, -order[id(f)]))
        err = [f.text for f in ranked if f.kind == "failure"] or [f.text for f in ranked[:1]]
        text = shorten(f"{label}: {' '.join(err[:2]) or status}")
        head = Fact(
            kind="failure", text=text, ids=identifiers(text), turn=turn, source="error",
            step=step, score=5.0,
        )  # fmt: skip
        facts = [head, *(f for f in facts if f.text not in text)][:MAX_RESULT_FACTS]
    return facts


def supersede(older: list[Fact], newer: Fact) -> list[Fact]:
    """``older`` with each pinned instruction that ``newer`` (an operator's instruction)
    restates — most of its content words again — unpinned and marked ``superseded_by``."""
    words = set(content_words(newer.text))
    out = []
    for f in older:
        if f.pinned and f.kind == "instruction" and f.superseded_by is None:
            mine = set(content_words(f.text))
            if mine and len(mine & words) >= 0.6 * len(mine):
                f = f.model_copy(update={"pinned": False, "superseded_by": newer.turn})
        out.append(f)
    return out
