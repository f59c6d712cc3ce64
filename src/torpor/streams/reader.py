"""Reading a run's stream from any offset, then live: :class:`StreamReader`
(``Client.stream(run_id, name, after=…)``), a sync and an async iterator of
:class:`~.items.StreamItem` s.

A reader keeps its place (:attr:`StreamReader.offset`, the last offset it gave out): a reader
made again with ``after=offset`` — after a dropped connection, a new process, a reloaded page
(the console's ``Last-Event-ID``) — gives every later item once, in order. It waits for new
items with the store's wake (:meth:`torpor.store.base.Store.wait_stream`: PostgreSQL's
``LISTEN torpor_stream``, SQLite's ``data_version``), taking its token *before* each read so a
batch committed in between is not missed; ``poll_s`` bounds each wait (a hang guard, and how
soon it sees that the run finished). Following ends when the run is finished and nothing is
left to read (or, with ``follow=False``, when what is stored now has been read).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

from ..history import RunStatus
from ..store.base import Store
from .items import StreamItem, item_of

__all__ = ["StreamReader"]


class StreamReader:
    """Items of stream ``name`` of run ``run_id`` after offset ``after`` (0: from the
    first). RunNotFoundError for an unknown run, at the first read."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        name: str = "reply",
        *,
        after: int = 0,
        follow: bool = True,
        poll_s: float = 1.0,
        batch: int = 500,
    ):
        self.store, self.run_id, self.name = store, run_id, name
        #: The offset of the last item given out (the ``after`` to resume from).
        self.offset = max(0, int(after))
        self.follow = follow
        self.poll_s = poll_s
        self.batch = batch
        #: True once following ended (the run finished and every item was read).
        self.done = False
        self._finished_seen = False

    def read(self, timeout_s: float | None = None) -> list[StreamItem]:
        """One round: the items after :attr:`offset` now, else (following) wait up to
        ``timeout_s`` (default ``poll_s``) for some; [] when none came (see :attr:`done`)."""
        if self.done:
            return []
        token = self.store.stream_token(self.run_id, self.name)
        rows = self.store.stream_items(self.run_id, self.name, after=self.offset, limit=self.batch)
        if rows:
            self.offset = rows[-1].offset
            return [item_of(r) for r in rows]
        if not self.follow or self._finished_seen:
            self.done = True
            return []
        if self.store.get_run(self.run_id).status == RunStatus.FINISHED.value:
            self._finished_seen = True  # one more read: what was committed before it finished
            return self.read(timeout_s)
        self.store.wait_stream(
            self.run_id, self.name, token, self.poll_s if timeout_s is None else timeout_s
        )
        return []

    def __iter__(self) -> Iterator[StreamItem]:
        while not self.done:
            yield from self.read()

    async def __aiter__(self) -> AsyncIterator[StreamItem]:
        while not self.done:
            for item in await asyncio.to_thread(self.read):
                yield item
