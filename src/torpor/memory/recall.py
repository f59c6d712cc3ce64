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

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .context import RankedLine
from .facts import IDENTIFIER, content_words
from .ledger import LedgerRecord

#: Most terms a recall query has (the most specific first).
MAX_TERMS = 24
#: Most candidates asked of the store per query.
CANDIDATES = 200
_TOKEN = re.compile(r"[A-Za-z0-9]+")


def _words(text: str) -> list[str]:
    """The searchable words of ``text``: content words, and the alphanumeric parts of its
    identifiers (``CHG-48213`` → ``chg``, ``48213``)."""
    out = content_words(text)
    for m in IDENTIFIER.finditer(text):
        out += [t.lower() for t in _TOKEN.findall(m.group()) if len(t) > 2]
    return out


def query_terms(focus: Sequence[str], *, common: Iterable[str] = ()) -> list[str]:
    """The terms of a recall query from the ``focus`` texts (the latest messages, the current
    plan step; the first is weighed most): lower-cased words of at least 3 characters, once
    each, without the ``common`` words (the goal's: every record shares them), the rarest-
    looking first (identifier parts and longer words), at most :data:`MAX_TERMS`."""
    skip = {w.lower() for w in common}
    seen: dict[str, int] = {}
    for i, text in enumerate(focus):
        for w in _words(text):
            w = w.strip("-'")
            if len(w) < 3 or w in skip or not _TOKEN.fullmatch(w):
                continue
            if w not in seen:
                seen[w] = i
    order = sorted(seen, key=lambda w: (seen[w], -any(c.isdigit() for c in w), -len(w)))
    return order[:MAX_TERMS]


def _stem(w: str) -> str:
    return w[:6]


def rank(records: Sequence[LedgerRecord], terms: Sequence[str]) -> list[tuple[float, LedgerRecord]]:
    """``records`` (the store's candidates) scored for ``terms`` and sorted best first: the sum
    over the terms a record holds (compared by their first six letters, as a stemmer would) of
    each term's inverse frequency among the candidates; ties: the newer record first. A record
    with no term scores 0 and is left out."""
    stems = [_stem(t) for t in terms]
    bags = [{_stem(w) for w in _words(r.text)} for r in records]
    n = len(records)
    df = {s: sum(1 for b in bags if s in b) for s in set(stems)}
    out = []
    for r, bag in zip(records, bags, strict=True):
        score = sum(math.log(1 + n / df[s]) for s in set(stems) if s in bag)
        if score > 0:
            out.append((round(score, 6), r))
    out.sort(key=lambda x: (-x[0], -x[1].compaction, -x[1].turn, x[1].key))
    return out


@dataclass(frozen=True)
class Recalled:
    """What recall found: the ranked ``lines`` of the section and the ``keys`` recalled."""

    lines: tuple[RankedLine, ...]
    keys: tuple[str, ...]


def recalled(
    candidates: Sequence[LedgerRecord],
    terms: Sequence[str],
    *,
    superseded: Iterable[str] = (),
    buffered_from: int | None = None,
    shown: Iterable[str] = (),
    limit: int = 16,
) -> Recalled:
    """The recall section's lines from the store's ``candidates`` for ``terms``: ranked
    (:func:`rank`), without the ``superseded`` keys, records of turns at or after
    ``buffered_from`` (still in the buffer) and texts already ``shown`` (pinned summary
    lines) or already held by the line of their turn, at most ``limit``, each line ranked by
    its score."""
    gone = set(superseded)
    seen = set(shown)
    units: dict[int, str] = {}  # turn -> the text of its unit line shown
    lines: list[RankedLine] = []
    keys: list[str] = []
    for score, r in rank(candidates, terms):
        if r.key in gone or r.text in seen:
            continue
        if buffered_from is not None and r.turn >= buffered_from:
            continue
        if r.kind != "unit" and r.text[:80] in units.get(r.turn, ""):
            continue  # its turn's line already holds it
        if r.kind == "unit":
            units[r.turn] = r.text
        seen.add(r.text)
        lines.append(RankedLine(f"- [t{r.turn} {r.kind}] {r.text}", score))
        keys.append(r.key)
        if len(lines) >= limit:
            break
    return Recalled(tuple(lines), tuple(keys))


RECALL_HEAD = "(earlier facts and turns of this run that bear on the current step)"
