"""Episode rows: written idempotently at run boundaries, superseded, pruned, their artifact
references kept and collected; searching is :mod:`.episode_index`. A mixin of
:class:`~torpor.store.sqlstore.SQLStore` (the :class:`~torpor.store.domain.EpisodeRows` part
of its protocol). What an episode says, when one contradicts another, and how a search ranks is
:mod:`torpor.episodes`.

The queries are whole in ``sql/episodes/<dialect>.sql`` by name; a few exist in one dialect
only — the FTS5 index rows on SQLite (``index_episode``, ``unindex_episode``; PostgreSQL's
``tsvector`` is a column of the row) — and the store runs whichever its dialect has.

Writing is keyed by ``(run_id, boundary)`` (``INSERT … ON CONFLICT DO NOTHING``) in one
transaction with the run row's ``episodes_seq``: a process killed at any point leaves each
episode written once or not at all. The artifacts an episode names are recorded in
``blob_refs`` under the owner ``episode:<episode id>`` in that transaction, and deleted in the
one that prunes it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import faults
from .base import Driver, load_queries
from .domain import EPISODE_OWNER_PREFIX, EpisodeIndex, EpisodeRecord, Row
from .episode_index import SQLEpisodeIndex


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
    ) -> list[EpisodeRecord]:
        """Write ``records`` in one transaction; see :meth:`.EpisodeRows.write_episodes`."""
        written: list[EpisodeRecord] = []
        with self.driver.transaction() as cur:
            for ep in records:
                if self._insert(cur, ep):
                    written.append(ep)
                    self._supersede_contradicted(cur, ep, contradicts, window)
            if captured is not None:
                params = {"run_id": captured[0], "seq": captured[1]}
                self.driver.execute(cur, self._eq["mark_captured"], params)
            faults.point("episodes.written")
        return written

    def _insert(self, cur: Any, ep: EpisodeRecord) -> bool:
        q = self._eq
        params = {
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
            "conditions": json.dumps(ep.conditions, sort_keys=True),
            "refs": json.dumps(ep.refs, sort_keys=True),
            "claims": json.dumps(ep.claims, sort_keys=True),
            "tags": ep.tags,
            "at_seq": ep.at_seq,
            "created_at_ms": ep.created_at_ms,
        }
        row = self.driver.fetchone(cur, q["insert_episode"], params)
        if row is None:
            return False
        if "index_episode" in q:  # SQLite: the FTS5 index's own rows
            params = {"id": row[0], "summary": ep.summary, "lesson": ep.lesson, "tags": ep.tags}
            self.driver.execute(cur, q["index_episode"], params)
        owner = EPISODE_OWNER_PREFIX + ep.episode_id
        for sha in ep.refs.get("artifacts", []):
            params = {"hash": sha, "owner": owner, "run_id": ep.run_id}
            self.driver.execute(cur, q["insert_episode_ref"], params)
        return True

    def _supersede_contradicted(
        self,
        cur: Any,
        ep: EpisodeRecord,
        contradicts: Callable[[dict[str, str], dict[str, str]], bool],
        window: int,
    ) -> None:
        if not ep.claims:
            return
        params = {
            "scope": ep.scope,
            "task_type": ep.task_type,
            "episode_id": ep.episode_id,
            "limit": window,
        }
        for old_id, old_claims in self.driver.fetchall(cur, self._eq["live_claims"], params):
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
