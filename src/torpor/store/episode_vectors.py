"""Episode vectors: an episode's text embedded by a model, one row per ``(episode id, model)``
in their own table (``episode_vectors``, migration 0013), so the episodes tables and their
full-text search stay as they are. A mixin of :class:`~torpor.store.sqlstore.SQLStore` (the
:class:`~torpor.store.domain.EpisodeVectorRows` part of its protocol); what is embedded and how
it ranks is :mod:`torpor.episodes.hybrid`.

A vector crosses this boundary as ``bytes``: little-endian float32, ``dim`` values. SQLite keeps
those bytes in a blob; PostgreSQL a ``real[]`` (which pgvector's ``vector`` casts from where
that extension is installed; nothing here needs it). Vectors are only ever read *by id*, for
a bounded candidate set a search already chose, never scanned for a whole filter.

Writes are ``INSERT … ON CONFLICT DO NOTHING``: the same episode embedded by the same model
twice (a capture repeated after a crash) changes nothing. The queries are whole in
``sql/episode_vectors/<dialect>.sql`` by name.
"""

from __future__ import annotations

import functools
import json
import sys
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path

from .base import Driver, load_queries


@functools.cache
def load_vector_queries(dialect: str) -> dict[str, str]:
    """``{name: sql}`` from ``sql/episode_vectors/<dialect>.sql``."""
    return load_queries(dialect, Path(__file__).parent / "sql" / "episode_vectors")


def pack(values: Iterable[float]) -> bytes:
    """``values`` as little-endian float32 bytes (the store's form of a vector)."""
    a = array("f", values)
    if sys.byteorder != "little":  # pragma: no cover - no big-endian machine here
        a.byteswap()
    return a.tobytes()


def unpack(data: bytes) -> array[float]:
    """The float32 values of ``data`` (see :func:`pack`)."""
    a = array("f")
    a.frombytes(data)
    if sys.byteorder != "little":  # pragma: no cover
        a.byteswap()
    return a


class EpisodeVectorTables:
    """See :class:`~torpor.store.domain.EpisodeVectorRows` for each method's rows."""

    driver: Driver

    @property
    def _vq(self) -> dict[str, str]:
        return load_vector_queries(self.driver.dialect)

    def write_episode_vectors(
        self, model: str, vectors: Sequence[tuple[str, bytes]], *, now_ms: int
    ) -> int:
        """Store ``(episode_id, float32 bytes)`` pairs of ``model`` in one transaction; a pair
        already stored is left as it is. Returns how many were given."""
        q = self._vq
        with self.driver.transaction() as cur:
            if "put_vectors" in q:  # PostgreSQL: one statement, one round trip
                rows = [{"id": e, "v": unpack(v).tolist()} for e, v in vectors]
                params = {"rows": json.dumps(rows), "model": model, "created_at_ms": now_ms}
                self.driver.execute(cur, q["put_vectors"], params)
            else:
                for episode_id, vec in vectors:
                    params = {
                        "episode_id": episode_id,
                        "model": model,
                        "dim": len(vec) // 4,
                        "vec": vec,
                        "created_at_ms": now_ms,
                    }
                    self.driver.execute(cur, q["put_vector"], params)
        return len(vectors)

    def episode_vectors(self, model: str, episode_ids: Sequence[str]) -> dict[str, bytes]:
        """``{episode_id: float32 bytes}`` of those of ``episode_ids`` with a vector of
        ``model`` (read by id: as many rows as ids at most)."""
        if not episode_ids:
            return {}
        pg = self.driver.dialect != "sqlite"
        ids: object = list(episode_ids) if pg else json.dumps(list(episode_ids))
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self._vq["get_vectors"], {"ids": ids, "model": model})
        return {str(e): (pack(v) if pg else bytes(v)) for e, v in rows}

    def episodes_without_vectors(self, model: str, limit: int) -> list[tuple[str, str, str]]:
        """``(episode_id, summary, lesson)`` of up to ``limit`` episodes (newest first) with no
        vector of ``model``."""
        with self.driver.read() as cur:
            params = {"model": model, "limit": limit}
            rows = self.driver.fetchall(cur, self._vq["missing_vectors"], params)
        return [(str(e), str(s), str(le)) for e, s, le in rows]

    def count_episode_vectors(self, model: str) -> int:
        """How many vectors of ``model`` the store holds."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self._vq["count_vectors"], {"model": model})
        return int(row[0]) if row else 0

    def drop_orphan_episode_vectors(self) -> int:
        """Delete the vectors whose episode is gone (pruned or forgotten); returns how many."""
        with self.driver.transaction() as cur:
            return int(self.driver.execute(cur, self._vq["drop_orphan_vectors"], {}) or 0)


__all__ = ["EpisodeVectorTables", "load_vector_queries", "pack", "unpack"]
