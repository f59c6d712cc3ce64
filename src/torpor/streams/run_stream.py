"""A run's streams as its workflow sees them: ``run.stream("progress")`` (:class:`RunStream`),
and :func:`open_part` for a step that streams (a model call). One :class:`~.writer.StreamWriter`
per stream per execution (per journal: one lease)."""

from __future__ import annotations

import weakref

from ..engine.journal import Journal, in_step_work
from ..errors import StreamError
from ..scrub import Scrubber
from .writer import PartWriter, StreamWriter

__all__ = ["RunStream", "open_part", "writer_for"]

_WRITERS: weakref.WeakKeyDictionary[Journal, dict[str, StreamWriter]] = weakref.WeakKeyDictionary()


def writer_for(journal: Journal, name: str) -> StreamWriter:
    """The writer of stream ``name`` for this execution (made at first use)."""
    mine = _WRITERS.setdefault(journal, {})
    w = mine.get(name)
    if w is None:
        lease = journal.lease
        w = mine[name] = StreamWriter(
            journal.store, journal.run_id, name, owner=lease.owner, epoch=lease.epoch
        )
    return w


def open_part(
    journal: Journal, name: str, step_id: str, scrubber: Scrubber | None = None
) -> PartWriter:
    """A part of stream ``name`` for the attempt of ``step_id`` under this execution's lease
    (``<step_id>@<epoch>``): a context manager, ended on a normal exit, retracted when an
    exception leaves it; a process that dies in it leaves it open, and the next writer of the
    stream retracts it."""
    return writer_for(journal, name).part(f"{step_id}@{journal.lease.epoch}", scrubber)


class RunStream:
    """``run.stream(name)``: :meth:`write` an item from the workflow; :meth:`part` for deltas
    from inside a step."""

    def __init__(self, journal: Journal, name: str):
        self.journal = journal
        self.name = name

    def write(self, data: object) -> int | None:
        """Write ``data`` (JSON data, or anything :mod:`torpor.serde` records) as the stream's
        next item, stored before this returns; its offset, or None on a replay (the item was
        stored by an earlier execution: it is not written twice). Writes are numbered like
        step ids, so a replay must write the same items in the same order. Inside a step's
        own work (where a replay would not run it) use :meth:`part`: StreamError."""
        if in_step_work():
            raise StreamError(
                f"run {self.journal.run_id!r} stream {self.name!r}: write() inside a step's "
                "work; a step streams through `with run.stream(name).part(step_id) as p:`"
            )
        base = f"stream:{self.name}"
        self.journal.next_id(base)
        n = self.journal.counters[base]
        return writer_for(self.journal, self.name).item(data, n)

    def part(self, label: str) -> PartWriter:
        """A part of the stream (a context manager: ended on a normal exit, retracted when an
        exception leaves it), named ``<label>@<lease epoch>``. Inside a step's own work it is
        that attempt's (see :func:`open_part`); in the workflow itself it is numbered like
        :meth:`write`, so a replay of a part that ended writes nothing again, and one left
        open by a dead process is retracted and written anew."""
        if in_step_work():
            return open_part(self.journal, self.name, label)
        base = f"stream:{self.name}"
        self.journal.next_id(base)
        w = writer_for(self.journal, self.name)
        return w.part(f"{label}@{self.journal.lease.epoch}", wseq=self.journal.counters[base])
