"""Writing and reading chunks (:mod:`.chunks`) and the run -> blob references that garbage
collection keeps.

A writer inserts the chunks of a split text, and the references of its run to them and to the
artifacts it records, *before* the history that refers to them (in a transaction of their own,
or the append's): a chunk with no history yet is an orphan that collection removes only once it
is older than the grace period. Each process remembers which chunks it wrote or confirmed (the
insert refreshes ``used_at_ms``) and which its runs refer to: a chunk is not sent again only for
a run that refers to it already (written within half the grace period), so every new reference
is written in the same transaction as its chunk and no collection pass, whatever its grace, can
leave a reference to a deleted chunk. Chunks are stored
zlib-compressed when that saves space (:func:`pack`); their hash is that of their text.
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from .. import serde
from ..errors import CorruptRecordError
from .base import Driver
from .chunks import Fetch

#: Default grace period of garbage collection (ms): a chunk or artifact younger than this is
#: never collected, referenced or not.
GRACE_MS = 3_600_000
#: Bytes of chunk texts a store keeps in memory (they never change: named by their hash).
CACHE_BYTES = 32 << 20
#: Hashes remembered as written (beyond it the memory is cleared and rebuilt).
KNOWN_MAX = 200_000


def pack(text: str) -> bytes:
    """A chunk's text as stored: its UTF-8 bytes, zlib-compressed when that saves at least an
    eighth (a zlib stream starts with ``x``, which no JSON text does)."""
    raw = text.encode()
    packed = zlib.compress(raw, 6)
    return packed if len(packed) * 8 < len(raw) * 7 else raw


def unpack(data: bytes | memoryview | str) -> str:
    """The text of a stored chunk (:func:`pack`)."""
    if isinstance(data, str):
        return data
    raw = bytes(data)
    return (zlib.decompress(raw) if raw[:1] == b"x" else raw).decode()


class ChunkIO:
    """Chunks and blob references through ``driver`` (queries ``q``); ``now_ms`` is the store's
    clock, ``grace_ms`` the collection grace period (see the module docstring)."""

    def __init__(
        self,
        driver: Driver,
        q: dict[str, str],
        now_ms: Callable[[], int],
        grace_ms: int = GRACE_MS,
        relaxed: Callable[[], AbstractContextManager[Any]] | None = None,
    ):
        #: The transaction :meth:`put` writes in: one that commits without its own flush when
        #: the store offers it (see :meth:`put`).
        self.relaxed = relaxed or driver.transaction
        self.driver = driver
        self.q = q
        self.now_ms = now_ms
        self.grace_ms = grace_ms
        self._known: dict[str, int] = {}
        self._refs: dict[str, set[tuple[str, str]]] = {}
        self._texts: OrderedDict[str, str] = OrderedDict()
        self._cached_bytes = 0

    def forget(self, run_id: str) -> None:
        """Drop what this process remembers of ``run_id``'s references (its lease moved)."""
        self._refs.pop(run_id, None)

    def write(
        self, cur: Any, run_id: str, sink: dict[str, str], artifacts: Mapping[str, int] = {}
    ) -> None:
        """Inside a transaction: insert the chunks in ``sink`` not known to be present, and the
        references of ``run_id`` to them and to ``artifacts`` (``{sha256: size}``) not yet
        recorded."""
        now = self.now_ms()
        fresh = now - self.grace_ms // 2
        if len(self._known) > KNOWN_MAX:
            self._known.clear()
        known = self._known
        refs = self._refs.setdefault(run_id, set())
        for h, text in sink.items():
            size = len(text) if text.isascii() else len(text.encode())
            mine = (h, "chunk") in refs
            # Sent again unless this run refers to it already (then nothing can collect it) and
            # this process wrote it lately: a chunk another run's reference kept may have been
            # collected since that run went, so a new reference always comes with the chunk.
            if not mine or known.get(h, -1) < fresh:
                row = {"hash": h, "data": pack(text), "size": size, "now_ms": now}
                self.driver.execute(cur, self.q["insert_chunk"], row)
            if not mine:
                ref = {"hash": h, "run_id": run_id, "kind": "chunk", "size": size}
                self.driver.execute(cur, self.q["insert_ref"], ref)
        for h, size in artifacts.items():
            if (h, "artifact") not in refs:
                ref = {"hash": h, "run_id": run_id, "kind": "artifact", "size": size}
                self.driver.execute(cur, self.q["insert_ref"], ref)

    def wrote(self, run_id: str, sink: dict[str, str], artifacts: Iterable[str] = ()) -> None:
        """After the transaction of :meth:`write` committed: remember what it wrote."""
        now = self.now_ms()
        refs = self._refs.setdefault(run_id, set())
        for h in sink:
            self._known[h] = max(self._known.get(h, -1), now)
            refs.add((h, "chunk"))
        refs.update((h, "artifact") for h in artifacts)

    def put(self, run_id: str, sink: dict[str, str], artifacts: Mapping[str, int] = {}) -> None:
        """:meth:`write` in a transaction of its own, before the append that refers to them.

        It commits without its own flush (PostgreSQL ``synchronous_commit`` off, SQLite
        ``synchronous=NORMAL``): the append that follows is a durable commit, and its flush
        covers this one (the log is sequential). Lost with a power cut before that append, the
        chunks are lost with it; nothing ever refers to them."""
        if not sink and not artifacts:
            return
        with self.relaxed() as cur:
            self.write(cur, run_id, sink, artifacts)
        self.wrote(run_id, sink, artifacts)

    def fetcher(self, cur: Any, run_id: str, seq: Any = None) -> Fetch:
        """A ``fetch(hash) -> text`` reading chunks through ``cur`` (hash-checked, cached),
        with a ``prefetch(hashes)`` that reads several in one query; CorruptRecordError naming
        the run (and seq) for a chunk missing or altered."""
        return _Fetcher(self, cur, run_id, seq)

    def _checked(self, h: str, data: Any, where: str, run_id: str, seq: Any) -> str:
        try:
            text = unpack(data)
        except (zlib.error, UnicodeDecodeError, TypeError):
            text = ""
        if serde.sha256_hex(text) != h:
            raise CorruptRecordError(
                f"{where}: chunk sha256:{h} does not match its hash", run_id=run_id, seq=seq
            )
        self._remember(h, text)
        return text

    def _remember(self, h: str, text: str) -> None:
        self._texts[h] = text
        self._cached_bytes += len(text)
        while self._cached_bytes > CACHE_BYTES and self._texts:
            _, old = self._texts.popitem(last=False)
            self._cached_bytes -= len(old)


class _Fetcher:
    """:meth:`ChunkIO.fetcher`: chunks through one cursor."""

    def __init__(self, io: ChunkIO, cur: Any, run_id: str, seq: Any):
        self.io, self.cur, self.run_id, self.seq = io, cur, run_id, seq
        self.where = f"run {run_id!r}" + (f" seq {seq}" if seq is not None else "")

    def __call__(self, h: str) -> str:
        io = self.io
        text = io._texts.get(h)
        if text is not None:
            io._texts.move_to_end(h)
            return text
        row = io.driver.fetchone(self.cur, io.q["get_chunk"], {"hash": h})
        if row is None:
            raise CorruptRecordError(
                f"{self.where}: chunk sha256:{h} is missing", run_id=self.run_id, seq=self.seq
            )
        return io._checked(h, row[0], self.where, self.run_id, self.seq)

    def prefetch(self, hashes: set[str]) -> dict[str, str]:
        """Read the chunks of ``hashes`` not in memory, in one query; the texts of those
        found (a missing one is reported when it is asked for)."""
        io = self.io
        out = {h: io._texts[h] for h in hashes if h in io._texts}
        want = sorted(hashes - out.keys())
        if want:
            rows = io.driver.fetchall(self.cur, io.q["get_chunks"], {"hashes": serde.dumps(want)})
            for h, data in rows:
                h = h.hex() if isinstance(h, bytes | memoryview) else str(h)
                out[h] = io._checked(h, data, self.where, self.run_id, self.seq)
        return out


__all__ = ["GRACE_MS", "ChunkIO"]
