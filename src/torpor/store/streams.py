"""Stream rows (issue 40): the items of a run's named streams (:mod:`torpor.streams` says what
a stream is), in their own table — never read by loading or resuming a run (G8) — and deleted
with the run (:func:`delete_streams`). A mixin of :class:`~torpor.store.sqlstore.SQLStore`
(the :class:`StreamRows` part of its protocol).

Writing (:meth:`StreamTables.append_stream_items`): one transaction per batch, fenced by the
writer's lease (the run row must still name its owner and epoch, else LeaseLostError and
nothing is written); on PostgreSQL the same statement sends ``NOTIFY torpor_stream`` with
``run_id``, the stream and the batch's last offset, so a reader on another machine wakes when
the batch commits. A batch commits without waiting for its own disk flush (as a lease
change does: ``SQLStore._lease_transaction``): the stream is not the record — a finished
call's text is in its recorded result, whose durable commit flushes every batch before it —
so a database server or machine that crashes mid-reply can lose at most the last batches
of a call that is retried anyway (the next writer retracts what remains of it).

Waiting (:meth:`StreamTables.stream_token` then :meth:`StreamTables.wait_stream`): take a token
*before* reading, read, and wait only if nothing new was there: a batch committed in between
changes the token, so the wait returns at once and nothing is missed. SQLite's token is
``PRAGMA data_version`` (it changes when another connection commits); PostgreSQL's is a
counter a ``LISTEN torpor_stream`` connection (one per store, started by the first wait)
advances for each notification of that stream, and for every stream when it reconnects.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ..errors import LeaseLostError
from .base import Driver, load_queries
from .stream_rows import StreamRow, StreamRows, StreamTail

__all__ = ["StreamRow", "StreamRows", "StreamTables", "StreamTail", "delete_streams"]

#: The NOTIFY channel of stream batches (PostgreSQL).
CHANNEL = "torpor_stream"
_SEP = "\x1f"
#: A notification carries its batch's rows when they fit (PostgreSQL's limit is 8000 bytes).
_PAYLOAD_MAX = 7000
#: How a row is packed into a batch's JSON: ``(key, column)``.
_PACKED = (
    ("o", "stream_offset"),
    ("p", "part"),
    ("k", "kind"),
    ("w", "wseq"),
    ("d", "data"),
    ("a", "at_ms"),
)
#: Rows of each stream a listener keeps from the notifications (the newest).
_CACHED = 512


@functools.cache
def load_stream_queries(dialect: str) -> dict[str, str]:
    """``{name: sql}`` from ``sql/streams/<dialect>.sql``."""
    return load_queries(dialect, Path(__file__).parent / "sql" / "streams")


def delete_streams(driver: Driver, cur: Any, run_id: str) -> None:
    """Inside a transaction deleting a run: its stream items."""
    driver.execute(cur, load_stream_queries(driver.dialect)["delete_run"], {"run_id": run_id})


class _Listener:
    """One ``LISTEN torpor_stream`` connection of a PostgreSQL store: a counter per stream,
    advanced for each notification (all of them after a reconnect), and a condition readers
    wait on."""

    def __init__(self, driver: Any):
        self.cond = threading.Condition()
        self.counts: dict[tuple[str, str], int] = {}
        self.cache: dict[tuple[str, str], list[StreamRow]] = {}
        self.generation = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=driver.listen_forever,
            args=(CHANNEL, self._notified, self.stop),
            daemon=True,
            name="torpor-listen-streams",
        )
        self.ready = threading.Event()
        self.thread.start()

    def _notified(self, payload: str) -> None:
        with self.cond:
            if payload:
                fields = payload.split(_SEP, 3)
                key = (fields[0], fields[1])
                self.counts[key] = self.counts.get(key, 0) + 1
                self._keep(key, fields[3] if len(fields) == 4 else None)
            else:  # (re)connected: anything may have been missed
                self.generation += 1
                self.cache.clear()
                self.ready.set()
            self.cond.notify_all()

    def _keep(self, key: tuple[str, str], packed: str | None) -> None:
        """Keep the batch's rows when they continue the ones kept (else start afresh)."""
        rows = (
            []
            if packed is None
            else [
                StreamRow(int(r["o"]), r["k"], r["p"], r["d"], int(r["a"]))
                for r in json.loads(packed)
            ]
        )
        kept = self.cache.get(key)
        if not rows:
            self.cache.pop(key, None)
        elif kept and kept[-1].offset + 1 == rows[0].offset:
            kept.extend(rows)
            del kept[:-_CACHED]
        else:
            self.cache[key] = rows[-_CACHED:]

    def cached(self, key: tuple[str, str], after: int, limit: int) -> list[StreamRow] | None:
        """The rows after ``after`` when the notifications kept every one of them since, else
        None (read the table)."""
        with self.cond:
            kept = self.cache.get(key)
            if not kept or not kept[0].offset <= after + 1 <= kept[-1].offset + 1:
                return None
            return kept[after + 1 - kept[0].offset :][:limit]

    def token(self, key: tuple[str, str]) -> tuple[int, int]:
        with self.cond:
            return (self.generation, self.counts.get(key, 0))

    def wait(self, key: tuple[str, str], token: Any, timeout_s: float) -> bool:
        end = time.monotonic() + timeout_s
        with self.cond:
            while (self.generation, self.counts.get(key, 0)) == token:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
        return True


class StreamTables:
    """See :class:`StreamRows` for each method."""

    driver: Driver
    now_ms: Any
    _lease_transaction: Callable[[], AbstractContextManager[Any]]

    @property
    def _sq(self) -> dict[str, str]:
        return load_stream_queries(self.driver.dialect)

    def append_stream_items(
        self,
        run_id: str,
        stream: str,
        rows: Sequence[dict[str, Any]],
        *,
        owner: str,
        epoch: int,
    ) -> None:
        if not rows:
            return
        q = self._sq
        if "append_batch" in q:  # PostgreSQL: one statement, the rows in the notification
            packed = json.dumps(
                [{k: r[c] for k, c in _PACKED} for r in rows],
                separators=(",", ":"),
            )
            head = _SEP.join((run_id, stream, str(rows[-1]["stream_offset"])))
            payload = head + _SEP + packed if len(packed) + len(head) < _PAYLOAD_MAX else head
            params = {
                "run_id": run_id,
                "stream": stream,
                "owner": owner,
                "epoch": epoch,
                "payload": payload,
                "rows": packed,
            }
            row = self.driver.fetch_one(q["append_batch"], params)
            if not row or not row[0]:
                raise LeaseLostError(run_id, epoch, f"stream {stream!r}: nothing written")
            return
        fence = {"run_id": run_id, "owner": owner, "epoch": epoch}
        full = [{"run_id": run_id, "stream": stream, "epoch": epoch, **r} for r in rows]
        with self._lease_transaction() as cur:
            if self.driver.fetchone(cur, q["fence"], fence) is None:
                raise LeaseLostError(run_id, epoch, f"stream {stream!r}: nothing written")
            self.driver.executemany(cur, q["insert_item"], full)

    def stream_tail(self, run_id: str, stream: str) -> StreamTail:
        params = {"run_id": run_id, "stream": stream}
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self._sq["tail"], params)
            parts = self.driver.fetchall(cur, self._sq["open_parts"], params)
        assert row is not None
        return StreamTail(int(row[0]), int(row[1]), [str(p[0]) for p in parts])

    def stream_items(
        self, run_id: str, stream: str, *, after: int = 0, limit: int = 1000
    ) -> list[StreamRow]:
        listener = self.__dict__.get("_stream_listen")
        if listener is not None:  # (PostgreSQL, once waited on: the notified rows)
            found = listener.cached((run_id, stream), after, limit)
            if found:
                return found
        params = {"run_id": run_id, "stream": stream, "after": after, "limit": limit}
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self._sq["items"], params)
        return [StreamRow(int(o), str(k), str(p), str(d), int(a)) for o, k, p, d, a in rows]

    def stream_names(self, run_id: str) -> list[tuple[str, int]]:
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self._sq["names"], {"run_id": run_id})
        return [(str(n), int(o)) for n, o in rows]

    # ------------------------------------------------------------------ waiting

    def _stream_listener(self) -> _Listener:
        lock = self.__dict__.setdefault("_stream_lock", threading.Lock())
        with lock:
            found = self.__dict__.get("_stream_listen")
            if found is None:
                found = self.__dict__["_stream_listen"] = _Listener(self.driver)
        # The first token is only good once the LISTEN is in place.
        found.ready.wait(10.0)  # a hang guard: a server that does not answer in 10 s
        return found

    def stream_token(self, run_id: str, stream: str) -> Any:
        if self.driver.dialect == "sqlite":
            with self.driver.read() as cur:
                row = self.driver.fetchone(cur, self._sq["data_version"], {})
            return int(row[0]) if row else 0
        return self._stream_listener().token((run_id, stream))

    def wait_stream(self, run_id: str, stream: str, token: Any, timeout_s: float) -> bool:
        if self.driver.dialect != "sqlite":
            return self._stream_listener().wait((run_id, stream), token, timeout_s)
        # A cheap read, often at first (a writer mid-reply), less often as the wait grows
        # (a console page on a run that sleeps: 2 ms doubling to 25 ms between looks).
        end, pause = time.monotonic() + timeout_s, 0.002
        while True:
            if self.stream_token(run_id, stream) != token:
                return True
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, pause))
            pause = min(0.025, pause * 1.5)

    def stop_stream_listener(self) -> None:
        """Close the ``LISTEN`` connection, if one was started (the store is closing)."""
        found = self.__dict__.pop("_stream_listen", None)
        if found is not None:
            found.stop.set()
            found.thread.join(timeout=2)


def decode(data: str) -> Any:
    """An item's data as it was written (JSON)."""
    return json.loads(data)
