"""Episode vectors: an episode's text embedded by a model, one row per ``(episode id, model)``
in their own table (``episode_vectors``, migration 0013), so the episodes tables and their
full-text search stay as they are. A mixin of :class:`~torpor.store.sqlstore.SQLStore` (the
:class:`~torpor.store.domain.EpisodeVectorRows` part of its protocol); what is embedded and how
it ranks is :mod:`torpor.episodes.hybrid`.

A vector crosses this boundary as ``bytes``: little-endian float32, ``dim`` values. SQLite keeps
those bytes in a blob; PostgreSQL a ``real[]``. Vectors are read *by id*, for a bounded
candidate set a search already chose, never scanned for a whole filter — or, on a PostgreSQL
server with pgvector (migration 0024 creates the extension and an HNSW index over the
256-value vectors cast to ``vector(256)``), the filter's nearest ``limit`` by that index
(:meth:`EpisodeVectorTables.nearest_episodes`).

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
from .domain import EpisodeFilter

#: Vector lengths pgvector's index covers (migration 0024: the default wordllama model's).
INDEXED_DIMS = (256,)


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
    #: The pgvector extension's schema when the index of migration 0024 exists ("" when it
    #: does not; None until looked up).
    _pgvector: str | None = None

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

    def vector_index(self) -> str:
        """The schema of the pgvector extension when this store has the episode vectors'
        HNSW index (migration 0024), else ``""`` (SQLite; a server without pgvector). Looked
        up once per store object."""
        if self._pgvector is None:
            found = ""
            if self.driver.dialect == "postgres":
                with self.driver.read() as cur:
                    row = self.driver.fetchone(cur, self._vq["vector_index"], {})
                found = str(row[0]) if row else ""
            self._pgvector = found
        return self._pgvector

    def create_vector_index(self) -> bool:
        """Run migration 0024 again (a store made before pgvector was installed on its
        server): create the extension and the index where possible. Returns whether the index
        exists now. False on SQLite."""
        if self.driver.dialect != "postgres":
            return False
        sql = (Path(__file__).parent / "migrations" / "postgres").glob("0024_*.sql")
        with self.driver.transaction() as cur:
            for f in sql:
                self.driver.execute(cur, f.read_text(), {})
        self._pgvector = None
        return bool(self.vector_index())

    def nearest_episodes(
        self, model: str, f: EpisodeFilter, query: bytes, limit: int
    ) -> list[tuple[tuple[object, ...], bytes]] | None:
        """``[(episode row, vector)]``: the ``limit`` episodes of filter ``f`` whose vectors of
        ``model`` are nearest ``query`` (float32 bytes) by pgvector's index, nearest first
        (approximate: HNSW). None when the store has no such index for vectors of that length
        (SQLite; a server without pgvector): the caller picks its candidates otherwise."""
        if limit <= 0 or len(query) // 4 not in INDEXED_DIMS:
            return None
        schema = self.vector_index()
        if not schema:
            return None
        sql = self._vq["nearest_vectors"].replace("{vector}", f'"{schema}".vector')
        params = {**f.params(), "model": model, "q": unpack(query).tolist(), "limit": limit}
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, sql, params)
        return [(tuple(r[:-1]), pack(r[-1])) for r in rows]

    def count_episode_vectors(self, model: str) -> int:
        """How many vectors of ``model`` the store holds."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self._vq["count_vectors"], {"model": model})
        return int(row[0]) if row else 0

    def drop_orphan_episode_vectors(self) -> int:
        """Delete the vectors whose episode is gone (pruned or forgotten); returns how many."""
        with self.driver.transaction() as cur:
            return int(self.driver.execute(cur, self._vq["drop_orphan_vectors"], {}) or 0)


__all__ = ["INDEXED_DIMS", "EpisodeVectorTables", "load_vector_queries", "pack", "unpack"]
