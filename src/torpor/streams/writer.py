"""Writing a run's stream: items in batches, by time and by size, under the writer's lease.

A :class:`StreamWriter` belongs to one stream of one run under one lease. Opening it (at its
first write) reads the stream's tail: the next offset, the last workflow write's ordinal, and
the parts an earlier execution left open — each is *retracted* at once (its process died
mid-stream; the step is retried as a whole), before anything new is written.

Two ways to write:

- :meth:`StreamWriter.item` — the workflow's own write (``run.stream("progress").write(obj)``,
  outside any step). It carries its ordinal (``wseq``: the n-th write of this stream in the
  run, numbered like step ids, so a replay numbers it the same): one already stored is not
  written again, and a new one is written before :meth:`~StreamWriter.item` returns (one store
  write, like a step's).
- a :class:`PartWriter` (:meth:`StreamWriter.part`) — the deltas of one step attempt (a model
  call's reply): buffered, consecutive text deltas joined, and written by the process's
  flusher thread at most once per ``interval_s`` (default 50 ms) — the first delta after a
  quiet spell (two intervals without a write) at once, by the writing thread — or sooner when
  ``max_bytes`` are buffered; :meth:`PartWriter.end`
  writes the rest and the ``end`` item before it returns, :meth:`PartWriter.retract` the
  ``retract`` item. Text passes a :class:`~.holdback.HoldBack` first (G12: a secret split across
  two deltas is still found); other data passes the scrubber whole.

Every batch is one transaction fenced by the lease (:meth:`torpor.store.base.Store.
append_stream_items`): a writer whose lease was taken over writes nothing more, and the next
write raises the LeaseLostError.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any

from .. import scrub, serde
from ..errors import StreamError, TorporError
from ..scrub import Scrubber
from ..store.base import Store
from .holdback import HoldBack

__all__ = ["MAX_ITEM_BYTES", "PartWriter", "StreamWriter"]

#: The largest item accepted (its JSON text, bytes): a larger write is refused (StreamError).
MAX_ITEM_BYTES = 1 << 20
#: Consecutive text deltas are joined into one item up to this many characters.
JOIN_CHARS = 64 * 1024

#: Every stream item as stored and sent: no secret this process knows (G12).
STREAMS = scrub.sink("streams", "every item of a run's stream, before it is stored: torpor.streams")


class StreamWriter:
    """See the module docstring. ``clock``: monotonic seconds (the batching interval)."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        name: str,
        *,
        owner: str,
        epoch: int,
        interval_s: float = 0.05,
        max_bytes: int = 256 * 1024,
    ):
        if not name or len(name) > 200:
            raise StreamError(f"run {run_id!r}: a stream name must be 1-200 characters: {name!r}")
        self.store, self.run_id, self.name = store, run_id, name
        self.owner, self.epoch = owner, epoch
        self.interval_s, self.max_bytes = interval_s, max_bytes
        #: Store writes (batches) made so far.
        self.writes = 0
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._opened = False
        self._next = 1
        self._wseq = 0
        self._buf: list[dict[str, Any]] = []
        self._bytes = 0
        self._last = float("-inf")
        self._error: BaseException | None = None

    # ------------------------------------------------------------------ opening

    def _open(self) -> None:
        if self._opened:
            return
        tail = self.store.stream_tail(self.run_id, self.name)
        with self._lock:
            if self._opened:
                return
            self._next, self._wseq = tail.offset + 1, tail.wseq
            for part in tail.open_parts:
                self._put("retract", part, "the process writing it stopped; the step is retried")
            self._opened = True
        self.flush()

    # ------------------------------------------------------------------ writing

    def item(self, data: Any, wseq: int) -> int | None:
        """Write the workflow's ``wseq``-th item of this stream now; its offset, or None when
        it was stored before (a replay)."""
        self._open()
        self._raise()
        with self._lock:
            if wseq <= self._wseq:
                return None
            self._wseq = wseq
            offset = self._put("data", "", STREAMS(_jsonable(self.run_id, self.name, data)), wseq)
        self.flush()
        return offset

    def part(self, part: str, scrubber: Scrubber | None = None, wseq: int = 0) -> PartWriter:
        """A writer of the deltas of ``part`` (see :class:`PartWriter`); ``scrubber``: secrets
        to take out besides those the process knows (an agent's vault). ``wseq``: the
        workflow's ordinal for a part it writes outside any step (as :meth:`item`): one that
        ended before (a replay) gives a writer that writes nothing."""
        self._open()
        with self._lock:
            muted = 0 < wseq <= self._wseq
            if wseq and not muted:
                self._wseq = wseq
        scrub = STREAMS.scrubber() + (scrubber or Scrubber())
        return PartWriter(self, part, scrub, wseq=wseq, muted=muted)

    def _put(self, kind: str, part: str, data: Any, wseq: int = 0) -> int:
        """Buffer one item (under ``_lock``); a text delta right after one of the same part
        joins it. Returns the item's offset."""
        buf = self._buf
        if (
            kind == "data"
            and isinstance(data, str)
            and buf
            and buf[-1]["kind"] == "data"
            and buf[-1]["part"] == part
            and part
            and isinstance(buf[-1]["_text"], str)
            and len(buf[-1]["_text"]) + len(data) <= JOIN_CHARS
        ):
            last = buf[-1]
            last["_text"] += data
            self._bytes += len(data)
            return int(last["stream_offset"])
        offset = self._next
        self._next += 1
        buf.append(
            {
                "stream_offset": offset,
                "part": part,
                "kind": kind,
                "wseq": wseq,
                "_text": data,
                "at_ms": 0,
            }
        )
        self._bytes += 64 + (len(data) if isinstance(data, str) else 64)
        return offset

    def _delta(self, part: str, data: Any, wseq: int = 0) -> None:
        """Buffer a delta of ``part`` and have it written within ``interval_s``."""
        self._raise()
        with self._lock:
            self._put("data", part, data, wseq)
            first = len(self._buf) == 1
            full = self._bytes >= self.max_bytes
            due = self._last + self.interval_s
            quiet = time.monotonic() - self._last >= 2 * self.interval_s
        if full or (first and quiet):
            self.flush()  # (after a quiet spell: at once, in this thread — no hand-over)
        elif first:
            _FLUSHER.schedule(self, due)

    def flush(self) -> None:
        """Write what is buffered now, in one transaction (nothing to write: no store call)."""
        with self._flushing:
            with self._lock:
                batch, self._buf, self._bytes = self._buf, [], 0
                if batch:
                    self._last = time.monotonic()  # the next batch is due an interval on
                    now = self.store.now_ms()
            if not batch:
                return
            rows = []
            for r in batch:
                text = json.dumps(r.pop("_text"), ensure_ascii=False)
                rows.append({**r, "data": text, "at_ms": now})
            try:
                self.store.append_stream_items(
                    self.run_id, self.name, rows, owner=self.owner, epoch=self.epoch
                )
            except BaseException as exc:
                self._error = exc
                raise
            self.writes += 1

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def flush_quietly(self) -> None:
        """:meth:`flush` from the flusher thread, when due (else later: a batch written since it
        was scheduled moved its time); an error is kept for the writer's next call."""
        with self._lock:
            due = self._last + self.interval_s
        if time.monotonic() < due:
            _FLUSHER.schedule(self, due)
            return
        with contextlib.suppress(BaseException):  # kept in _error, raised by the next write
            self.flush()


class PartWriter:
    """The deltas of one step attempt (a context manager: :meth:`end` on a normal exit,
    :meth:`retract` when an exception leaves it)."""

    def __init__(
        self,
        writer: StreamWriter,
        part: str,
        scrubber: Scrubber,
        *,
        wseq: int = 0,
        muted: bool = False,
    ):
        self.writer, self.part = writer, part
        self.scrubber = scrubber
        self.hold = HoldBack(scrubber)
        self.wseq = wseq
        #: True for a part a replay writes again: it was stored whole before, nothing is written.
        self.muted = muted
        self.closed = muted

    def write(self, data: Any) -> None:
        """One delta: text (held back and scrubbed, see :class:`~.holdback.HoldBack`) or JSON
        data (scrubbed whole)."""
        if self.muted:
            return
        if self.closed:
            raise StreamError(f"stream {self.writer.name!r}: part {self.part!r} is closed")
        if isinstance(data, str):
            _check_size(self.writer.run_id, self.writer.name, data)
            text = self.hold.feed(data)
            if text:
                self.writer._delta(self.part, text, self.wseq)
            return
        w = self.writer
        w._delta(self.part, self.scrubber(_jsonable(w.run_id, w.name, data)), self.wseq)

    def end(self) -> None:
        """Write the held-back text, the ``end`` item and everything buffered, now."""
        if self.closed:
            return
        self.closed = True
        rest = self.hold.flush()
        w = self.writer
        w._raise()
        with w._lock:
            if rest:
                w._put("data", self.part, rest, self.wseq)
            w._put("end", self.part, None, self.wseq)
        w.flush()

    def retract(self, reason: str) -> None:
        """Mark the part abandoned (what was written of it stays stored, marked), now."""
        if self.closed:
            return
        self.closed = True
        self.hold.discard()
        w = self.writer
        with w._lock:
            w._put("retract", self.part, reason, self.wseq)
        w.flush()

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.end()
            return
        # (The lease gone or the store failing: the next owner retracts it.)
        with contextlib.suppress(TorporError):
            self.retract(f"{type(exc).__name__}: the call did not finish; it is retried")


def _jsonable(run_id: str, name: str, data: Any) -> Any:
    """``data`` as JSON data, StreamError (naming the run and the stream) when it is not
    recordable or over :data:`MAX_ITEM_BYTES`."""
    try:
        value = serde.to_jsonable(data)
    except TorporError as exc:
        raise StreamError(f"run {run_id!r} stream {name!r}: {exc}") from None
    _check_size(run_id, name, value)
    return value


def _check_size(run_id: str, name: str, value: Any) -> None:
    size = len(value.encode()) if isinstance(value, str) else len(json.dumps(value))
    if size > MAX_ITEM_BYTES:
        raise StreamError(
            f"run {run_id!r} stream {name!r}: an item of {size} bytes is over the limit of "
            f"{MAX_ITEM_BYTES}; nothing was written (write it as an artifact, or in pieces)"
        )


class _Flusher:
    """The process's one flusher thread: writes each writer's batch when it is due."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.due: dict[StreamWriter, float] = {}
        self.thread: threading.Thread | None = None

    def schedule(self, writer: StreamWriter, at: float) -> None:
        with self.cond:
            self.due[writer] = min(at, self.due.get(writer, at))
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._loop, daemon=True, name="torpor-stream-flush"
                )
                self.thread.start()
            self.cond.notify()

    def _loop(self) -> None:
        while True:
            with self.cond:
                while True:
                    now = time.monotonic()
                    ready = [w for w, at in self.due.items() if at <= now]
                    if ready:
                        for w in ready:
                            del self.due[w]
                        break
                    nearest = min(self.due.values(), default=now + 60.0)
                    self.cond.wait(max(0.0, nearest - now))
            for w in ready:
                w.flush_quietly()


_FLUSHER = _Flusher()
