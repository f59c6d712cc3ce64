"""Ranked retrieval inside the full-text index, in time bounded by the filter's size.

Both backends index each episode's words *and* one token per filter (scope, agent, task type,
outcome; :func:`~.model.tag`), so "these words within this scope and task type" is an
intersection of posting lists the index answers without looking at any other scope. Ranking
is BM25 with term presence (``k1 = 0``: each query word an episode contains adds its inverse
document frequency), the IDF computed *within the filter* — how rare the word is among the
episodes the caller may see:

1. ``N`` — how many episodes the filter holds (counted in the index, capped);
2. for each query word, ``df`` — how many of those contain it, counted up to
   ``cap = max(CAP_MIN, N / 5)``: a word found in a fifth of the filter or more is as
   uninformative as a stop word and is not scored;
3. the episodes containing the informative words are scored, ``idf = ln(1 + (N - df + .5) /
   (df + .5))`` summed, best first (ties: the most recently written);
4. the slots left are filled with the most recent episodes containing any of the common words.

So a query never ranks more than ``cap`` episodes per word, however many the store holds —
unlike an index's own BM25, whose IDF pass reads every posting of every query term (FTS5's
``bm25()``) or which scores every match (``ts_rank``). Rows are then read by id with the exact
columns compared (scope, agent, task type, outcome, superseded, time), so a token collision
could never leak an episode of another scope; when that check drops rows, more candidates are
read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..store.base import Driver
from .model import pair_tag, tag

#: A word in at least this many episodes of the filter (or a fifth of them, if more) is not
#: scored (see the module docstring).
CAP_MIN = 200
#: The filter's size is counted up to this many episodes.
N_CAP = 50_000

EPISODE_COLUMNS = (
    "episode_id, run_id, boundary, scope, agent, task_type, kind, outcome, summary, lesson, "
    "at_seq, created_at_ms, conditions, refs, claims, superseded_by"
)


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

    def params(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "agent": self.agent,
            "task_type": self.task_type,
            "outcome": self.outcome,
            "live": self.live,
            "since_ms": self.since_ms,
            "until_ms": self.until_ms,
        }


_E_COLUMNS = ", ".join("e." + c.strip() for c in EPISODE_COLUMNS.split(","))

#: Rows by id, the ids driving the loop (CROSS JOIN: SQLite keeps this order; left to itself
#: it may prefer walking the scope's index), the exact columns compared.
_ROWS_SQLITE = (
    f"SELECT {_E_COLUMNS}, e.id FROM json_each(:ids) AS j CROSS JOIN episodes AS e "
    "ON e.id = j.value WHERE e.scope = :scope "
    "AND (:agent IS NULL OR e.agent = :agent) "
    "AND (:task_type IS NULL OR e.task_type = :task_type) "
    "AND (:outcome IS NULL OR e.outcome = :outcome) "
    "AND (:live = 0 OR e.superseded_by IS NULL) "
    "AND e.created_at_ms >= :since_ms AND e.created_at_ms <= :until_ms"
)
_ROWS_POSTGRES = (
    f"SELECT {_E_COLUMNS}, e.id FROM unnest(CAST(:ids AS bigint[])) AS j(id) "
    "JOIN episodes AS e ON e.id = j.id WHERE e.scope = :scope "
    "AND (CAST(:agent AS text) IS NULL OR e.agent = CAST(:agent AS text)) "
    "AND (CAST(:task_type AS text) IS NULL OR e.task_type = CAST(:task_type AS text)) "
    "AND (CAST(:outcome AS text) IS NULL OR e.outcome = CAST(:outcome AS text)) "
    "AND (NOT CAST(:live AS boolean) OR e.superseded_by IS NULL) "
    "AND e.created_at_ms >= :since_ms AND e.created_at_ms <= :until_ms"
)


def fts5_expr(f: Filters, words: Sequence[str]) -> str:
    """The FTS5 expression: every filter token AND any of ``words`` (quoted; letters and
    digits only, by :func:`~.model.terms`)."""
    out = "tags : (" + " AND ".join(f.tags()) + ")"
    if words:
        out += " AND {summary lesson} : (" + " OR ".join(f'"{w}"' for w in words) + ")"
    return out


class Searcher:
    """Top-k search over one driver (see the module docstring)."""

    def __init__(self, driver: Driver, queries: dict[str, str]):
        self.driver = driver
        self.q = queries
        self.sqlite = driver.dialect == "sqlite"

    # ---------------------------------------------------------------- index queries

    def _cond(self, f: Filters, words: Sequence[str], key: str, params: dict[str, Any]) -> str:
        """A WHERE condition matching the filter and any of ``words``; binds its params."""
        if self.sqlite:
            params[key] = fts5_expr(f, words)
            return f"episodes_fts MATCH :{key}"
        params[key + "_f"] = " & ".join(f.tags())
        if not words:
            return f"tsv @@ CAST(:{key}_f AS tsquery)"
        params[key + "_w"] = " | ".join(words)
        return (
            f"tsv @@ (CAST(:{key}_f AS tsquery) && to_tsquery('english', CAST(:{key}_w AS text)))"
        )

    def _id(self) -> str:
        return "rowid" if self.sqlite else "id"

    def _table(self) -> str:
        return "episodes_fts" if self.sqlite else "episodes"

    def _count(self, cur: Any, f: Filters, words: Sequence[str], cap: int) -> int:
        params: dict[str, Any] = {"cap": cap}
        cond = self._cond(f, words, "m", params)
        sql = f"SELECT count(*) FROM (SELECT 1 FROM {self._table()} WHERE {cond} LIMIT :cap) t"
        row = self.driver.fetchone(cur, sql, params)
        return int(row[0]) if row else 0

    def _scored(
        self, cur: Any, f: Filters, idf: dict[str, float], over: int
    ) -> list[tuple[int, float]]:
        params: dict[str, Any] = {"over": over}
        parts = []
        for i, (w, weight) in enumerate(idf.items()):
            cond = self._cond(f, [w], f"m{i}", params)
            params[f"i{i}"] = weight
            cast = f":i{i}" if self.sqlite else f"CAST(:i{i} AS float8)"
            parts.append(
                f"SELECT {self._id()} AS id, {cast} AS w FROM {self._table()} WHERE {cond}"
            )
        sql = (
            "SELECT id, sum(w) AS s FROM (" + " UNION ALL ".join(parts) + ") u "
            "GROUP BY id ORDER BY s DESC, id DESC LIMIT :over"
        )
        return [(int(i), float(s)) for i, s in self.driver.fetchall(cur, sql, params)]

    def _recent(
        self, cur: Any, f: Filters, words: Sequence[str], over: int, n: int
    ) -> tuple[list[tuple[int, float]], bool]:
        """The ``over`` newest episodes of the filter holding any of ``words``, and whether
        there may be more (``n``: the filter's size)."""
        params: dict[str, Any] = {"over": over}
        cond = self._cond(f, words, "m", params)
        if self.sqlite:  # FTS5 walks the posting lists newest first and stops early
            sql = f"SELECT rowid FROM episodes_fts WHERE {cond} ORDER BY rowid DESC LIMIT :over"
        else:
            # The scope's newest rows along its b-tree (the LIMIT keeps the planner from
            # trading that walk for a bitmap of every match), then checked for the words:
            # they are common, so a window a few times the slots left holds enough of them.
            params.update(scope=f.scope, task_type=f.task_type, window=over * 8)
            tt = "" if f.task_type is None else "AND task_type = :task_type "
            sql = (
                "SELECT id FROM (SELECT id, tsv, created_at_ms FROM episodes "
                f"WHERE scope = :scope {tt}ORDER BY created_at_ms DESC LIMIT :window) r "
                f"WHERE {cond} ORDER BY created_at_ms DESC, id DESC LIMIT :over"
            )
        found = [(int(r[0]), 0.0) for r in self.driver.fetchall(cur, sql, params)]
        return found, len(found) == over or (not self.sqlite and over * 8 < n)

    def _rows(self, cur: Any, f: Filters, ids: list[int]) -> dict[int, tuple[Any, ...]]:
        params = f.params()
        params["ids"] = json.dumps(ids) if self.sqlite else ids
        sql = _ROWS_SQLITE if self.sqlite else _ROWS_POSTGRES
        return {int(r[-1]): r[:-1] for r in self.driver.fetchall(cur, sql, params)}

    # ---------------------------------------------------------------- the search

    def _weigh(
        self, cur: Any, f: Filters, words: Sequence[str]
    ) -> tuple[int, dict[str, float], list[str]]:
        """``(N, {informative word: idf}, [common words])`` for the filter. SQLite counts in
        the index (capped); PostgreSQL reads the lexeme counters (it would have to visit every
        row to count it), scaling a word's store-wide count to the filter."""
        if self.sqlite:
            n = self._count(cur, f, [], N_CAP)
            cap = max(CAP_MIN, n // 5)
            dfs = {w: self._count(cur, f, [w], cap) for w in words} if n else {}
        else:
            tags = f.tags()
            found = dict(self.driver.fetchall(cur, self.q["tag_docs"], {"tags": [*tags, ""]}))
            total = int(found.get("", 0))
            n = min(int(found.get(t, 0)) for t in tags)
            cap = max(CAP_MIN, n // 5)
            docs = dict(self.driver.fetchall(cur, self.q["word_docs"], {"words": list(words)}))
            dfs = {
                w: max(1, round(int(d) * n / total)) if d else 0
                for w, d in docs.items()
                if n and total
            }
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
        self, cur: Any, f: Filters, words: Sequence[str], limit: int
    ) -> list[tuple[tuple[Any, ...], float]]:
        """The ``limit`` best rows (episode columns) with their scores."""
        n, idf, common = self._weigh(cur, f, words)
        if n == 0:
            return []
        over = limit * 2 + 8
        while True:
            ranked = self._scored(cur, f, idf, over) if idf else []
            truncated = len(ranked) == over
            if len(ranked) < over and (common or not words):
                fill, more = self._recent(cur, f, common, over, n)
                truncated = truncated or more
                seen = {i for i, _ in ranked}
                ranked += [(i, s) for i, s in fill if i not in seen]
            rows = self._rows(cur, f, [i for i, _ in ranked])
            out = [(rows[i], s) for i, s in ranked if i in rows]
            if len(out) >= limit or not truncated:
                return out[:limit]
            over *= 4


__all__ = ["CAP_MIN", "EPISODE_COLUMNS", "N_CAP", "Filters", "Searcher", "fts5_expr"]
