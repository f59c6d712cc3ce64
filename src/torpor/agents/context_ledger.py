"""The agent's side of the fact ledger and of recall (issue 30): what a compaction writes to
the ledger (:class:`LedgerCache`), and the ``recall`` section of each context
(:func:`recall_section`), both reading the run's ledger rows from the store
(:mod:`torpor.store.ledger`) with the pure rules of :mod:`torpor.memory.ledger` and
:mod:`torpor.memory.recall`.

Both read the ledger *as of the latest compaction this process has taken* (``upto``), never
past it: a run resumed from a checkpoint replays its later compactions and builds the same
contexts an uninterrupted run built, although the store already holds the later records.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..memory.buffer import Unit
from ..memory.compaction import SummaryLine
from ..memory.context import PRIORITIES, ContextSection, section_tokens
from ..memory.facts import content_words, shape
from ..memory.ledger import LedgerRecord, as_payload, dedupe, extract, from_payload, supersede
from ..memory.recall import CANDIDATES, RECALL_HEAD, query_terms, recalled
from ..store.ledger import LedgerRow, LedgerRows

#: Most records one recall section shows.
RECALL_LINES = 16


def _record(row: LedgerRow) -> LedgerRecord:
    return LedgerRecord.model_validate(row.data)


@dataclass
class LedgerCache:
    """The run's ledger keys, superseded keys and live supersedable records as of one
    compaction: what dedup and supersession of the next one compare with."""

    keys: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)
    live: list[LedgerRecord] = field(default_factory=list)
    #: How often each shape of a tool-output fact occurs in the ledger (run-level novelty:
    #: :class:`~torpor.memory.compaction.ExtractiveSummarizer` ``forms``).
    forms: Counter[str] = field(default_factory=Counter)

    @classmethod
    def read(cls, store: LedgerRows, run_id: str, upto: int) -> LedgerCache:
        if upto <= 0:
            return cls()
        keys, gone, rows = store.ledger_index(run_id, upto=upto)
        live = [r for r in (_record(x) for x in rows) if r.key not in gone]
        forms = Counter(shape(t) for t in store.ledger_output_facts(run_id, upto=upto))
        return cls(keys, gone, live, forms)

    def new_records(
        self,
        units: Sequence[Unit],
        lines: Sequence[SummaryLine],
        number: int,
        goal: str,
        extractive: bool,
        scrub: Callable[[Any], Any],
    ) -> list[dict[str, Any]]:
        """The records compaction ``number`` writes for folding ``units``
        (:func:`~torpor.memory.ledger.extract`, scrubbed by ``scrub``), deduplicated against
        the ledger and superseding the live records they replace, as JSON data."""
        made = extract(units, lines, number, goal=goal, extractive=extractive, scrub=scrub)
        return as_payload(supersede(self.live, dedupe(self.keys, made)))

    def add(self, records: Sequence[dict[str, Any]]) -> None:
        """Take a recorded compaction's records."""
        for r in from_payload(records):
            if r.kind != "unit" and r.source in ("result", "args"):
                self.forms[shape(r.text)] += 1
            self.keys.add(r.key)
            self.gone.update(r.supersedes)
            if r.kind in ("decision", "instruction", "commitment", "question"):
                self.live.append(r)
        self.live = [r for r in self.live if r.key not in self.gone]


def focus_texts(units: Sequence[Unit], step: str) -> list[str]:
    """What recall searches for, most telling first: the latest unit's words (the model's,
    an operator's, a note's), the current plan step, the latest unit's calls, the words of
    the unit before."""
    if not units:
        return [step] if step else []
    last = units[-1]
    calls = " ".join(f"{c.tool} {json.dumps(c.args, default=str)}" for c in last.calls)
    before = units[-2].text if len(units) > 1 else ""
    return [last.text, step, calls, before]


def recall_section(
    store: LedgerRows,
    run_id: str,
    *,
    upto: int,
    units: Sequence[Unit],
    step: str,
    goal: str,
    pinned: Sequence[str],
    gone: set[str],
    tokens: int,
) -> ContextSection | None:
    """The ``recall`` section (priority :data:`~torpor.memory.context.PRIORITIES`
    ``["recall"]``) within ``tokens``: its best lines first (a cut keeps the best), or None
    when nothing relevant was found. ``gone``: the keys the ledger's records supersede.

    The ledger as of compaction ``upto`` never changes, so the section is a function of these
    arguments: the last one is kept and given again when asked with the same ones (an agent
    builds its context more than once a turn)."""
    last = units[-1] if units else None
    key = (
        id(store),
        run_id,
        upto,
        tuple((u.turn, u.kind, u.text) for u in units),
        tuple((c.tool, json.dumps(c.args, default=str)) for c in last.calls) if last else (),
        step,
        goal,
        tuple(pinned),
        len(gone),
        tokens,
    )
    if _LAST and _LAST[0] == key:
        return _LAST[1]
    out = _recall_section(store, run_id, upto, units, step, goal, pinned, gone, tokens)
    _LAST[:] = [key, out]
    return out


_LAST: list[Any] = []  # [key, section]: the last recall section built (see recall_section)


def _recall_section(
    store: LedgerRows,
    run_id: str,
    upto: int,
    units: Sequence[Unit],
    step: str,
    goal: str,
    pinned: Sequence[str],
    gone: set[str],
    tokens: int,
) -> ContextSection | None:
    habits = [u.text for u in units[:-1] if u.kind in ("model", "plan")]
    terms = query_terms(focus_texts(units, step), common=_goal_words(goal), habits=habits)
    if not terms or tokens <= 0:
        return None
    rows = store.search_ledger(run_id, list(terms), upto=upto, limit=CANDIDATES)
    if not rows:
        return None
    candidates = [_record(r) for r in rows]
    got = recalled(
        candidates,
        terms,
        superseded=gone,
        buffered_from=min((u.turn for u in units), default=None),
        shown=pinned,
        limit=RECALL_LINES,
        echo=[units[-1].text] if units else (),
    )
    if not got.lines:
        return None
    kept = [RECALL_HEAD]
    for line in got.lines:  # best first: a line that does not fit leaves room for the next
        if section_tokens("\n".join([*kept, line.text]), "recall") <= tokens:
            kept.append(line.text)
    if len(kept) == 1:
        return None
    return ContextSection("recall", PRIORITIES["recall"], "\n".join(kept))


def _goal_words(goal: str) -> list[str]:
    return content_words(goal)
