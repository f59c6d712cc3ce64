"""Every domain operation of :class:`~torpor.store.base.Store`, written once over a
:class:`~torpor.store.base.Driver`: idempotent start, leases, fenced appends, checkpoints and
loading, completions, and the inbox. The SQL is in ``sql/<dialect>.sql``; rows are made and read
by :mod:`.codec`.

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

import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .. import faults, serde
from ..errors import (
    CorruptRecordError,
    InboxError,
    InboxPendingError,
    LeaseHeldError,
    LeaseLostError,
    RunNotFoundError,
    StoreError,
    TransitionError,
)
from ..history import EffectIntended, Event, RunStarted, RunState, apply, starts_step
from ..owners import owner_is_dead
from . import codec
from .base import (
    CHECKPOINT_EVENTS,
    REOPENING_KINDS,
    Completion,
    Driver,
    InboxMessage,
    Lease,
    RunRecord,
    load_queries,
)

#: What a store remembers of its latest append to a run under a lease, so the next append can
#: take the plain path: (lease epoch, last seq, checkpoint seq, the row's status columns).
_Memo = tuple[int, int, int, tuple[Any, ...]]


class SQLStore:
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
        self.checkpoint_every = checkpoint_every
        self._memo: dict[str, _Memo] = {}

    def now_ms(self) -> int:
        """The store's clock in epoch milliseconds."""
        return int(self.clock() * 1000)

    def _p(self, **params: Any) -> dict[str, Any]:
        params.setdefault("now_ms", self.now_ms())
        return params

    def close(self) -> None:
        """Release connections."""
        self.driver.close()

    @contextmanager
    def _lease_transaction(self) -> Iterator[Any]:
        """A transaction that only moves a lease (claim, acquire, renew, release).

        On PostgreSQL it commits without waiting for its WAL flush (``synchronous_commit``
        off for this transaction alone), saving an fsync per claim and per release. That is
        safe: if the server crashes before the flush, the lease change is lost, and a lost
        claim or renewal only makes the holder's next fenced append fail (LeaseLostError); a
        lost release only delays a takeover to the lease's expiry. The holder's first append
        is an ordinary durable commit, and its flush covers the earlier claim (WAL is
        sequential), so nothing is ever done on the strength of a claim that could vanish.
        """
        with self.driver.transaction() as cur:
            self.driver.execute(cur, self.q["lease_commit_mode"], {})
            yield cur

    # ----------------------------------------------------------------- runs

    def create_run(self, run_id: str, started: RunStarted) -> bool:
        """Create a run with its ``run_started`` event. Idempotent: False if it existed."""
        now = self.now_ms()
        ev = Event(run_id=run_id, seq=1, type="run_started", payload=started, at_ms=now, epoch=0)
        row = codec.encode(ev)
        with self.driver.transaction() as cur:
            n = self.driver.execute(
                cur,
                self.q["insert_run"],
                self._p(run_id=run_id, workflow=started.workflow, version=started.version),
            )
            if n == 0:
                return False
            self.driver.execute(cur, self.q["insert_event"], row)
            self.driver.fetchone(cur, self.q["notify_wake"], {"run_id": run_id})
        return True

    def get_run(self, run_id: str) -> RunRecord:
        """The run row. Raises RunNotFoundError."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self.q["get_run"], {"run_id": run_id})
        if row is None:
            raise RunNotFoundError(f"no run {run_id!r} in {self.url}")
        return RunRecord(*row)

    def list_runs(
        self, *, status: str | None = None, outcome: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Runs, newest first, optionally filtered by status and outcome."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(
                cur, self.q["list_runs"], {"status": status, "outcome": outcome, "limit": limit}
            )
        return [RunRecord(*r) for r in rows]

    def runnable_runs(self, limit: int = 100) -> list[str]:
        """Runs that a worker could take now: pending, crashed, or waiting with a due wake."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self.q["runnable_runs"], self._p(limit=limit))
        return [r[0] for r in rows]

    # ----------------------------------------------------------------- leases

    def acquire_lease(
        self, run_id: str, owner: str, ttl_s: float, *, take_from: tuple[str, int] | None = None
    ) -> Lease:
        """Take the run's lease, bumping its epoch (which fences off every earlier holder).

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
        start = self.now_ms()
        self._memo.pop(run_id, None)
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
                    now_ms=start,
                ),
            )
        if row is None:
            rec = self.get_run(run_id)
            raise LeaseHeldError(run_id, rec.lease_owner or "?", rec.lease_expires_at_ms)
        return Lease(run_id, owner, int(row[0]), start + ttl_ms, ttl_ms)

    def claim_next(
        self,
        owner: str,
        ttl_s: float,
        *,
        accept: Mapping[str, Sequence[str]] | None = None,
        exclude: Sequence[str] = (),
    ) -> Lease | None:
        """Take the lease of one runnable run (oldest due first), or None if there is none.

        ``accept`` (``{workflow: [versions this code can continue]}``) limits the claim to runs
        the caller can execute, so a worker never takes — and blocks others from — runs of
        workflows or versions it does not have; None accepts any. ``exclude``: run ids not to
        take (a worker's back-off after a run failed). PostgreSQL skips rows other workers are
        claiming (``FOR UPDATE SKIP LOCKED``); SQLite serializes claims with its write lock.
        """
        ttl_ms = int(ttl_s * 1000)
        start = self.now_ms()
        with self._lease_transaction() as cur:
            row = self.driver.fetchone(
                cur,
                self.q["claim_next"],
                self._p(
                    owner=owner,
                    ttl_ms=ttl_ms,
                    accept=_accept_json(accept),
                    exclude=serde.dumps(list(exclude)),
                    now_ms=start,
                ),
            )
        if row is None:
            return None
        self._memo.pop(str(row[0]), None)
        return Lease(str(row[0]), owner, int(row[1]), start + ttl_ms, ttl_ms)

    def next_wake_at_ms(self, *, accept: Mapping[str, Sequence[str]] | None = None) -> int | None:
        """The earliest timer deadline among waiting runs (epoch ms), or None; ``accept`` as in
        :meth:`claim_next`."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(
                cur, self.q["next_wake_at"], {"accept": _accept_json(accept)}
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
        start = self.now_ms()
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
        return Lease(lease.run_id, lease.owner, lease.epoch, start + lease.ttl_ms, lease.ttl_ms)

    def release_lease(self, lease: Lease) -> None:
        """Give the lease up (no-op if it is no longer ours)."""
        self._memo.pop(lease.run_id, None)  # what this lease wrote is no longer needed
        with self._lease_transaction() as cur:
            self.driver.execute(
                cur,
                self.q["release_lease"],
                self._p(run_id=lease.run_id, owner=lease.owner, epoch=lease.epoch),
            )

    # ----------------------------------------------------------------- appends

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
        """Append ``events`` atomically under the lease's fence.

        ``state`` is the run state *after* the events, folded by the caller (the fold refused
        any impossible transition); the store checks that the batch is what was folded (this
        run, dense seqs ending at ``state.seq``, this lease's epoch) and adds the rules the
        compact state cannot see, against its indexes: a completed step never starts again (a
        compute step may, for another input hash), and an idempotency key recorded as
        performed is never intended again (G1, G2). It writes ``state`` as the engine
        checkpoint at a boundary event, when the tail reaches ``checkpoint_every``, or when
        ``force_checkpoint``.

        ``consumes``: inbox messages moved into the history, as ``(message id, seq)``.
        ``if_inbox_empty``: refuse with InboxPendingError if any inbox message is pending (an
        approval must not be consumed past a revocation that arrived meanwhile). A run that goes
        to wait while messages are pending is woken at once. ``new_steps``: ids of steps the
        caller proved, under this lease, to have no recorded completion; their start skips the
        index probe (the fence makes the proof hold at commit).

        Raises LeaseLostError (nothing written) when fenced off or when another writer took the
        seq, TransitionError for a rule broken, PayloadError for an event that cannot be
        encoded. A connection lost around the commit is read back, never guessed at.
        """
        if not events:
            return
        _check_batch(lease, events, state)
        if self.now_ms() >= lease.expires_at_ms:
            raise LeaseLostError(
                lease.run_id,
                lease.epoch,
                f"fence check failed appending seq {events[0].seq}: "
                "the lease expired (renew it first)",
            )
        rows = [codec.encode(e) for e in events]
        for attempt in range(3):
            try:
                faults.point("append.committing")
                self._append_once(
                    lease, events, rows, state, wake_at_ms, consumes, if_inbox_empty,
                    new_steps, force_checkpoint,
                )  # fmt: skip
                faults.point("append.committed")
                return
            except (LeaseLostError, InboxPendingError, TransitionError, CorruptRecordError):
                raise
            except StoreError:
                # The connection failed around the commit: it may or may not have landed.
                # Read back instead of guessing; retry only what certainly did not land.
                landed = self._landed(events)
                if landed:
                    faults.point("append.landed")
                    return
                if landed is None or attempt == 2:
                    raise
                faults.point("append.absent")

    def _landed(self, events: Sequence[Event]) -> bool | None:
        """Whether ``events`` are in the history exactly as given: True (all), False (none),
        None (something else holds those seqs: another writer won)."""
        first, last = events[0], events[-1]
        found = self.read_events(first.run_id, first.seq - 1, len(events))
        if not found:
            return False
        same = [(e.seq, e.type, e.epoch, e.payload) for e in found] == [
            (e.seq, e.type, e.epoch, e.payload) for e in events
        ]
        return True if same and found[-1].seq == last.seq else None

    def _append_once(
        self,
        lease: Lease,
        events: Sequence[Event],
        rows: list[dict[str, Any]],
        state: RunState,
        wake_at_ms: int | None,
        consumes: Sequence[tuple[str, int]],
        if_inbox_empty: bool,
        new_steps: Collection[str],
        force_checkpoint: bool,
    ) -> None:
        run_id, first = lease.run_id, events[0].seq
        columns = (
            state.status.value,
            state.outcome.value if state.outcome else None,
            wake_at_ms,
            state.version,
        )
        boundary = force_checkpoint or any(e.type in CHECKPOINT_EVENTS for e in events)
        checks = [e for e in events if starts_step(e) and e.step_id not in new_steps]
        memo = self._memo.pop(run_id, None)  # back once this append is known to have landed
        if (
            not boundary
            and not checks
            and not consumes
            and not if_inbox_empty
            and memo is not None
            and memo[0] == lease.epoch
            and memo[1] == first - 1
            and memo[3] == columns
            and state.seq - memo[2] < self.checkpoint_every
        ):
            self._append_plain(lease, rows)
            self._memo[run_id] = (lease.epoch, state.seq, memo[2], columns)
            return
        due = memo is not None and state.seq - memo[2] >= self.checkpoint_every
        fence = self._p(
            run_id=run_id,
            owner=lease.owner,
            epoch=lease.epoch,
            last_seq=state.seq,
            status=columns[0],
            outcome=columns[1],
            wake_at_ms=wake_at_ms,
            version=state.version,
            checkpoint=codec.checkpoint_text(state) if boundary or due else None,
        )
        try:
            with self.driver.transaction() as cur:
                ckpt_seq = self._append_fenced(cur, lease, events, rows, fence, checks)
                if fence["checkpoint"] is None and state.seq - ckpt_seq >= self.checkpoint_every:
                    ckpt_seq = state.seq
                    self.driver.execute(
                        cur,
                        self.q["save_checkpoint"],
                        {
                            "run_id": run_id,
                            "checkpoint_seq": ckpt_seq,
                            "checkpoint": codec.checkpoint_text(state),
                        },
                    )
                self._apply_inbox(cur, run_id, consumes, if_inbox_empty, columns[0] == "waiting")
        except Exception as exc:
            mapped = self._collision(exc, lease, first)
            if mapped is None:
                raise
            raise mapped from exc
        self._memo[run_id] = (lease.epoch, state.seq, ckpt_seq, columns)

    def _append_plain(self, lease: Lease, rows: list[dict[str, Any]]) -> None:
        """The plain path: the fenced insert, one statement in a transaction of its own."""
        fence = {"owner": lease.owner, "now_ms": self.now_ms()}
        if len(rows) == 1:
            n = self.driver.write_one(self.q["append_event"], {**rows[0], **fence})
        else:
            n = self.driver.write_one(self.q["append_events"], {**_columns(rows), **fence})
        if not n:
            detail = "the seq was taken" if n is None else "fence check failed"
            raise LeaseLostError(
                lease.run_id, lease.epoch, f"{detail} appending seq {rows[0]['seq']}"
            )

    def _append_fenced(
        self,
        cur: Any,
        lease: Lease,
        events: Sequence[Event],
        rows: list[dict[str, Any]],
        fence: dict[str, Any],
        checks: list[Event],
    ) -> int:
        """Inside the transaction: the fenced row update, the index checks, the inserts.
        Returns the checkpoint seq."""
        row = self.driver.fetchone(cur, self.q["fence_row"], fence)
        if row is None:
            raise LeaseLostError(
                lease.run_id, lease.epoch, f"fence check failed appending seq {events[0].seq}"
            )
        # Event by event, so a rerun or a performed key within the batch is seen too.
        for e, r in zip(events, rows, strict=True):
            if any(e is c for c in checks):
                self._refuse_rerun(cur, e)
            if isinstance(e.payload, EffectIntended):
                self._refuse_performed(cur, e, e.payload.key)
            self.driver.execute(cur, self.q["insert_event"], r)
        return int(row[0])

    def _apply_inbox(
        self, cur: Any, run_id: str, consumes: Sequence[tuple[str, int]], guard: bool, wait: bool
    ) -> None:
        """Inside the transaction: mark consumed messages; refuse (guard) or wake (a run going
        to wait) when messages are still pending."""
        for message_id, seq in consumes:
            self.driver.execute(
                cur, self.q["consume_inbox"], {"message_id": message_id, "seq": seq}
            )
        if guard or wait:
            row = self.driver.fetchone(cur, self.q["count_pending_inbox"], {"run_id": run_id})
            if row and int(row[0]):
                if guard:
                    raise InboxPendingError(f"run {run_id!r} has inbox messages to apply")
                self.driver.execute(cur, self.q["wake_run"], self._p(run_id=run_id))
                self.driver.fetchone(cur, self.q["notify_wake"], {"run_id": run_id})

    def _collision(self, exc: Exception, lease: Lease, seq: int) -> Exception | None:
        """A unique violation in an append means another writer got the seq first (the events'
        key), or a performed key was recorded twice (the effect index): as errors. None for
        any other exception."""
        index = self.driver.unique_violation(exc)
        if index is None:
            return None
        if "effect_key" in index:
            return TransitionError(
                lease.run_id, seq, "effect", "an idempotency key recorded as performed twice"
            )
        return LeaseLostError(lease.run_id, lease.epoch, f"the seq was taken appending seq {seq}")

    def _refuse_rerun(self, cur: Any, e: Event) -> None:
        """G1/G4 beyond the compact state: a completed step never starts again (a compute
        step may, for a different input hash). Checked against the indexed history."""
        p = e.payload
        row = self.driver.fetchone(
            cur, self.q["step_completion"], {"run_id": e.run_id, "step_id": e.step_id}
        )
        if row is None:
            return
        prev = codec.completion(e.run_id, e.step_id or "", row[0], int(row[1]))
        if (
            getattr(p, "policy", None) == "compute"
            and prev.policy in (None, "compute")
            and prev.input_hash != getattr(p, "input_hash", None)
        ):
            return  # a compute step reruns for a new input
        raise TransitionError(
            e.run_id,
            e.seq,
            e.type,
            f"step {e.step_id!r} already completed at seq {row[1]}; a completed step never reruns",
        )

    def _refuse_performed(self, cur: Any, e: Event, key: str) -> None:
        """G2 beyond the compact state: a performed effect left the state, but its key is in
        the index; intending it again is refused."""
        row = self.driver.fetchone(
            cur, self.q["performed_effect"], {"run_id": e.run_id, "key": key}
        )
        if row is not None:
            raise TransitionError(
                e.run_id,
                e.seq,
                e.type,
                f"effect {key!r} was performed at seq {row[0]}; it is never performed again",
            )

    def restore_status(self, lease: Lease, state: RunState) -> None:
        """Write the run row's status columns from ``state`` without appending (fenced): used
        when a reopening message did not apply and the run stays finished."""
        fence = self._p(
            run_id=lease.run_id,
            owner=lease.owner,
            epoch=lease.epoch,
            last_seq=state.seq,
            status=state.status.value,
            outcome=state.outcome.value if state.outcome else None,
            wake_at_ms=None,
            version=state.version,
            checkpoint=None,
        )
        with self.driver.transaction() as cur:
            if self.driver.fetchone(cur, self.q["fence_row"], fence) is None:
                raise LeaseLostError(lease.run_id, lease.epoch, "restoring the finished status")

    # ----------------------------------------------------------------- history

    def read_events(self, run_id: str, after_seq: int = 0, limit: int = 1_000_000) -> list[Event]:
        """Events with ``seq > after_seq`` in order. Raises CorruptRecordError on a bad row."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(
                cur,
                self.q["events_after"],
                {"run_id": run_id, "after_seq": after_seq, "limit": limit},
            )
        return [codec.decode(run_id, r) for r in rows]

    def iter_events(self, run_id: str, page: int = 1000) -> Iterator[Event]:
        """All events of a run, read page by page."""
        after = 0
        while True:
            batch = self.read_events(run_id, after, page)
            yield from batch
            if len(batch) < page:
                return
            after = batch[-1].seq

    def load(self, run_id: str) -> RunState:
        """The run's state: latest engine checkpoint + the events after it (G8).

        A checkpoint that cannot be decoded, or that the events after it do not fold onto, is
        not trusted: the state is then refolded from the full history (events are the
        authority; nothing is rewritten). A corrupt event, or a stored history that is itself
        impossible, raises CorruptRecordError naming run and seq.
        """
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self.q["get_checkpoint"], {"run_id": run_id})
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r} in {self.url}")
            ckpt_seq, ckpt_text, row_seq = row[0], row[1], int(row[2])
            state = codec.checkpoint_state(run_id, ckpt_seq, ckpt_text, row_seq)
            rows = self._events_after(cur, run_id, state.seq if state else 0)
        if state is not None:
            try:
                return self._fold_rows(run_id, state, rows, row_seq)
            except TransitionError:
                pass  # the checkpoint disagrees with the history: refold from the start
            with self.driver.read() as cur:
                rows = self._events_after(cur, run_id, 0)
        try:
            return self._fold_rows(run_id, RunState(run_id=run_id), rows, row_seq)
        except TransitionError as exc:
            raise CorruptRecordError(
                f"run {run_id!r} seq {exc.seq}: the stored history is impossible: {exc.rule}",
                run_id=run_id,
                seq=exc.seq,
            ) from exc

    def _events_after(self, cur: Any, run_id: str, after: int) -> list[tuple[Any, ...]]:
        params = {"run_id": run_id, "after_seq": after, "limit": 1 << 62}
        return self.driver.fetchall(cur, self.q["events_after"], params)

    @staticmethod
    def _fold_rows(
        run_id: str, state: RunState, rows: list[tuple[Any, ...]], row_seq: int
    ) -> RunState:
        for r in rows:
            apply(state, codec.decode(run_id, r))
        if state.seq < row_seq:
            raise CorruptRecordError(
                f"run {run_id!r}: history ends at seq {state.seq} but the run row says {row_seq}",
                run_id=run_id,
                seq=state.seq,
            )
        return state

    def completions_after(self, run_id: str, after_seq: int) -> dict[str, Completion]:
        """Latest completion per step among events after ``after_seq`` (the replay cache)."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(
                cur, self.q["completions_after"], {"run_id": run_id, "after_seq": after_seq}
            )
        return {sid: codec.completion(run_id, sid, payload, seq) for sid, payload, seq in rows}

    def step_completion(self, run_id: str, step_id: str) -> Completion | None:
        """The latest completion of one step (indexed lookup), or None."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(
                cur, self.q["step_completion"], {"run_id": run_id, "step_id": step_id}
            )
        return None if row is None else codec.completion(run_id, step_id, row[0], int(row[1]))

    def step_events(self, run_id: str, step_id: str) -> list[Event]:
        """Every event recorded for one step."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(
                cur, self.q["step_events"], {"run_id": run_id, "step_id": step_id}
            )
        return [codec.decode(run_id, r) for r in rows]

    # ----------------------------------------------------------------- inbox

    def post_inbox(
        self, run_id: str, kind: str, body: dict[str, Any], message_id: str | None = None
    ) -> bool:
        """Queue a message for the run and wake it if it waits. False if ``message_id`` was
        already posted to this run (deduplicated forever); InboxError if it was posted to
        another run; PayloadError for a body that could not be recorded. A message in
        :data:`~torpor.store.base.REOPENING_KINDS` also makes a finished ``unresolved`` or
        ``blocked`` run runnable again, so workers pick the settled run up; if the message
        turns out not to apply, the executor writes the finished status back."""
        message_id = message_id or uuid.uuid4().hex
        text = codec.message_text(run_id, kind, body)
        with self.driver.transaction() as cur:
            # Lock the run row first (PostgreSQL: FOR UPDATE) so a message cannot slip past a
            # concurrent fenced append that is consuming an approval.
            if self.driver.fetchone(cur, self.q["lock_run"], {"run_id": run_id}) is None:
                raise RunNotFoundError(f"no run {run_id!r} in {self.url}")
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
                return False
            self.driver.execute(cur, self.q["wake_run"], self._p(run_id=run_id))
            if kind in REOPENING_KINDS:
                self.driver.execute(cur, self.q["reopen_run"], self._p(run_id=run_id))
            self.driver.fetchone(cur, self.q["notify_wake"], {"run_id": run_id})
        if faults.point("wake.posted"):  # a fault plan delivers it again (same message id)
            self.post_inbox(run_id, kind, body, message_id)
        return True

    def pending_inbox(self, run_id: str) -> list[InboxMessage]:
        """Messages not yet moved into the history, oldest first."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self.q["pending_inbox"], {"run_id": run_id})
        return [
            InboxMessage(mid, kind, codec.message_body(body), int(at_ms))
            for mid, kind, body, at_ms in rows
        ]

    def count_pending_inbox(self, run_id: str) -> int:
        """How many inbox messages wait to be moved into the history."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self.q["count_pending_inbox"], {"run_id": run_id})
        return int(row[0]) if row else 0


def _check_batch(lease: Lease, events: Sequence[Event], state: RunState) -> None:
    """Cheap checks that ``events`` are what the caller folded into ``state``: this run, dense
    seqs ending at ``state.seq``, written under the lease's epoch. (The transitions themselves
    were checked by :func:`~torpor.history.apply` when the caller folded them.)"""
    first = events[0].seq
    for i, e in enumerate(events):
        if e.run_id != lease.run_id:
            raise TransitionError(lease.run_id, e.seq, e.type, f"event belongs to run {e.run_id!r}")
        if e.seq != first + i:
            raise TransitionError(
                lease.run_id, e.seq, e.type, f"seq must be {first + i} (dense, append-only)"
            )
        if e.epoch != lease.epoch:
            raise TransitionError(
                lease.run_id,
                e.seq,
                e.type,
                f"event says epoch {e.epoch} but is written under lease epoch {lease.epoch}",
            )
    if state.run_id != lease.run_id or state.seq != events[-1].seq:
        raise TransitionError(
            lease.run_id,
            events[-1].seq,
            events[-1].type,
            f"the state given is at seq {state.seq} of run {state.run_id!r}: it must be "
            "the state after these events",
        )


def _columns(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Several event rows as the parameters of ``append_events``: one list per column (and,
    for SQLite, the same as one JSON array of rows)."""
    first = rows[0]
    cols = ("seq", "type", "step_id", "at_ms", "v", "payload", "effect_key")
    out: dict[str, Any] = {"run_id": first["run_id"], "epoch": first["epoch"]}
    for c in cols:
        out[c + "s"] = [r[c] for r in rows]
    out["events"] = serde.dumps([[r[c] for c in cols] for r in rows])
    return out


def _accept_json(accept: Mapping[str, Sequence[str]] | None) -> str | None:
    """``{workflow: [versions]}`` as the JSON text the dispatch queries take (None: any)."""
    if accept is None:
        return None
    return serde.dumps({name: list(versions) for name, versions in accept.items()})


__all__ = ["SQLStore"]
