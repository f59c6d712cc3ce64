"""The fact ledger (DESIGN.md §1, G13): the facts compaction extracts (:mod:`.facts`) kept as
typed records with provenance, deduplicated and superseded — the summary's reliable twin.

A :class:`LedgerRecord` is written once, in the ``context_compacted`` event of the compaction
that folded its unit (one atomic recorded transition: the event and its store rows are
written in one transaction, or neither is). Records are never updated: a later record that
replaces an earlier one names it (``supersedes``), so both stay readable, with who (the later
record's ``source`` and ``step``) and when (its event ``seq`` and time) replaced it.

Everything here is pure (no I/O): :func:`extract` (a compaction's records from its units),
:func:`dedupe` and :func:`supersede`; tests/test_memory_ledger.py holds their property tests.
Recall — finding the records and past units relevant to the current step in the run's own
history — is :mod:`.recall`; the store's rows are :mod:`torpor.store.ledger`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from .buffer import Unit
from .facts import Fact, content_words, identifiers

if TYPE_CHECKING:
    from .compaction import SummaryLine


def _same(x: Any) -> Any:
    return x


LedgerKind = Literal[
    "identifier",
    "decision",
    "failure",
    "instruction",
    "commitment",
    "question",
    "finding",
    "unit",
]

#: The kinds a later record may supersede (a newer decision on the same subject replaces the
#: earlier in the context; an operator's later instruction on it too). Identifiers, failures
#: and findings are evidence: they accumulate.
SUPERSEDABLE = frozenset({"decision", "instruction", "commitment", "question"})
#: Kinds whose records name different things when their identifiers differ: an open
#: question about batch 95067 is not answered by one about batch 90135 (an instruction or a
#: decision with a new value does replace the old one).
DISTINCT_BY_IDS = frozenset({"question", "commitment"})
#: Share of an older record's subject words a newer one of the same kind must repeat to
#: supersede it (at least two words; :func:`torpor.memory.facts.supersede` asks 0.6 of an
#: operator's instruction, whose words restate it; a decision names a new option).
SUBJECT_OVERLAP = 0.5
#: Words of a record's subject (its most specific content words, in order).
SUBJECT_WORDS = 8
#: Longest text of a ``unit`` record, in characters (what a recalled past turn shows).
UNIT_CHARS = 600
#: Longest body of a ``unit`` record, in characters (the buffer's clip of each result is
#: already at most ``Memory.result_chars``).
BODY_CHARS = 12_000


class LedgerRecord(BaseModel):
    """One ledger record.

    ``key``: sha256 (first 20 hex digits) of its kind and normalized text — the dedup key, the
    same fact said twice is one record; ``kind`` (:data:`LedgerKind`; ``unit``: a folded turn
    itself, what ran and what was said, so a fact the extractor ranked low can still be
    recalled); ``text``: scrubbed of known secrets before it is stored (G12); ``ids``: its
    identifiers verbatim; ``subject``: its content words (what supersession compares);
    provenance — the buffer ``turn``, the recorded ``step`` it came from (``model#3``,
    ``tool:c1@v3``), ``source`` (model, operator, note, args, result, error) and the
    ``compaction`` number that wrote it (the store adds the run, the event ``seq`` and its
    time); ``score``: its salience (:mod:`.facts`); ``supersedes``: keys of the records it
    replaces."""

    key: str
    kind: LedgerKind
    text: str
    ids: list[str] = Field(default_factory=list)
    subject: list[str] = Field(default_factory=list)
    turn: int = 0
    step: str | None = None
    source: str = "model"
    compaction: int = 0
    score: float = 0.0
    supersedes: list[str] = Field(default_factory=list)
    #: A ``unit`` record's whole turn as the buffer held it, decoded (the model's words, the
    #: calls' arguments, their results' text, one line per line): what recall searches and
    #: quotes its best lines from (at most :data:`BODY_CHARS`).
    body: str = ""


def record_key(kind: str, text: str) -> str:
    """The dedup key of a record: its kind and its text with case and spacing normalized."""
    norm = " ".join(text.lower().split())
    return hashlib.sha256(f"{kind}\x00{norm}".encode()).hexdigest()[:20]


def subject_of(text: str) -> list[str]:
    """The subject words of ``text``: its content words, once each, in order, at most
    :data:`SUBJECT_WORDS` (an identifier's words count: ``search-api`` names its subject)."""
    seen: dict[str, None] = {}
    for w in content_words(text):
        seen.setdefault(w, None)
        if len(seen) >= SUBJECT_WORDS:
            break
    return list(seen)


def fact_record(f: Fact, compaction: int) -> LedgerRecord:
    """The record of an extracted fact (its kind, text, identifiers and provenance)."""
    return LedgerRecord(
        key=record_key(f.kind, f.text),
        kind=f.kind,
        text=f.text,
        ids=list(f.ids),
        subject=subject_of(f.text),
        turn=f.turn,
        step=f.step,
        source=f.source,
        compaction=compaction,
        score=f.score,
    )


def unit_record(
    turn: int,
    text: str,
    ran: Sequence[str],
    step: str | None,
    source: str,
    compaction: int,
    body: str = "",
) -> LedgerRecord | None:
    """The ``unit`` record of a folded turn: its words (``text``: the model's, an operator's or
    a note's) and what its calls found and ran (``ran``: the facts found in their results,
    then each call as ``tool(args) -> outcome [step]``), within :data:`UNIT_CHARS`; None for a
    turn that said and ran nothing."""
    words = " ".join(text.split())
    parts = [x for x in (words, "; ".join(ran)) if x]
    if not parts:
        return None
    whole = " | ".join(parts)
    if len(whole) > UNIT_CHARS:
        whole = whole[: UNIT_CHARS - 2].rstrip() + " …"
    return LedgerRecord(
        key=record_key("unit", f"{turn}\x00{whole}"),
        kind="unit",
        text=whole,
        ids=identifiers(whole),
        subject=subject_of(whole),
        turn=turn,
        step=step,
        source=source,
        compaction=compaction,
        body=body[:BODY_CHARS],
    )


def unit_body(u: Unit) -> str:
    """A unit's text as the buffer holds it, decoded: its words, then each call's arguments
    and result, every string of them on lines of its own (never JSON-escaped)."""
    from .decoding import decode_result, leaves

    out = [u.text]
    for c in u.calls:
        out += [t for _, t in leaves(c.args)]
        out += [t for _, t in leaves(decode_result(c.result))]
    return "\n".join(x for x in out if x)


def extract(
    units: Sequence[Unit],
    lines: Sequence[SummaryLine],
    number: int,
    *,
    goal: str = "",
    extractive: bool = True,
    scrub: Callable[[Any], Any] = _same,
) -> list[LedgerRecord]:
    """Extraction: the records compaction ``number`` makes of folding ``units`` (whose new
    summary lines are ``lines``) — the facts found in them (those of the extractive summary's
    lines, or, when a model wrote the summary, found by the same extraction,
    :func:`~torpor.memory.compaction.unit_lines`), then one ``unit`` record per folded turn;
    each record's text passed through ``scrub`` (the one secret scrubber, G12) before its key,
    subject and identifiers are taken; each key once (the first stands). Deduplication
    against the ledger and supersession are :func:`dedupe` and :func:`supersede`."""
    from .compaction import unit_lines

    if extractive:
        facts = [x.fact for x in lines if x.fact is not None]
    else:
        facts = [x.fact for u in units for x in unit_lines(u, goal=goal) if x.fact is not None]
    made = [fact_record(f, number) for f in facts]
    made += [r for r in (_unit_of(u, number) for u in units) if r is not None]
    clean = [_rekeyed(LedgerRecord.model_validate(scrub(r.model_dump()))) for r in made]
    return dedupe((), clean)


def _rekeyed(r: LedgerRecord) -> LedgerRecord:
    """``r`` with its key, subject and identifiers taken again from its (scrubbed) text."""
    key = record_key(r.kind, r.text if r.kind != "unit" else f"{r.turn}\x00{r.text}")
    return r.model_copy(
        update={"key": key, "subject": subject_of(r.text), "ids": identifiers(r.text)}
    )


def _unit_of(u: Unit, number: int) -> LedgerRecord | None:
    from .compaction import call_label

    ran = [call_label(c.tool, c.args, c.status, c.step) for c in u.calls]
    found = [f.text for c in u.calls for f in (c.facts or [])]
    source = {"operator": "operator", "note": "note"}.get(u.kind, "model")
    step = u.refs[0] if u.refs else (u.calls[0].step if u.calls else None)
    return unit_record(u.turn, u.text, found + ran, step, source, number, unit_body(u))


def numbered(records: Iterable[LedgerRecord], compaction: int) -> list[LedgerRecord]:
    """``records`` as compaction ``compaction`` writes them."""
    return [r.model_copy(update={"compaction": compaction}) for r in records]


def dedupe(known: Iterable[str], new: Iterable[LedgerRecord]) -> list[LedgerRecord]:
    """``new`` without the records whose key is ``known`` (already in the ledger) or came
    earlier in ``new``: a fact said again is not a new record (the older one stands, with its
    provenance)."""
    seen = set(known)
    out = []
    for r in new:
        if r.key in seen:
            continue
        seen.add(r.key)
        out.append(r)
    return out


def replaces(newer: LedgerRecord, older: LedgerRecord) -> bool:
    """Whether ``newer`` supersedes ``older``: the same supersedable kind, a different fact,
    said no earlier, repeating at least :data:`SUBJECT_OVERLAP` of the older one's subject
    words (and at least two of them) — and, for :data:`DISTINCT_BY_IDS` kinds, not about
    other identifiers only."""
    if newer.kind != older.kind or newer.kind not in SUPERSEDABLE or newer.key == older.key:
        return False
    if (newer.compaction, newer.turn) < (older.compaction, older.turn):
        return False
    if (
        newer.kind in DISTINCT_BY_IDS
        and older.ids
        and newer.ids
        and not set(older.ids) & set(newer.ids)
    ):
        return False  # a question (a commitment) about another id is another question
    mine = set(older.subject)
    shared = mine & set(newer.subject)
    return len(mine) > 0 and len(shared) >= 2 and len(shared) >= SUBJECT_OVERLAP * len(mine)


def supersede(active: Sequence[LedgerRecord], new: Sequence[LedgerRecord]) -> list[LedgerRecord]:
    """``new`` with ``supersedes`` set: the keys of the ``active`` records (and of earlier
    records of ``new``) each one replaces (:func:`replaces`). An older record is superseded by
    the first later record that replaces it, once; nothing is removed — both stay in the
    ledger (the context shows the newer one)."""
    live = {r.key: r for r in active}
    out: list[LedgerRecord] = []
    for r in new:
        gone = [k for k, old in live.items() if replaces(r, old)]
        for k in gone:
            del live[k]
        r = r.model_copy(update={"supersedes": sorted(set(r.supersedes) | set(gone))})
        live[r.key] = r
        out.append(r)
    return out


def still_active(records: Iterable[LedgerRecord]) -> list[LedgerRecord]:
    """The records no other of ``records`` supersedes, in order."""
    rs = list(records)
    gone = {k for r in rs for k in r.supersedes}
    return [r for r in rs if r.key not in gone]


def as_payload(records: Iterable[LedgerRecord]) -> list[dict[str, Any]]:
    """Records as the ``context_compacted`` event carries them (JSON data, ``None``s out)."""
    return [r.model_dump(mode="json", exclude_defaults=True) for r in records]


def from_payload(data: Iterable[Any]) -> list[LedgerRecord]:
    """Records read back from an event or a store row."""
    return [LedgerRecord.model_validate(x) for x in data]


def canonical(records: Iterable[LedgerRecord]) -> str:
    """A record list as canonical JSON (what tests compare)."""
    return json.dumps(as_payload(records), sort_keys=True)
