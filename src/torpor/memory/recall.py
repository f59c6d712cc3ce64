"""Recall (issue 30): the ledger records and past turns of a run most relevant to what it is
doing now — its current plan step and latest messages — brought back into the context as the
``recall`` section, so a fact that fell out of the summary returns when a turn is about its
subject.

The search itself is full-text over the run's own ledger (:mod:`torpor.store.ledger`: FTS5 on
SQLite, ``tsvector`` on PostgreSQL) for the words of :func:`query_terms`; the store returns the
candidates its index ranks best, and :func:`rank` orders them the same way on both backends
(how many of the query's terms a record holds, the rarer terms weighing more, then the newer
record first). Pure: this module does no I/O.

What a recalled line looks like: ``- [t12 decision] text`` (its turn and kind); superseded
records are not recalled (the record that replaced them is); records of turns still in the
working buffer are not either (the conversation holds them).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .context import RankedLine
from .facts import IDENTIFIER, content_words, shape
from .ledger import LedgerRecord

#: Most terms a recall query has (the most specific first).
MAX_TERMS = 16
#: Most candidates asked of the store per query.
CANDIDATES = 120
_TOKEN = re.compile(r"[A-Za-z0-9]+")


def _words(text: str) -> list[str]:
    """The searchable words of ``text``: the parts of its content words (``write-ups`` →
    ``write``, ``ups``) and of its identifiers (``CHG-48213`` → ``chg``, ``48213``), lower-cased,
    of at least 3 characters."""
    out = [p for w in content_words(text) for p in _TOKEN.findall(w) if len(p) > 2]
    for m in IDENTIFIER.finditer(text):
        out += [t.lower() for t in _TOKEN.findall(m.group()) if len(t) > 2]
    return out


def query_terms(
    focus: Sequence[str], *, common: Iterable[str] = (), habits: Iterable[str] = ()
) -> dict[str, float]:
    """The terms of a recall query with their weights, from the ``focus`` texts (the latest
    message first — weight 1 —, then the current plan step — 0.6 —, then the rest — 0.25):
    lower-cased words of at least 3 characters and the parts of identifiers, without the
    ``common`` words (the goal's: every record shares them); a word of the agent's ``habits``
    (its other recent texts: how it phrases any turn, not what this one is about) weighs a
    third. At most :data:`MAX_TERMS`, the heaviest (then the most specific-looking) first."""
    skip = {w.lower() for w in common}
    usual = {_stem(w) for t in habits for w in _words(t)}
    weight: dict[str, float] = {}
    for i, text in enumerate(focus):
        base = 1.0 if i == 0 else 0.6 if i == 1 else 0.25
        for w in _words(text):
            w = w.strip("-'")
            if len(w) < 3 or w in skip or not _TOKEN.fullmatch(w):
                continue
            v = base / 3 if _stem(w) in usual else base
            weight[w] = max(weight.get(w, 0.0), v)
    order = sorted(weight, key=lambda w: (-weight[w], -any(c.isdigit() for c in w), -len(w)))
    return {w: weight[w] for w in order[:MAX_TERMS]}


def _stem(w: str) -> str:
    return w[:6]


#: Longest line of a unit's body a recalled line quotes, in characters.
QUOTE_CHARS = 320
#: Lines of a unit's body a recalled line quotes (its best).
QUOTE_LINES = 2


#: Most records whose parsed lines :func:`_line_stems` keeps.
PARSED_RECORDS = 8192


def _line_stems(r: LedgerRecord) -> tuple[tuple[str, frozenset[str]], ...]:
    """Each line of ``r`` (its text; a unit's words, then each line of its body) with the
    stems of its words, parsed once per record (a bounded cache: recall re-ranks the same
    records turn after turn, and parsing their lines was most of its cost; a record never
    changes)."""
    return _parse(r.key, r.text, r.body)


@functools.lru_cache(maxsize=PARSED_RECORDS)
def _parse(key: str, text: str, body: str) -> tuple[tuple[str, frozenset[str]], ...]:
    lines = (
        [text]
        if not body
        else [text.split(" | ", 1)[0], *(x.strip() for x in body.splitlines() if x.strip())]
    )
    return tuple((x, frozenset(_stem(w) for w in _words(x))) for x in dict.fromkeys(lines))


def rank(
    records: Sequence[LedgerRecord], terms: Mapping[str, float]
) -> list[tuple[float, LedgerRecord]]:
    """``records`` (the store's candidates) scored for ``terms`` and sorted best first. A
    record's score is that of its best line (its text, or a line of a unit's body): the sum
    over the terms the line holds (compared by their first six letters, as a stemmer would) of
    each term's weight times its inverse frequency among the candidates — so the words every
    candidate shares (a template's, the goal's) weigh little. Ties: the newer record first. A
    record with no term scores 0 and is left out."""
    return [(s, r) for s, r, _ in _scored(records, terms)]


def _scored(
    records: Sequence[LedgerRecord], terms: Mapping[str, float], echo: frozenset[str] = frozenset()
) -> list[tuple[float, LedgerRecord, list[str]]]:
    wt: dict[str, float] = {}
    for t, v in terms.items():
        wt[_stem(t)] = max(wt.get(_stem(t), 0.0), v)
    stems = set(wt)
    per: list[list[tuple[str, frozenset[str]]]] = []
    for r in records:
        lines = [(x, b & stems) for x, b in _line_stems(r)]
        if echo:  # the latest message said again in another turn is not a memory of it
            lines = [(x, b) for x, b in lines if not b or shape(x) not in echo]
        per.append(lines)
    n = len(records)
    df: Counter[str] = Counter()
    for lines in per:  # one pass over each record's matched stems (not stems x records)
        df.update(frozenset().union(*(b for _, b in lines)))
    idf = {s: wt[s] * math.log(1 + n / df[s]) for s in stems if df[s]}
    out = []
    for r, lines in zip(records, per, strict=True):
        scored = sorted(
            ((sum(idf[s] for s in b), i) for i, (_, b) in enumerate(lines) if b),
            key=lambda x: (-x[0], x[1]),
        )
        if not scored:
            continue
        best = [lines[i][0] for sc, i in scored[:QUOTE_LINES] if sc >= scored[0][0] * 0.5]
        out.append((round(scored[0][0], 6), r, best))
    out.sort(key=lambda x: (-x[0], -x[1].compaction, -x[1].turn, x[1].key))
    return out


def _quote(r: LedgerRecord, best: list[str]) -> str:
    """What a recalled line shows: a fact's text; a unit's best lines (each within
    :data:`QUOTE_CHARS`, the text around the first query term kept)."""
    if not r.body:
        return r.text
    parts = [x if len(x) <= QUOTE_CHARS else x[: QUOTE_CHARS - 2] + " …" for x in best]
    return " … ".join(parts)


@dataclass(frozen=True)
class Recalled:
    """What recall found: the ranked ``lines`` of the section and the ``keys`` recalled."""

    lines: tuple[RankedLine, ...]
    keys: tuple[str, ...]


def recalled(
    candidates: Sequence[LedgerRecord],
    terms: Mapping[str, float],
    *,
    superseded: Iterable[str] = (),
    buffered_from: int | None = None,
    shown: Iterable[str] = (),
    limit: int = 16,
    echo: Iterable[str] = (),
) -> Recalled:
    """The recall section's lines from the store's ``candidates`` for ``terms``: ranked
    (:func:`rank`), without the ``superseded`` keys, records of turns at or after
    ``buffered_from`` (still in the buffer) and texts already ``shown`` (pinned summary
    lines) or already quoted by the line of their turn, at most ``limit``, each line ranked by
    its score. A line of the shape of an ``echo`` text (the latest message: an agent's
    routine sentence is said again turn after turn) is not a match."""
    gone = set(superseded)
    seen = set(shown)
    units: dict[int, str] = {}  # turn -> the text of its line shown
    lines: list[RankedLine] = []
    keys: list[str] = []
    forms = frozenset(shape(x) for x in echo if x.strip())
    for score, r, best in _scored(candidates, terms, forms):
        if r.key in gone or r.text in seen:
            continue
        if buffered_from is not None and r.turn >= buffered_from:
            continue
        quote = _quote(r, best)
        if r.text[:80] in units.get(r.turn, "") or quote in units.get(r.turn, ""):
            continue  # its turn's line already holds it
        units[r.turn] = units.get(r.turn, "") + "\n" + quote
        seen.add(r.text)
        lines.append(RankedLine(f"- [t{r.turn} {r.kind}] {quote}", score))
        keys.append(r.key)
        if len(lines) >= limit:
            break
    return Recalled(tuple(lines), tuple(keys))


RECALL_HEAD = "(earlier facts and turns of this run that bear on the current step)"
