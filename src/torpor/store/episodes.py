"""Episode rows: written idempotently at run boundaries, superseded, pruned, their artifact
references kept and collected; searching is :mod:`.episode_index`. A mixin of
:class:`~torpor.store.sqlstore.SQLStore` (the :class:`~torpor.store.domain.EpisodeRows` part
of its protocol). What an episode says, when one contradicts another, and how a search ranks is
:mod:`torpor.episodes`.

The queries are whole in ``sql/episodes/<dialect>.sql`` by name; a few exist in one dialect
only — the batch insert (SQLite: ``last_episode_id``, ``insert_episode``, ``inserted_since``,
``index_since`` and ``unindex_episode``, its FTS5 index's own rows; PostgreSQL:
``insert_episodes``, one statement computing the ``tsvector`` column) — and the store runs
whichever its dialect has.

Writing is keyed by ``(run_id, boundary)`` (``INSERT … ON CONFLICT DO NOTHING``) in one
transaction with the run row's ``episodes_seq``: a process killed at any point leaves each
episode written once or not at all. The artifacts an episode names are recorded in
``blob_refs`` under the owner ``episode:<episode id>`` in that transaction, and deleted in the
one that prunes it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import faults
from .base import Driver, load_queries
from .domain import EPISODE_OWNER_PREFIX, EpisodeIndex, EpisodeRecord, Row
from .episode_index import SQLEpisodeIndex
from .episode_scopes import insert_conflicts

#: ``json.dumps(x, sort_keys=True)``, without building an encoder per call.
_dumps = json.JSONEncoder(sort_keys=True).encode


@functools.cache
def load_episode_queries(dialect: str) -> dict[str, str]:
    """``{name: sql}`` from ``sql/episodes/<dialect>.sql`` (see :func:`.base.load_queries`)."""
    return load_queries(dialect, Path(__file__).parent / "sql" / "episodes")


class EpisodeTables:
    """See :class:`~torpor.store.domain.EpisodeRows` for each method's rows."""

    driver: Driver

    @property
    def _eq(self) -> dict[str, str]:
        return load_episode_queries(self.driver.dialect)

    def episode_filing(self, run_id: str) -> Row | None:
        """``(workflow, scope, task_type, seq captured)`` of the run; None: unknown run."""
        with self.driver.read() as cur:
            return self.driver.fetchone(cur, self._eq["run_filing"], {"run_id": run_id})

    def write_episodes(
        self,
        records: Sequence[EpisodeRecord],
        *,
        captured: tuple[str, int] | None,
        contradicts: Callable[[dict[str, str], dict[str, str]], bool],
        window: int,
        conflicts: Sequence[Row] = (),
    ) -> list[EpisodeRecord]:
        """Write ``records`` in one transaction; see :meth:`.EpisodeRows.write_episodes`. The
        rows go in one statement on PostgreSQL (``insert_episodes``), one prepared statement
        run per row on SQLite (``insert_episode``, the index rows in one more), and
        the supersession check reads each scope and task type's live episodes once per batch
        (:meth:`_supersede_batch`)."""
        written: list[EpisodeRecord] = []
        with self.driver.transaction() as cur:
            if records:
                written = self._insert_batch(cur, records)
                self._supersede_batch(cur, written, contradicts, window)
            if conflicts:
                insert_conflicts(self.driver, cur, conflicts)
            if captured is not None:
                params = {"run_id": captured[0], "seq": captured[1]}
                self.driver.execute(cur, self._eq["mark_captured"], params)
            faults.point("episodes.written")
        return written

    def _insert_batch(self, cur: Any, records: Sequence[EpisodeRecord]) -> list[EpisodeRecord]:
        """Insert ``records`` (each once: ``ON CONFLICT DO NOTHING``); the ones newly written,
        in order, their index rows and artifact references with them."""
        q = self._eq
        rows = [
            {
                "episode_id": ep.episode_id,
                "run_id": ep.run_id,
                "boundary": ep.boundary,
                "scope": ep.scope,
                "agent": ep.agent,
                "task_type": ep.task_type,
                "kind": ep.kind,
                "outcome": ep.outcome,
                "summary": ep.summary,
                "lesson": ep.lesson,
                "conditions": _dumps(ep.conditions),
                "refs": _dumps(ep.refs),
                "claims": _dumps(ep.claims),
                "tags": ep.tags,
                "at_seq": ep.at_seq,
                "created_at_ms": ep.created_at_ms,
            }
            for ep in records
        ]
        if "insert_episodes" in q:  # PostgreSQL: the batch in one statement, one round trip
            got = self.driver.fetchall(cur, q["insert_episodes"], {"rows": json.dumps(rows)})
        else:  # SQLite: a prepared statement per row; the writer holds the file alone
            last = {"last": self.driver.fetchall(cur, q["last_episode_id"], {})[0][0]}
            self.driver.executemany(cur, q["insert_episode"], rows)
            got = self.driver.fetchall(cur, q["inserted_since"], last)
            if got:
                self.driver.execute(cur, q["index_since"], last)
        ids = {str(eid) for _i, eid in got}
        written: list[EpisodeRecord] = []
        for ep in records:
            if ep.episode_id in ids:
                ids.discard(ep.episode_id)  # (a second record of that id was not written)
                written.append(ep)
        for ep in written:
            owner = EPISODE_OWNER_PREFIX + ep.episode_id
            for sha in ep.refs.get("artifacts", []):
                params = {"hash": sha, "owner": owner, "run_id": ep.run_id}
                self.driver.execute(cur, q["insert_episode_ref"], params)
        return written

    def _supersede_batch(
        self,
        cur: Any,
        written: Sequence[EpisodeRecord],
        contradicts: Callable[[dict[str, str], dict[str, str]], bool],
        window: int,
    ) -> None:
        """Supersede what each of ``written`` contradicts, in order, as if each had been
        written alone: episode ``i`` is checked against the latest ``window`` live episodes of
        its scope and task type written before it (the batch's earlier ones included, those
        superseded meanwhile left out). They are read once per scope and task type (``window``
        plus the batch's own rows); when what was read runs short of the window, that
        episode's check reads the table again (:meth:`_supersede_contradicted`)."""
        groups: dict[tuple[str, Any], list[int]] = {}
        for i, ep in enumerate(written):
            groups.setdefault((ep.scope, ep.task_type), []).append(i)
        position = {ep.episode_id: i for i, ep in enumerate(written)}
        todo = [(k, m) for k, m in groups.items() if any(written[i].claims for i in m)]
        live_of = self._live_claims(cur, [(k, window + len(m)) for k, m in todo])
        for key, members in todo:
            limit = window + len(members)
            live = live_of.get(key, [])
            gone: set[str] = set()
            for i in members:
                ep = written[i]
                if not ep.claims:
                    continue
                seen = [
                    (str(eid), claims)
                    for eid, claims in live
                    if eid not in gone and position.get(eid, -1) < i
                ][:window]
                if len(seen) < window and len(live) == limit:
                    later = {e.episode_id for e in written[i:]}
                    self._supersede_contradicted(cur, ep, contradicts, window, later)
                    continue
                for old_id, old_claims in seen:
                    if contradicts(ep.claims, old_claims):
                        by = {"episode_id": old_id, "by": ep.episode_id}
                        if self.driver.execute(cur, self._eq["supersede"], by):
                            gone.add(old_id)

    def _live_claims(
        self, cur: Any, wanted: Sequence[tuple[tuple[str, Any], int]]
    ) -> dict[tuple[str, Any], list[tuple[str, dict[str, str]]]]:
        """``{(scope, task type): [(episode_id, claims)]}``: the latest ``limit`` live
        episodes of each, newest first, their claims parsed once. SQLite runs the
        ``live_claims_batch`` query once per group (one prepared statement, no round trips);
        PostgreSQL one statement per 50 groups (a ``UNION ALL`` of it, each part along the
        scope's b-tree)."""
        out: dict[tuple[str, Any], list[tuple[str, dict[str, str]]]] = {}
        one = self._eq["live_claims_batch"].strip().rstrip(";")
        if self.driver.dialect == "sqlite":
            for (scope, task_type), limit in wanted:
                params = {"scope": scope, "task_type": task_type, "limit": limit}
                rows = self.driver.fetchall(cur, one, params)
                out[(scope, task_type)] = [(str(e), json.loads(c)) for e, c, _at in rows]
            return out
        for lo in range(0, len(wanted), 50):
            parts, params = [], {}
            for n, ((scope, task_type), limit) in enumerate(wanted[lo : lo + 50]):
                part = one.replace(":scope", f":s{n}").replace(":task_type", f":t{n}")
                parts.append(f"SELECT {n} AS g, * FROM ({part.replace(':limit', f':l{n}')}) p{n}")
                params.update({f"s{n}": scope, f"t{n}": task_type, f"l{n}": limit})
                out[(scope, task_type)] = []
            keys = [k for k, _ in wanted[lo : lo + 50]]
            for g, eid, claims, _at in self.driver.fetchall(cur, " UNION ALL ".join(parts), params):
                out[keys[int(g)]].append((str(eid), json.loads(claims)))
        return out

    def _supersede_contradicted(
        self,
        cur: Any,
        ep: EpisodeRecord,
        contradicts: Callable[[dict[str, str], dict[str, str]], bool],
        window: int,
        later: Collection[str] = (),
    ) -> None:
        """Supersede the live episodes ``ep`` contradicts among the latest ``window`` of its
        scope and task type, read from the table (``later``: ids written after it in its batch,
        left out as if not yet written)."""
        if not ep.claims:
            return
        params = {
            "scope": ep.scope,
            "task_type": ep.task_type,
            "episode_id": ep.episode_id,
            "limit": window + len(later),
        }
        rows = self.driver.fetchall(cur, self._eq["live_claims"], params)
        for old_id, old_claims in [r for r in rows if r[0] not in later][:window]:
            if contradicts(ep.claims, json.loads(old_claims)):
                by = {"episode_id": old_id, "by": ep.episode_id}
                self.driver.execute(cur, self._eq["supersede"], by)

    def supersede_episode(self, old_id: str, new_id: str) -> bool:
        """Mark ``old_id`` superseded by ``new_id``; False when it already was."""
        with self.driver.transaction() as cur:
            params = {"episode_id": old_id, "by": new_id}
            return self.driver.execute(cur, self._eq["supersede"], params) == 1

    def episode_runs_behind(self, limit: int) -> list[str]:
        """Runs with boundaries not yet captured, oldest first (at most ``limit``)."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self._eq["runs_behind"], {"limit": limit})
        return [str(r[0]) for r in rows]

    def episode_row(self, episode_id: str) -> Row | None:
        """The episode's row (score 0.0), or None."""
        with self.driver.read() as cur:
            params = {"episode_id": episode_id}
            return self.driver.fetchone(cur, self._eq["get_episode"], params)

    @contextmanager
    def episode_index(self) -> Iterator[EpisodeIndex]:
        """The full-text index within one read snapshot (:class:`.SQLEpisodeIndex`)."""
        with self.driver.read() as cur:
            yield SQLEpisodeIndex(self.driver, cur, self._eq)

    def count_episodes(self) -> int:
        """How many episodes the store holds (all scopes)."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self._eq["count_episodes"], {})
        return int(row[0]) if row else 0

    def prune_episodes(self, *, before_ms: int, superseded_only: bool, batch: int) -> int:
        """Delete episodes created before ``before_ms``, ``batch`` per transaction, with their
        index rows and artifact references; returns how many."""
        q, total = self._eq, 0
        while True:
            with self.driver.transaction() as cur:
                params = {"before_ms": before_ms, "superseded_only": superseded_only}
                rows = self.driver.fetchall(cur, q["prunable"], {**params, "limit": batch})
                for id_, eid, summary, lesson, tags in rows:
                    if "unindex_episode" in q:
                        entry = {"id": id_, "summary": summary, "lesson": lesson, "tags": tags}
                        self.driver.execute(cur, q["unindex_episode"], entry)
                    self.driver.execute(cur, q["delete_episode"], {"id": id_})
                    owner = {"owner": EPISODE_OWNER_PREFIX + eid}
                    self.driver.execute(cur, q["delete_episode_refs"], owner)
            total += len(rows)
            if len(rows) < batch:
                return total

    def collect_episode_refs(self, *, dry_run: bool) -> tuple[int, int, int]:
        """``(references of deleted episodes dropped — or to drop, episodes keeping
        artifacts, artifacts they keep)``."""
        q = self._eq
        if dry_run:
            with self.driver.read() as cur:
                row = self.driver.fetchone(cur, q["orphan_episode_refs"], {})
            dropped = int(row[0]) if row else 0
        else:
            with self.driver.transaction() as cur:
                dropped = int(self.driver.execute(cur, q["drop_orphan_episode_refs"], {}) or 0)
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, q["episode_refs"], {})
        episodes, artifacts = (int(row[0]), int(row[1])) if row else (0, 0)
        return dropped, episodes, artifacts


__all__ = ["EpisodeTables", "load_episode_queries"]
