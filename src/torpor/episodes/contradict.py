"""Contradictions among the fact-ledger records of a scope (issue 31): two facts that give one
subject different values — ``port is 5432`` then ``port is 6432``, a decision to use the mirror
strategy then one to stop using it — found across the runs of a scope, not only the tool
success/failure flips an episode's ``claims`` record (:func:`torpor.episodes.contradicts`).

Pure (no I/O): :func:`assertions` reads what a fact's text asserts, :func:`contradictions` walks
facts in the order they were stated and returns each change of value as a :class:`Conflict`,
the newer fact superseding the older (both stay in their ledgers: a conflict is a record *that*
they disagree, and which one is newer). tests/test_episodes_contradict.py holds the property
tests; :class:`torpor.episodes.EpisodeStore` records the conflicts a run's capture finds
(table ``ledger_conflicts``, schema v27) and ``torpor memory ls --scope`` and the episodes
section of a new run's context show them.

What counts as an assertion (deliberately narrow: a false conflict misleads an agent more than
a missed one):

- **attribute and value**: ``SUBJECT is|are|was|=|:|set to|changed to|is now VALUE``, ``SUBJECT
  from A to B`` (the value B), where VALUE is *value-like* — it holds a digit, or identifier
  punctuation (``eu-west-1``, ``db.internal``, ``v2``), or is a state word (``on``/``off``,
  ``enabled``/``disabled``, ``true``/``false``, ``yes``/``no``, ``up``/``down``) — and SUBJECT is
  the last :data:`SUBJECT_WORDS` content words before it (``the staging database port`` ->
  ``staging database port``);
- **a decision's stance**: in a ``decision`` record (or a text starting ``Decision:`` /
  ``decided``), ``use|adopt|keep|choose|go with|switch to X`` asserts ``use X = yes`` and
  ``do not use|stop using|no longer use|abandon|drop|revert|reverse|roll back|rule out X``
  asserts ``use X = no`` (X: its first :data:`SUBJECT_WORDS` content words).

Two subjects are the same when one's words are a subset of the other's (``port`` and ``database
port``; not ``staging port`` and ``production port``). Identifiers, failures and findings are
facts too: any record kind but ``unit`` (a whole folded turn) is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..memory.facts import content_words

#: Most content words kept of a subject (the nearest to the value).
SUBJECT_WORDS = 3
#: Record kinds read for assertions (a ``unit`` is a whole turn, its facts are records already).
ASSERTING_KINDS = frozenset(
    {"decision", "instruction", "identifier", "finding", "commitment", "failure"}
)

_STATES = frozenset(
    [
        "on",
        "off",
        "enabled",
        "disabled",
        "true",
        "false",
        "yes",
        "no",
        "up",
        "down",
        "open",
        "closed",
        "active",
        "inactive",
    ]
)
_COPULA = (
    r"(?:is\s+now|is\s+set\s+to|was\s+set\s+to|set\s+to|changed\s+to|moved\s+to|"
    r"is|are|was|were|=|:)"
)
_VALUE = r"(?P<val>\"[^\"]{1,60}\"|'[^']{1,60}'|[A-Za-z0-9][\w.:/@+-]*)"
_ATTR = re.compile(
    r"(?P<subj>[A-Za-z][\w .'-]{0,80}?)\s*" + _COPULA + r"\s*" + _VALUE, re.IGNORECASE
)
_FROM_TO = re.compile(
    r"(?P<subj>[A-Za-z][\w .'-]{0,80}?)\s+from\s+(?P<old>[\w.:/@+-]+)\s+to\s+" + _VALUE,
    re.IGNORECASE,
)
_NEG = (
    r"(?:do\s+not\s+use|don't\s+use|not\s+use|stop\s+using|no\s+longer\s+use|abandon(?:ed)?|"
    r"drop(?:ped)?|revert(?:ed)?|reverse(?:d)?|roll(?:ed)?\s+back|rule(?:d)?\s+out|reject(?:ed)?)"
)
_POS = r"(?:use|adopt|keep|choose|chose|go\s+with|went\s+with|switch\s+to|switched\s+to)"
_STANCE = re.compile(
    r"\b(?:(?P<neg>" + _NEG + r")|(?P<pos>" + _POS + r"))\s+(?P<obj>(?:[^.;,()]|\.(?=\S)){1,120})",
    re.IGNORECASE,
)
_DECISION_HEAD = re.compile(r"^\s*(?:decision\b|decided\b)", re.IGNORECASE)
_CLAUSE = re.compile(r"[.;!?]\s+|\s+(?:but|and|then|because|so)\s+|,\s+", re.IGNORECASE)


@dataclass(frozen=True)
class Stated:
    """One ledger record as stated: its ``text`` and ``kind``, its ``key``
    (:func:`torpor.memory.ledger.record_key`), where — run, the ``seq`` of the event that
    wrote it, its ``idx`` in that event — and when (``at_ms``, that event's time)."""

    run_id: str
    seq: int
    idx: int
    at_ms: int
    kind: str
    text: str
    key: str = ""

    def order(self) -> tuple[int, str, int, int]:
        """The order facts are stated in: time, then run, seq and place."""
        return (self.at_ms, self.run_id, self.seq, self.idx)


@dataclass(frozen=True)
class Assertion:
    """What a fact says: ``subject`` (its content words, space-separated) has ``value``."""

    subject: str
    value: str


@dataclass(frozen=True)
class Conflict:
    """Facts ``older`` and ``newer`` give ``subject`` different values (``old_value``,
    ``new_value``): ``newer`` supersedes ``older`` from ``newer.at_ms`` on."""

    subject: str
    older: Stated
    newer: Stated
    old_value: str
    new_value: str


def _value_like(v: str) -> bool:
    if v[:1] in "\"'":
        return True
    low = v.lower().rstrip(".:")
    return (
        low in _STATES or any(c.isdigit() for c in low) or bool(re.search(r"[\w][.:/@_-]\w", low))
    )


#: Verbs of change left out of a subject (``switched the cache from A to B``: ``cache``).
_CHANGE_VERBS = frozenset(
    {"switched", "switch", "moved", "move", "changed", "change", "migrated", "migrate"}
    | {"upgraded", "upgrade", "downgraded", "downgrade", "bumped", "bump", "raised", "raise"}
    | {"lowered", "lower", "increased", "increase", "reduced", "reduce", "updated", "update"}
    | {"set", "pinned", "pin"}
)


def _subject(words: str, *, last: bool) -> str:
    ws = [w for w in dict.fromkeys(content_words(words)) if w not in _CHANGE_VERBS]
    if not ws:
        return ""
    return " ".join(ws[-SUBJECT_WORDS:] if last else ws[:SUBJECT_WORDS])


def _norm_value(v: str) -> str:
    v = v.strip().rstrip(".:,")
    if v[:1] in "\"'" and v[-1:] == v[:1]:
        v = v[1:-1]
    return " ".join(v.lower().split())


def assertions(text: str, kind: str = "finding") -> list[Assertion]:
    """What ``text`` (a record of ``kind``) asserts: ``[Assertion(subject, value)]`` in order,
    each subject once (the last value a text gives it stands). See the module doc for the
    forms read; a text asserting nothing gives ``[]``."""
    out: dict[str, str] = {}
    decision = kind == "decision" or bool(_DECISION_HEAD.match(text))
    for clause in _CLAUSE.split(text):
        clause = clause.strip()
        if not clause:
            continue
        m = _FROM_TO.search(clause)
        if m and _value_like(m.group("val")) and _value_like(m.group("old")):
            subj = _subject(m.group("subj"), last=True)
            if subj:
                out[subj] = _norm_value(m.group("val"))
                continue
        if decision:
            s = _STANCE.search(clause)
            if s and not s.group("neg"):
                v = next((t for t in s.group("obj").split() if _value_like(t)), None)
                if v is not None:  # "use port 6432 for the database": port = 6432
                    head = s.group("obj").split(v, 1)[0]
                    subj = _subject(head, last=True)
                    if subj:
                        out[subj] = _norm_value(v)
                        continue
            if s:
                obj = _subject(s.group("obj"), last=False)
                if obj:
                    out["use " + obj] = "no" if s.group("neg") else "yes"
                    continue
        for a in _ATTR.finditer(clause):
            if not _value_like(a.group("val")):
                continue
            subj = _subject(a.group("subj"), last=True)
            if subj:
                out[subj] = _norm_value(a.group("val"))
    return [Assertion(s, v) for s, v in out.items()]


def same_subject(a: str, b: str) -> bool:
    """Whether subjects ``a`` and ``b`` name the same thing: one's words are a subset of the
    other's (``use`` stances only match ``use`` stances)."""
    wa, wb = a.split(), b.split()
    if (wa[:1] == ["use"]) != (wb[:1] == ["use"]):
        return False
    sa, sb = set(wa), set(wb)
    return bool(sa) and bool(sb) and (sa <= sb or sb <= sa)


def contradictions(facts: Iterable[Stated]) -> list[Conflict]:
    """The conflicts among ``facts``, walked in the order stated (:meth:`Stated.order`; the
    input's own order does not matter): each fact's assertions are compared with the value in
    force for the same subject (:func:`same_subject`) — the latest fact that gave it one —
    and a different value is a :class:`Conflict` (the older fact superseded by this one);
    a fact repeating the value in force is no conflict. Returned in the order found."""
    held: dict[str, tuple[str, Stated]] = {}
    out: list[Conflict] = []
    for f in sorted(facts, key=Stated.order):
        if f.kind not in ASSERTING_KINDS:
            continue
        for a in assertions(f.text, f.kind):
            matched = [s for s in held if same_subject(s, a.subject)]
            for s in matched:
                value, older = held.pop(s)
                if value != a.value and older.order() != f.order():
                    out.append(Conflict(a.subject, older, f, value, a.value))
            held[a.subject] = (a.value, f)
    return out


def in_force(facts: Iterable[Stated]) -> dict[str, tuple[str, Stated]]:
    """``{subject: (value, fact)}`` after walking ``facts`` in the order stated: the value each
    subject holds now and the fact that gave it (what a conflict leaves standing)."""
    held: dict[str, tuple[str, Stated]] = {}
    for f in sorted(facts, key=Stated.order):
        if f.kind not in ASSERTING_KINDS:
            continue
        for a in assertions(f.text, f.kind):
            for s in [s for s in held if same_subject(s, a.subject)]:
                del held[s]
            held[a.subject] = (a.value, f)
    return held


def involving(conflicts: Sequence[Conflict], run_id: str) -> list[Conflict]:
    """The ``conflicts`` one of whose facts is run ``run_id``'s (what that run's capture
    records: each conflict is recorded by the capture that first sees both facts)."""
    return [c for c in conflicts if run_id in (c.older.run_id, c.newer.run_id)]


__all__ = [
    "ASSERTING_KINDS",
    "SUBJECT_WORDS",
    "Assertion",
    "Conflict",
    "Stated",
    "assertions",
    "contradictions",
    "in_force",
    "involving",
    "same_subject",
]
