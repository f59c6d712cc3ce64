"""Ranked retrieval inside the full-text index, in time bounded by the filter's size.

Both backends index each episode's words *and* one token per filter (scope, agent, task type,
outcome; :func:`~.model.tag`), so "these words within this scope and task type" is an
intersection of posting lists the index answers without looking at any other scope. Ranking
is BM25 with term presence (``k1 = 0``: each query word an episode contains adds its inverse
document frequency), the IDF computed *within the caller's scope* — how rare the word is among
the scope's episodes (agent, task type, outcome and time narrow what is returned, not the
weights); English stop words (:data:`~.model.STOP_WORDS`) are left out of the query first:

1. ``N`` — how many episodes the scope holds (capped at :data:`N_CAP`);
2. for each query word, ``df`` — how many of those contain it, up to
   ``cap = max(CAP_MIN, min(N / 5, CAP_MAX))``: a word found in a fifth of the scope or more
   (or in ``CAP_MAX`` of its episodes, in a scope of more than 5 x ``CAP_MAX``) is as
   uninformative as a stop word and is not scored — so scoring a word never reads more than
   ``CAP_MAX`` postings, whatever the scope's size. Both are one statement for all the words
   (:meth:`~torpor.store.domain.EpisodeIndex.counted`): SQLite counts in FTS5 (each count
   stopping at ``CAP_MAX``); PostgreSQL reads its per-scope counters, where a GIN count would
   visit a row per match and intersect the scope with the word's store-wide posting list;
3. the episodes containing the informative words are scored, ``idf = ln(1 + (N - df + .5) /
   (df + .5))`` summed, best first (ties: the most recently written);
4. the slots left are filled with the most recent episodes containing any of the common words.

So a query never ranks more than ``cap`` episodes per word, however many the store holds —
unlike an index's own BM25, whose IDF pass reads every posting of every query term (FTS5's
``bm25()``) or which scores every match (``ts_rank``). Rows are then read by id with the exact
columns compared (scope, agent, task type, outcome, superseded, time), so a token collision
could never leak an episode of another scope; when that check drops rows, more candidates are
read. The queries of each step are the store's (:class:`~torpor.store.domain.EpisodeIndex`);
the ranking is here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..store.domain import EpisodeFilter, EpisodeIndex
from ..store.episode_index import EPISODE_COLUMNS
from ..store.episode_index import fts5_expr as _fts5_expr
from .model import STOP_WORDS, pair_tag, tag

#: A word in at least this many episodes of the filter (or a fifth of them, if more) is not
#: scored (see the module docstring).
CAP_MIN = 200
#: A word is counted (and scored) in at most this many episodes of a filter; in more, it is
#: common (see the module docstring).
CAP_MAX = 1000
#: The filter's size is counted up to this many episodes.
N_CAP = 50_000


@dataclass(frozen=True)
class Filters:
    """What a search is restricted to (``None``: any). Times are epoch ms."""

    scope: str
    agent: str | None = None
    task_type: str | None = None
    outcome: str | None = None
    live: bool = True
    since_ms: int = -(2**62)
    until_ms: int = 2**62

    def tags(self) -> list[str]:
        """The index tokens that must all be present (scope and task type as one)."""
        if self.task_type is not None:
            out = [pair_tag(self.scope, self.task_type)]
        else:
            out = [tag("scope", self.scope)]
        for name in ("agent", "outcome"):
            value = getattr(self, name)
            if value is not None:
                out.append(tag(name, value))
        return out

    def for_index(self) -> EpisodeFilter:
        """The filter as the store's index takes it (its tokens computed)."""
        return EpisodeFilter(
            scope=self.scope,
            tags=tuple(self.tags()),
            agent=self.agent,
            task_type=self.task_type,
            outcome=self.outcome,
            live=self.live,
            since_ms=self.since_ms,
            until_ms=self.until_ms,
        )

    def params(self) -> dict[str, Any]:
        return self.for_index().params()


def fts5_expr(f: Filters, words: Sequence[str]) -> str:
    """The FTS5 expression of ``f`` and any of ``words`` (see
    :func:`torpor.store.episode_index.fts5_expr`)."""
    return _fts5_expr(f.for_index(), words)


class Searcher:
    """Top-k search over one snapshot of the store's index (see the module docstring)."""

    def __init__(self, index: EpisodeIndex):
        self.index = index

    def _weigh(
        self, f: EpisodeFilter, words: Sequence[str]
    ) -> tuple[int, dict[str, float], list[str]]:
        """``(N, {informative word: idf}, [common words])`` for the filter, counted in the
        index on every backend (capped: see the module docstring)."""
        ix = self.index
        within = EpisodeFilter(scope=f.scope, tags=(tag("scope", f.scope),))
        counted = ix.counted(within, words, N_CAP, CAP_MAX)
        if counted is None:  # (not reached: within is a scope-only filter)
            n = ix.count(within, [], N_CAP)
            cap = max(CAP_MIN, min(n // 5, CAP_MAX))
            dfs = {w: ix.count(within, [w], cap) for w in words} if n else {}
        else:  # one statement; each count exact or at least its cap, capped here
            n = min(counted[0], N_CAP)
            cap = max(CAP_MIN, min(n // 5, CAP_MAX))
            dfs = {w: min(counted[1][w], cap) for w in words if w in counted[1]}
            dfs.update({w: ix.count(within, [w], cap) for w in words if w not in dfs and n})
        idf: dict[str, float] = {}
        common: list[str] = []
        for w in words:
            df = dfs.get(w, 0)
            if df >= cap:
                common.append(w)
            elif df > 0:
                idf[w] = math.log(1 + (n - df + 0.5) / (df + 0.5))
        return n, idf, common

    def search(
        self, filters: Filters, words: Sequence[str], limit: int
    ) -> list[tuple[tuple[Any, ...], float]]:
        """The ``limit`` best rows (episode columns) with their scores."""
        f, ix = filters.for_index(), self.index
        content = [w for w in words if w not in STOP_WORDS]
        if words and not content:
            return []  # only stop words: nothing to match (as PostgreSQL's index has none)
        words = content
        n, idf, common = self._weigh(f, words)
        if n == 0:
            return []
        over = limit * 2 + 8
        while True:
            ranked = ix.scored(f, idf, over) if idf else []
            truncated = len(ranked) == over
            if len(ranked) < over and (common or not words):
                fill, more = ix.recent(f, common, over, n)
                truncated = truncated or more
                seen = {i for i, _ in ranked}
                ranked += [(i, s) for i, s in fill if i not in seen]
            rows = ix.rows(f, [i for i, _ in ranked])
            out = [(rows[i], s) for i, s in ranked if i in rows]
            if len(out) >= limit or not truncated:
                return out[:limit]
            over *= 4


__all__ = ["CAP_MAX", "CAP_MIN", "EPISODE_COLUMNS", "N_CAP", "Filters", "Searcher", "fts5_expr"]
