"""Every domain operation of :class:`~torpor.store.base.Store`, written once over a
:class:`~torpor.store.base.Driver`: idempotent start, leases, fenced appends, checkpoints, and
the inbox; reading a history back (events, loading a state, completions) is :mod:`.reads`,
queue rows :mod:`.queues`, schedule rows :mod:`.schedules`, episode rows :mod:`.episodes`,
retention and storage figures :mod:`.maintenance` (mixins of :class:`SQLStore`). The SQL is
in ``sql/<dialect>.sql``; rows are made and read by :mod:`.codec`.

An append takes one of two paths (both fenced, see :mod:`.base`):

- **plain**: a step of a running run that changes nothing on the run row — the common case —
  is one statement in a transaction of its own (``append_event`` / ``append_events``): the
  events are inserted while the row names the writer's lease, and the row is not written;
- **fenced row**: anything else — a status change (a wait, the outcome), a checkpoint (a
  boundary event, or a tail grown to ``checkpoint_every``), inbox messages consumed, a step
  start or an effect intent the store must check against its indexes — is one transaction that
  opens with the fenced update of the run row (``fence_row``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from .. import faults, serde
from ..errors import (
    InboxError,
    LeaseHeldError,
    LeaseLostError,
    RunFinishedError,
    RunNotFoundError,
    StoreError,
)

if TYPE_CHECKING:
    from ..history import Event, RunStarted, RunState

from ..owners import owner_is_dead
from ..urls import display_url
from . import codec
from .appends import Appends
from .base import (
    REOPENING_KINDS,
    Dispatch,
    Driver,
    InboxMessage,
    Lease,
    RunCount,
    RunRecord,
    RunStorage,
    load_queries,
    read_retried,
    run_record,
)
from .children import ChildStore, set_parent
from .chunkio import ChunkIO
from .claims import claim
from .episode_scopes import EpisodeScopeTables
from .episode_vectors import EpisodeVectorTables
from .episodes import EpisodeTables
from .forks import ForkStore
from .ledger import LedgerTables
from .maintenance import MaintenanceStore
from .queues import QueueStore
from .reads import HistoryReads
from .schedules import ScheduleStore
from .streams import StreamTables

#: What a store remembers of its latest append to a run under a lease, so the next append can
#: take the plain path: (lease epoch, last seq, checkpoint seq, the row's status columns).
_Memo = tuple[int, int, int, tuple[Any, ...]]

log = logging.getLogger("torpor.store")


class SQLStore(
    HistoryReads,
    QueueStore,
    ScheduleStore,
    EpisodeTables,
    EpisodeScopeTables,
    EpisodeVectorTables,
    LedgerTables,
    MaintenanceStore,
    ChildStore,
    StreamTables,
    ForkStore,
):
    """Domain operations over a :class:`~torpor.store.base.Driver`. Thread-safe when the
    driver is.

    ``checkpoint_every`` bounds how many events may follow the latest engine checkpoint: besides
    the boundaries in :data:`~torpor.store.base.CHECKPOINT_EVENTS`, the checkpoint is rewritten
    whenever the tail would reach it, so loading a run never reads more than that many events
    (G8).
    """

    def __init__(
        self,
        driver: Driver,
        url: str,
        *,
        clock: Callable[[], float] = time.time,
        checkpoint_every: int = 64,
    ):
        self.driver = driver
        self.url = url
        self.q = load_queries(driver.dialect)
        self.clock = clock
        self.chunkio = ChunkIO(driver, self.q, self.now_ms, relaxed=self._lease_transaction)
        self.appends = Appends(
            driver, self.q, self.now_ms, self.read_events, checkpoint_every, self.chunkio
        )

    @property
    def note(self) -> str | None:
        """Something whoever opened the store should be told (the driver's note), or None."""
        return self.driver.note

    @property
    def checkpoint_every(self) -> int:
        """At most this many events follow the latest engine checkpoint (G8)."""
        return self.appends.checkpoint_every

    @checkpoint_every.setter
    def checkpoint_every(self, n: int) -> None:
        self.appends.checkpoint_every = n

    def now_ms(self) -> int:
        """The store's clock in epoch milliseconds."""
        return int(self.clock() * 1000)

    def _p(self, **params: Any) -> dict[str, Any]:
        params.setdefault("now_ms", self.now_ms())
        return params

    def close(self) -> None:
        """Release connections."""
        self.stop_stream_listener()
        self.driver.close()

    def check_database_file(self) -> None:
        """See :meth:`~torpor.store.base.Store.check_database_file`: nothing to check on a
        database server (SQLite overrides it)."""

    def check_sound(self) -> None:
        """See :meth:`~torpor.store.base.Store.check_sound`: nothing to check on a database
        server, which checks its own pages (SQLite overrides it)."""

    @contextmanager
    def _lease_transaction(self) -> Iterator[Any]:
        """A transaction that only moves a lease (acquire, renew, release; a claim is one
        statement committed on its own, with the same relaxed commit: see :mod:`.claims`).

        On PostgreSQL it commits without waiting for its WAL flush (``synchronous_commit``
        off for this transaction alone), saving an fsync per claim and per release. That is
        safe: if the server crashes before the flush, the lease change is lost, and a lost
        claim or renewal only makes the holder's next fenced append fail (LeaseLostError); a
        lost release only delays a takeover to the lease's expiry. The holder's first append
        is an ordinary durable commit, and its flush covers the earlier claim (WAL is
        sequential), so nothing is ever done on the strength of a claim that could vanish.
        The chunks written before an append use it too, on the same reasoning
        (:meth:`.ChunkIO.put`).
        """
        with self.driver.transaction() as cur:
            self.driver.execute(cur, self.q["lease_commit_mode"], {})
            yield cur

    # ----------------------------------------------------------------- runs

    def create_run(
        self,
        run_id: str,
        started: RunStarted,
        dispatch: Dispatch | None = None,
        *,
        scope: str | None = None,
        task_type: str | None = None,
    ) -> bool:
        """Create a run with its ``run_started`` event. Idempotent: False if it existed (its
        row, queue included, is left as it was). ``dispatch``: its queue, concurrency key,
        priority and delayed start (:class:`~torpor.store.base.Dispatch`; None: no queue).
        ``scope`` and ``task_type`` go on the run row (what its episodes are filed under,
        :mod:`torpor.episodes`); ``started.parent`` names the run it is a child of."""
        from ..history import Event

        d = asdict(dispatch or Dispatch())
        now = self.now_ms()
        ev = Event(run_id=run_id, seq=1, type="run_started", payload=started, at_ms=now, epoch=0)
        row = codec.encode(ev)
        with self.driver.transaction() as cur:
            n = self.driver.execute(
                cur,
                self.q["insert_run"],
                self._p(
                    run_id=run_id,
                    workflow=started.workflow,
                    version=started.version,
                    scope=scope,
                    task_type=task_type,
                    **d,
                ),
            )
            if n == 0:
                return False
            if started.parent is not None:
                set_parent(self.driver, self.q, cur, run_id, started.parent)
            self.driver.execute(cur, self.q["insert_event"], row)
            self.driver.fetchone(cur, self.q["notify_wake"], {"run_id": run_id})
        return True

    @read_retried
    def store_id(self) -> str:
        """The store's identity (migration 0014): 32 hex digits, created once with the schema.
        StoreError when the row is missing (a store damaged or rewritten by hand)."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self.q["store_identity"], {})
        if row is None:
            raise StoreError(
                f"store {display_url(self.url)} has no identity row (table store_identity): "
                "it was damaged or rewritten by hand; run `torpor doctor`"
            )
        return str(row[0])

    @property
    def location(self) -> str:
        """Where this store is, as this host names it (the key of its high-water mark,
        :mod:`torpor.marks`): the URL without its password."""
        return display_url(self.url)

    @read_retried
    def get_run(self, run_id: str) -> RunRecord:
        """The run row. Raises RunNotFoundError."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self.q["get_run"], {"run_id": run_id})
        if row is None:
            raise RunNotFoundError(f"no run {run_id!r} in {display_url(self.url)}")
        return run_record(row)

    @read_retried
    def list_runs(
        self,
        *,
        status: str | None = None,
        outcome: str | None = None,
        limit: int = 100,
        workflow: str | None = None,
        attention: bool | None = None,
    ) -> list[RunRecord]:
        """Runs, newest first, optionally filtered by status, outcome, workflow and whether
        they need attention."""
        params = {
            "status": status,
            "outcome": outcome,
            "workflow": workflow,
            "attention": attention,
            "limit": limit,
        }
        # the runs needing attention are few: a walk of their partial index (migration 0022)
        query = "list_runs_attention" if attention is True else "list_runs"
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self.q[query], params)
        return [run_record(r) for r in rows]

    def damaged_runs(self, *, limit: int = 100) -> list[tuple[str, str]]:
        """Up to ``limit`` runs whose row has a number column holding something else:
        ``(run id, 'column=value')`` (SQLite only: PostgreSQL's columns are typed)."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self.q["damaged_runs"], {"limit": limit})
        return [(str(r[0]), str(r[1])) for r in rows]

    def count_runs(self, *, workflow: str | None = None) -> list[RunCount]:
        """How many runs there are per status, outcome and needs-attention flag."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self.q["count_runs"], {"workflow": workflow})
        return [RunCount(r[0], r[1], bool(r[2]), int(r[3])) for r in rows]

    def run_storage(self, run_id: str) -> RunStorage:
        """What the run occupies in the database (RunNotFoundError for an unknown run)."""
        self.get_run(run_id)
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self.q["run_storage"], {"run_id": run_id})
        assert row is not None
        chunk_bytes, artifact_bytes = self.run_blob_bytes(run_id)
        n, history, ckpt, messages, inbox = (int(v) for v in row)
        return RunStorage(n, history, ckpt, messages, inbox, chunk_bytes, artifact_bytes)

    def trace_context(self, run_id: str, candidate: str | None = None) -> str | None:
        """The run's trace context (:mod:`torpor.telemetry`: a W3C traceparent, optionally
        followed by ``;parent=<span id>``), setting it to ``candidate`` first when it has none:
        the first writer wins, so every process traces the run as one trace. None when unset
        and no candidate is given, or for an unknown run."""
        if candidate is not None:
            self.write_trace_context(run_id, candidate)
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self.q["get_trace_context"], {"run_id": run_id})
        return None if row is None else row[0]

    def write_trace_context(self, run_id: str, value: str) -> None:
        """Set the run's trace context unless it has one (see :meth:`trace_context`)."""
        with self.driver.transaction() as cur:
            self.driver.execute(
                cur, self.q["set_trace_context"], {"run_id": run_id, "trace_context": value}
            )

    def runnable_runs(self, limit: int = 100) -> list[str]:
        """Runs that a worker could take now: pending (and due), crashed, or waiting with a due
        wake; not the unstarted runs of queues with limits (workers start those)."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self.q["runnable_runs"], self._p(limit=limit))
        return [r[0] for r in rows]

    # ----------------------------------------------------------------- leases

    def acquire_lease(
        self,
        run_id: str,
        owner: str,
        ttl_s: float,
        *,
        take_from: tuple[str, int] | None = None,
        starts: bool = True,
    ) -> Lease:
        """Take the run's lease, bumping its epoch (which fences off every earlier holder).
        ``starts``: the run holds a slot of its queue from now, limits unchecked (``resume`` is
        an override); False for a lease taken only to annotate the run.

        Succeeds when the lease is free, expired (store clock), already ours, or held by the
        owner and epoch named by ``take_from`` — by default, a holder on this host that is gone
        (:func:`~torpor.owners.owner_is_dead`). Raises LeaseHeldError otherwise and
        RunNotFoundError for an unknown run.
        """
        ttl_ms = int(ttl_s * 1000)
        if take_from is None:
            rec = self.get_run(run_id)
            if rec.lease_owner and rec.lease_owner != owner and owner_is_dead(rec.lease_owner):
                take_from = (rec.lease_owner, rec.lease_epoch)
        stale_owner, stale_epoch = take_from or (None, None)
        mono, start = time.monotonic(), self.now_ms()
        self.appends.forget(run_id)
        with self._lease_transaction() as cur:
            row = self.driver.fetchone(
                cur,
                self.q["acquire_lease"],
                self._p(
                    run_id=run_id,
                    owner=owner,
                    ttl_ms=ttl_ms,
                    stale_owner=stale_owner,
                    stale_epoch=stale_epoch,
                    starts=starts,
                    now_ms=start,
                ),
            )
        if row is None:
            rec = self.get_run(run_id)
            raise LeaseHeldError(run_id, rec.lease_owner or "?", rec.lease_expires_at_ms)
        return Lease(run_id, owner, int(row[0]), start + ttl_ms, ttl_ms, row[1], mono)

    def claim_next(
        self,
        owner: str,
        ttl_s: float,
        *,
        accept: Mapping[str, Sequence[str]] | None = None,
        exclude: Sequence[str] = (),
    ) -> Lease | None:
        """Take the lease of one runnable run (highest priority, then oldest due first), or
        None if there is none. A delayed run is not taken before its start time; a run of a
        queue that has not started is taken only while every limit of its queue has room
        (:mod:`.claims`); the claim marks it started, holding a slot until it finishes.

        ``accept`` (``{workflow: [versions this code can continue]}``) limits the claim to runs
        the caller can execute, so a worker never takes — and blocks others from — runs of
        workflows or versions it does not have; None accepts any. ``exclude``: run ids not to
        take (a worker's back-off after a run failed). PostgreSQL skips rows other workers are
        claiming (``FOR UPDATE SKIP LOCKED``); SQLite serializes claims with its write lock.
        """
        ttl_ms = int(ttl_s * 1000)
        mono, start = time.monotonic(), self.now_ms()
        params = self._p(
            owner=owner,
            ttl_ms=ttl_ms,
            accept=_accept_json(accept),
            exclude=serde.dumps(list(exclude)),
            now_ms=start,
        )
        row = claim(self.driver, self.q, params)
        if row is None:
            return None
        self.appends.forget(str(row[0]))
        return Lease(str(row[0]), owner, int(row[1]), start + ttl_ms, ttl_ms, row[2], mono)

    def next_wake_at_ms(self, *, accept: Mapping[str, Sequence[str]] | None = None) -> int | None:
        """The earliest timer deadline among waiting runs (epoch ms), or None; ``accept`` as in
        :meth:`claim_next`."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(
                cur, self.q["next_wake_at"], self._p(accept=_accept_json(accept))
            )
        return int(row[0]) if row and row[0] is not None else None

    def wait_for_wake(self, timeout_s: float, stop: Callable[[], bool] = lambda: False) -> bool:
        """Block until another process may have made a run runnable, or ``timeout_s`` passed.

        This base version sleeps for the timeout (a short poll); SQLite overrides it with
        ``PRAGMA data_version`` polling, PostgreSQL with LISTEN/NOTIFY. True when woken.
        """
        end = time.monotonic() + timeout_s
        while not stop() and time.monotonic() < end:
            time.sleep(min(0.01, max(0.0, end - time.monotonic())))
        return False

    def renew_lease(self, lease: Lease) -> Lease:
        """Extend the lease by its ttl. Raises LeaseLostError if it was lost or expired."""
        self.check_database_file()
        mono, start = time.monotonic(), self.now_ms()
        with self._lease_transaction() as cur:
            n = self.driver.execute(
                cur,
                self.q["renew_lease"],
                self._p(
                    run_id=lease.run_id,
                    owner=lease.owner,
                    epoch=lease.epoch,
                    ttl_ms=lease.ttl_ms,
                    now_ms=start,
                ),
            )
        if n == 0:
            raise LeaseLostError(lease.run_id, lease.epoch, "renewal refused")
        return Lease(
            lease.run_id,
            lease.owner,
            lease.epoch,
            start + lease.ttl_ms,
            lease.ttl_ms,
            renewed_mono=mono,
        )

    def unrunnable_versions(
        self, accept: Mapping[str, Sequence[str]], limit: int = 100
    ) -> list[tuple[str, str]]:
        """``(run id, version)`` of runnable runs of the workflows in ``accept`` recorded under
        a version not in it, whose needs-attention detail does not say so yet."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(
                cur,
                self.q["unrunnable_versions"],
                self._p(accept=_accept_json(accept), limit=limit),
            )
        return [(str(r[0]), str(r[1])) for r in rows]

    def held_on_host(self, host: str, limit: int = 100) -> list[tuple[str, str, int, str, str]]:
        """``(run id, owner, epoch, workflow, version)`` of unfinished runs leased by an owner
        on ``host``."""
        pattern = host.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + ":%"
        with self.driver.read() as cur:
            rows = self.driver.fetchall(
                cur, self.q["held_on_host"], {"host_prefix": pattern, "limit": limit}
            )
        return [(str(r[0]), str(r[1]), int(r[2]), str(r[3]), str(r[4])) for r in rows]

    def release_lease(self, lease: Lease) -> None:
        """Give the lease up (no-op if it is no longer ours)."""
        self.appends.forget(lease.run_id)  # what this lease wrote is no longer needed
        with self._lease_transaction() as cur:
            self.driver.execute(
                cur,
                self.q["release_lease"],
                self._p(run_id=lease.run_id, owner=lease.owner, epoch=lease.epoch),
            )

    # ----------------------------------------------------------------- appends

    def note_infra(self, run_id: str) -> None:
        """See :meth:`.base.Store.note_infra`."""
        self.appends.note_retry(run_id)

    def append(
        self,
        lease: Lease,
        events: Sequence[Event],
        state: RunState,
        *,
        wake_at_ms: int | None = None,
        consumes: Sequence[tuple[str, int]] = (),
        if_inbox_empty: bool = False,
        new_steps: Collection[str] = (),
        force_checkpoint: bool = False,
    ) -> None:
        """Append ``events`` atomically under the lease's fence: see :meth:`.Appends.append`."""
        self.appends.append(
            lease,
            events,
            state,
            wake_at_ms=wake_at_ms,
            consumes=consumes,
            if_inbox_empty=if_inbox_empty,
            new_steps=new_steps,
            force_checkpoint=force_checkpoint,
        )

    def restore_status(self, lease: Lease, state: RunState) -> None:
        """Write the run row's status columns from ``state`` without appending (fenced): used
        when a reopening message did not apply and the run stays finished."""
        self.appends.restore_status(lease, state)

    # ----------------------------------------------------------------- inbox

    def post_inbox(
        self, run_id: str, kind: str, body: dict[str, Any], message_id: str | None = None
    ) -> bool:
        """Queue a message for the run and wake it if it waits; it arrives now (``at_ms``: this
        store's clock, the one deadlines are fixed by). False if ``message_id`` was already
        posted to this run (deduplicated forever, even once the run finished); InboxError if it
        was posted to another run; PayloadError for a body that could not be recorded;
        RunNotFoundError for an unknown run.

        A run that has its outcome takes no message (RunFinishedError, "run … already
        finished: <outcome>"), except one in :data:`~torpor.store.base.REOPENING_KINDS` to a
        finished ``unresolved`` or ``blocked`` run, which also makes it runnable again so
        workers pick the settled run up (if the message turns out not to apply, the executor
        records its refusal and writes the finished status back). The run row's status is read
        under its lock, and the executor's outcome append refuses while a message is pending
        (``if_inbox_empty``), so a message and the outcome never cross: either the run takes
        the message before its outcome, or the message is refused here."""
        message_id = message_id or uuid.uuid4().hex
        text = codec.message_text(run_id, kind, body)
        with self.driver.transaction() as cur:
            # Lock the run row first (PostgreSQL: FOR UPDATE; SQLite: the write lock) so a
            # message cannot slip past a concurrent fenced append: one consuming an approval,
            # or one recording the outcome.
            row = self.driver.fetchone(cur, self.q["lock_run"], {"run_id": run_id})
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r} in {display_url(self.url)}")
            status, outcome = row[1], row[2]
            finished = status == "finished" and not (
                kind in REOPENING_KINDS and outcome in ("unresolved", "blocked")
            )
            n = 0
            if not finished:
                n = self.driver.execute(
                    cur,
                    self.q["insert_inbox"],
                    self._p(message_id=message_id, run_id=run_id, kind=kind, body=text),
                )
            if not n:
                row = self.driver.fetchone(cur, self.q["inbox_owner"], {"message_id": message_id})
                if row is not None and row[0] != run_id:
                    raise InboxError(
                        f"message id {message_id!r} was already used for run {row[0]!r}; "
                        f"not delivered to run {run_id!r}"
                    )
                if row is None:  # (finished: a new message, not a redelivery)
                    raise RunFinishedError(f"run {run_id!r} already finished: {outcome}")
                return False
            self.driver.execute(cur, self.q["wake_run"], self._p(run_id=run_id))
            if kind in REOPENING_KINDS:
                self.driver.execute(cur, self.q["reopen_run"], self._p(run_id=run_id))
            self.driver.fetchone(cur, self.q["notify_wake"], {"run_id": run_id})
        if faults.point("wake.posted"):  # a fault plan delivers it again (same message id)
            self.post_inbox(run_id, kind, body, message_id)
        return True

    @read_retried
    def pending_inbox(self, run_id: str) -> list[InboxMessage]:
        """Messages not yet moved into the history, oldest first."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self.q["pending_inbox"], {"run_id": run_id})
        return [
            InboxMessage(mid, kind, codec.message_body(body), int(at_ms))
            for mid, kind, body, at_ms in rows
        ]

    @read_retried
    def count_pending_inbox(self, run_id: str) -> int:
        """How many inbox messages wait to be moved into the history."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self.q["count_pending_inbox"], {"run_id": run_id})
        return int(row[0]) if row else 0


def _accept_json(accept: Mapping[str, Sequence[str]] | None) -> str | None:
    """``{workflow: [versions]}`` as the JSON text the dispatch queries take (None: any)."""
    if accept is None:
        return None
    return serde.dumps({name: list(versions) for name, versions in accept.items()})


__all__ = ["SQLStore"]
