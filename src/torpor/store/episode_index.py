"""The full-text index of episodes, as :mod:`torpor.episodes.search` ranks with it: the
queries each step of a search runs, within one read snapshot (an
:class:`~torpor.store.domain.EpisodeIndex`). Both backends index each episode's words and one
token per filter (scope, agent, task type, outcome), so a filter and the query's words are one
intersection of posting lists: SQLite FTS5 (``episodes_fts``, an external-content index) and
PostgreSQL full text (a ``tsvector`` with a GIN index). SQLite counts a scope's episodes and a
word's within it in FTS5; PostgreSQL reads them from ``episode_terms`` (per-scope counters kept
by a trigger, migration 0021: writers in different scopes share no row), so a search weighs
words the same way on both. Rows are then read by id with the exact columns compared, so a
token collision could never leak an episode of another scope.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .base import Driver
from .domain import EpisodeFilter, Row

EPISODE_COLUMNS = (
    "episode_id, run_id, boundary, scope, agent, task_type, kind, outcome, summary, lesson, "
    "at_seq, created_at_ms, conditions, refs, claims, superseded_by, valid_until_ms"
)

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


def fts5_expr(f: EpisodeFilter, words: Sequence[str]) -> str:
    """The FTS5 expression: every filter token AND any of ``words`` (quoted; letters and
    digits only, by :func:`~torpor.episodes.model.terms`)."""
    out = "tags : (" + " AND ".join(f.tags) + ")"
    if words:
        out += " AND {summary lesson} : (" + " OR ".join(f'"{w}"' for w in words) + ")"
    return out


class SQLEpisodeIndex:
    """The :class:`~torpor.store.domain.EpisodeIndex` over ``driver`` within the read snapshot
    ``cur`` (``queries``: the episode queries of its dialect)."""

    def __init__(self, driver: Driver, cur: Any, queries: dict[str, str]):
        self.driver = driver
        self.cur = cur
        self.queries = queries
        self.sqlite = driver.dialect == "sqlite"
        if not self.sqlite:
            # Every query of a search is an intersection of GIN posting lists; the planner's
            # estimate for a filter token (rare, so outside the tsvector statistics) would
            # otherwise trade it for a sequential scan on small or freshly loaded tables.
            # And every plan is made for its parameters: psycopg prepares a statement after
            # its fifth use, and PostgreSQL's generic plan of the rows-by-id query (no
            # parameter values) walks the whole scope along (scope, created_at_ms) instead of
            # probing the ids — 40,030 rows, 494 ms on a 300k store, where the custom plan
            # takes 0.1 ms (EXPLAIN ANALYZE; the p95 tail of issue 31).
            driver.execute(
                cur,
                "SELECT set_config('enable_seqscan', 'off', true), "
                "set_config('plan_cache_mode', 'force_custom_plan', true)",
                {},
            )

    def _cond(
        self, f: EpisodeFilter, words: Sequence[str], key: str, params: dict[str, Any]
    ) -> str:
        """A WHERE condition matching the filter and any of ``words``; binds its params."""
        if self.sqlite:
            params[key] = fts5_expr(f, words)
            return f"episodes_fts MATCH :{key}"
        params[key + "_f"] = " & ".join(f.tags)
        if not words:
            return f"tsv @@ CAST(:{key}_f AS tsquery)"
        params[key + "_w"] = " | ".join(words)
        # Words that are all English stop words make an empty tsquery, and ``f && empty`` is
        # ``f``: the whole filter would match. Such words match nothing (a constant, checked
        # once per query, never per row).
        words_q = f"to_tsquery('english', CAST(:{key}_w AS text))"
        return f"numnode({words_q}) > 0 AND tsv @@ (CAST(:{key}_f AS tsquery) && {words_q})"

    def _table(self) -> str:
        return "episodes_fts" if self.sqlite else "episodes"

    def count(self, f: EpisodeFilter, words: Sequence[str], cap: int) -> int:
        """How many episodes of ``f`` hold any of ``words`` (all of ``f``: none), up to ``cap``.
        (A search within a scope reads PostgreSQL's counters instead: :meth:`counted`.)"""
        params: dict[str, Any] = {"cap": cap}
        if not self.sqlite and not words and f.agent is None and f.outcome is None:
            params.update(scope=f.scope, task_type=f.task_type)
            tt = "" if f.task_type is None else " AND task_type = :task_type"
            sql = (
                "SELECT count(*) FROM (SELECT 1 FROM episodes "
                f"WHERE scope = :scope{tt} LIMIT :cap) t"
            )
            row = self.driver.fetchone(self.cur, sql, params)
            return int(row[0]) if row else 0
        cond = self._cond(f, words, "m", params)
        sql = f"SELECT count(*) FROM (SELECT 1 FROM {self._table()} WHERE {cond} LIMIT :cap) t"
        row = self.driver.fetchone(self.cur, sql, params)
        return int(row[0]) if row else 0

    def counted(
        self, f: EpisodeFilter, words: Sequence[str], n_cap: int, cap: int
    ) -> tuple[int, dict[str, int]] | None:
        """``(episodes of f up to n_cap, {word: episodes of f holding it, up to cap})`` in one
        statement, for a scope-only ``f`` (None for any other filter: :meth:`count` counts
        it). PostgreSQL reads its per-scope counters (``episode_terms``, migration 0021; exact
        counts, never fewer than the caps ask for), leaving out a word that is not exactly one
        lexeme (:meth:`count` counts it in the index); SQLite counts each in FTS5, one scalar
        subquery apiece (no statement per word)."""
        if f.agent is not None or f.task_type is not None or f.outcome is not None:
            return None
        if self.sqlite:
            params: dict[str, Any] = {"n_cap": n_cap, "cap": cap, "m": fts5_expr(f, [])}
            cols = ["(SELECT count(*) FROM (SELECT 1 FROM episodes_fts "
                    "WHERE episodes_fts MATCH :m LIMIT :n_cap))"]  # fmt: skip
            for i, w in enumerate(words):
                params[f"m{i}"] = fts5_expr(f, [w])
                cols.append(
                    "(SELECT count(*) FROM (SELECT 1 FROM episodes_fts "
                    f"WHERE episodes_fts MATCH :m{i} LIMIT :cap))"
                )
            row = self.driver.fetchone(self.cur, "SELECT " + ", ".join(cols), params)
            got = [int(x) for x in row] if row else [0] * (len(words) + 1)
            return got[0], dict(zip(words, got[1:], strict=True))
        sql = (
            "SELECT q.w, cardinality(q.a), (SELECT t.docs FROM episode_terms t "
            "WHERE t.scope = :scope AND t.lexeme = q.a[1]) FROM (SELECT w, "
            "tsvector_to_array(to_tsvector('english', w)) AS a "
            "FROM unnest(CAST(:words AS text[])) AS w) q "
            "UNION ALL SELECT NULL, 1, (SELECT docs FROM episode_terms "
            "WHERE scope = :scope AND lexeme = '')"
        )
        rows = self.driver.fetchall(self.cur, sql, {"scope": f.scope, "words": list(words)})
        n, dfs = 0, {}
        for w, lexemes, docs in rows:
            if w is None:
                n = int(docs or 0)
            elif int(lexemes) == 1:
                dfs[str(w)] = int(docs or 0)
            elif int(lexemes) == 0:
                dfs[str(w)] = 0
        return n, dfs

    def scored(self, f: EpisodeFilter, idf: Mapping[str, float], over: int) -> list[Row]:
        """``(id, score)`` of up to ``over`` episodes, best first (ties: newest): one index
        lookup per word (the filter and that word), the weights summed. On PostgreSQL each is a
        GIN bitmap scan that reads a match's id from its row, never its ``tsvector`` (a plain
        lexeme query needs no recheck), so a long episode costs no more than a short one."""
        params: dict[str, Any] = {"over": over}
        parts = []
        table, rid = ("episodes_fts", "rowid") if self.sqlite else ("episodes", "id")
        for i, (w, weight) in enumerate(idf.items()):
            cond = self._cond(f, [w], f"m{i}", params)
            params[f"i{i}"] = weight
            cast = f":i{i}" if self.sqlite else f"CAST(:i{i} AS float8)"
            parts.append(f"SELECT {rid} AS id, {cast} AS w FROM {table} WHERE {cond}")
        # Rounded: a float sum's last bits depend on the order rows arrive in, and ties must
        # break the same way (by id) on both backends.
        total = "round(sum(w), 9)" if self.sqlite else "round(CAST(sum(w) AS numeric), 9)"
        sql = (
            f"SELECT id, {total} AS s FROM (" + " UNION ALL ".join(parts) + ") u "
            "GROUP BY id ORDER BY s DESC, id DESC LIMIT :over"
        )
        return [(int(i), float(s)) for i, s in self.driver.fetchall(self.cur, sql, params)]

    def recent(
        self, f: EpisodeFilter, words: Sequence[str], over: int, n: int
    ) -> tuple[list[Row], bool]:
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
        found: list[Row] = [(int(r[0]), 0.0) for r in self.driver.fetchall(self.cur, sql, params)]
        return found, len(found) == over or (not self.sqlite and over * 8 < n)

    def rows(self, f: EpisodeFilter, ids: Sequence[int]) -> dict[int, Row]:
        """``{id: episode columns}`` of the ``ids`` whose exact columns match ``f``."""
        params = f.params()
        params["ids"] = json.dumps(list(ids)) if self.sqlite else list(ids)
        sql = _ROWS_SQLITE if self.sqlite else _ROWS_POSTGRES
        return {int(r[-1]): r[:-1] for r in self.driver.fetchall(self.cur, sql, params)}


__all__ = ["EPISODE_COLUMNS", "SQLEpisodeIndex", "fts5_expr"]
