"""The append paths of the store (see :mod:`.sqlstore` for the two paths and :mod:`.base`
for fencing): the plain fenced insert, the fenced-row transaction with the index checks the
compact state cannot make (a completed step never reruns, a performed key is never intended
again), checkpoints, the inbox messages an append consumes, and the read-back of a commit whose
connection died."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from .. import faults, serde
from ..errors import (
    CorruptRecordError,
    InboxPendingError,
    LeaseLostError,
    StoreError,
    TransitionError,
)

if TYPE_CHECKING:
    from ..history import Event, RunState

from . import codec
from .base import CHECKPOINT_EVENTS, Driver, Lease, damaged_column
from .children import tell_parent
from .chunkio import ChunkIO
from .ledger import write_ledger

#: What the store remembers of its latest append to a run under a lease, so the next append can
#: take the plain path: (lease epoch, last seq, checkpoint seq, the row's status columns).
_Memo = tuple[int, int, int, tuple[Any, ...]]


class Appends:
    """Appends to runs through ``driver`` (queries ``q``), with the store's clock ``now_ms``
    and its ``read_events`` (for the read-back). ``checkpoint_every``: see
    :class:`~.sqlstore.SQLStore`."""

    def __init__(
        self,
        driver: Driver,
        q: dict[str, str],
        now_ms: Callable[[], int],
        read_events: Callable[[str, int, int], list[Event]],
        checkpoint_every: int,
        chunkio: ChunkIO,
    ):
        self.chunkio = chunkio
        self.driver = driver
        self.q = q
        self.now_ms = now_ms
        self.read_events = read_events
        self.checkpoint_every = checkpoint_every
        self._memo: dict[str, _Memo] = {}

    def forget(self, run_id: str) -> None:
        """Drop what this store remembers of its appends to ``run_id`` (its lease moved)."""
        self._memo.pop(run_id, None)
        self.chunkio.forget(run_id)

    def _p(self, **params: Any) -> dict[str, Any]:
        params.setdefault("now_ms", self.now_ms())
        return params

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
        now = self.now_ms()
        if now >= lease.expires_at_ms:
            raise LeaseLostError(
                lease.run_id,
                lease.epoch,
                f"fence check failed appending seq {events[0].seq}: "
                "the lease expired (renew it first)",
            )
        sink: dict[str, str] = {}
        rows = [codec.encode(e, sink) for e in events]
        # What the events refer to is written first: chunks of large payloads, and the run's
        # references to them and to artifacts (an orphan of a failed append is collected).
        arts = codec.artifact_refs([r["payload"] for r in rows] + list(sink.values()), events)
        self.chunkio.put(lease.run_id, sink, arts)
        for attempt in range(3):
            try:
                faults.point("append.committing")
                self._append_once(
                    lease, events, rows, state, wake_at_ms, consumes, if_inbox_empty,
                    new_steps, force_checkpoint, now,
                )  # fmt: skip
                faults.point("append.committed")
                return
            except (LeaseLostError, InboxPendingError, TransitionError, CorruptRecordError):
                raise
            except StoreError:
                # The connection failed around the commit: it may or may not have landed.
                # Read back instead of guessing; retry only what certainly did not land.
                landed = self.landed(events)
                self.note_retry(lease.run_id)
                if landed:
                    faults.point("append.landed")
                    return
                if landed is None or attempt == 2:
                    raise
                faults.point("append.absent")

    def note_retry(self, run_id: str) -> None:
        """Leave a trace on the run row of an append that hit a lost connection (``show``
        prints the count); best effort: the connection may still be down."""
        with contextlib.suppress(StoreError), self.driver.transaction() as cur:
            self.driver.execute(cur, self.q["note_infra_retry"], {"run_id": run_id})

    def landed(self, events: Sequence[Event]) -> bool | None:
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
        now: int,
    ) -> None:
        from ..history import ContextCompacted, starts_step

        run_id, first = lease.run_id, events[0].seq
        columns = (
            state.status.value,
            state.outcome.value if state.outcome else None,
            wake_at_ms,
            state.version,
            state.attention or None,
        )
        boundary = force_checkpoint or any(e.type in CHECKPOINT_EVENTS for e in events)
        checks = [e for e in events if starts_step(e) and e.step_id not in new_steps]
        # Fact-ledger rows are written in the event's transaction (the fenced-row path).
        ledger = [e for e in events if isinstance(e.payload, ContextCompacted) and e.payload.ledger]
        memo = self._memo.pop(run_id, None)  # back once this append is known to have landed
        if (
            not boundary
            and not ledger
            and not checks
            and not consumes
            and not if_inbox_empty
            and memo is not None
            and memo[0] == lease.epoch
            and memo[1] == first - 1
            and memo[3] == columns
            and state.seq - memo[2] < self.checkpoint_every
        ):
            self._append_plain(lease, rows, now)
            self._memo[run_id] = (lease.epoch, state.seq, memo[2], columns)
            return
        due = memo is not None and state.seq - memo[2] >= self.checkpoint_every
        fence = self._p(
            now_ms=now,
            run_id=run_id,
            owner=lease.owner,
            epoch=lease.epoch,
            last_seq=state.seq,
            status=columns[0],
            outcome=columns[1],
            wake_at_ms=wake_at_ms,
            version=state.version,
            attention=columns[4],
            checkpoint=self._checkpoint(run_id, state) if boundary or due else None,
        )
        if (
            "append_fenced" in self.q
            and memo is not None
            and memo[0] == lease.epoch
            and memo[1] == first - 1
            and not checks
            and not ledger
            and not consumes
            and not if_inbox_empty
            and columns[0] != "waiting"
        ):
            # The dialect does the fenced-row path in one statement (the checkpoint due is
            # known up front from this lease's previous append).
            self._append_fenced_one(lease, events, rows, fence)
            ckpt = state.seq if fence["checkpoint"] is not None else memo[2]
            self._memo[run_id] = (lease.epoch, state.seq, ckpt, columns)
            return
        try:
            with self.driver.transaction() as cur:
                ckpt_seq = self._append_fenced(cur, lease, events, rows, fence, checks)
                for e in ledger:
                    assert isinstance(e.payload, ContextCompacted)
                    write_ledger(self.driver, cur, run_id, e.seq, e.at_ms, e.payload.ledger)
                if fence["checkpoint"] is None and state.seq - ckpt_seq >= self.checkpoint_every:
                    ckpt_seq = state.seq
                    sink: dict[str, str] = {}
                    text = codec.checkpoint_text(state, sink)
                    self.chunkio.write(cur, run_id, sink)
                    self.driver.execute(
                        cur,
                        self.q["save_checkpoint"],
                        {"run_id": run_id, "checkpoint_seq": ckpt_seq, "checkpoint": text},
                    )
                self._apply_inbox(cur, run_id, consumes, if_inbox_empty, columns[0] == "waiting")
                if columns[1] is not None and events[-1].type == "run_finished":
                    # A child's outcome reaches its parent in this same transaction (G14).
                    tell_parent(self.driver, self.q, cur, run_id, columns[1], state.seq, now)
        except Exception as exc:
            mapped = self._collision(exc, lease, first)
            if mapped is None:
                raise
            raise mapped from exc
        self._memo[run_id] = (lease.epoch, state.seq, ckpt_seq, columns)

    def _checkpoint(self, run_id: str, state: RunState) -> str:
        """The engine checkpoint text of ``state``, its chunks written first."""
        sink: dict[str, str] = {}
        text = codec.checkpoint_text(state, sink)
        self.chunkio.put(run_id, sink)
        return text

    def _append_plain(self, lease: Lease, rows: list[dict[str, Any]], now: int) -> None:
        """The plain path: the fenced insert, one statement in a transaction of its own."""
        fence = {"owner": lease.owner, "now_ms": now}
        if len(rows) == 1:
            n = self.driver.write_one(self.q["append_event"], {**rows[0], **fence})
        else:
            n = self.driver.write_one(self.q["append_events"], {**_columns(rows), **fence})
        if not n:
            detail = "the seq was taken" if n is None else "fence check failed"
            raise LeaseLostError(
                lease.run_id, lease.epoch, f"{detail} appending seq {rows[0]['seq']}"
            )

    def _append_fenced_one(
        self,
        lease: Lease,
        events: Sequence[Event],
        rows: list[dict[str, Any]],
        fence: dict[str, Any],
    ) -> None:
        """The fenced-row path as one statement (``append_fenced``); on a refusal, whether a
        performed key or the fence refused it is read back (no round trip when it lands)."""
        from ..history import EffectIntended

        intends = [e.payload.key for e in events if isinstance(e.payload, EffectIntended)]
        n = self.driver.write_one(
            self.q["append_fenced"], {**fence, **_columns(rows), "intends": intends}
        )
        if n is None:
            raise LeaseLostError(
                lease.run_id, lease.epoch, f"the seq was taken appending seq {events[0].seq}"
            )
        if n == 0:
            with self.driver.read() as cur:
                for e in events:
                    if isinstance(e.payload, EffectIntended):
                        self._refuse_performed(cur, e, e.payload.key)
            raise LeaseLostError(
                lease.run_id, lease.epoch, f"fence check failed appending seq {events[0].seq}"
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
        from ..history import EffectIntended

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
        if not isinstance(row[0], int):  # text in SQLite's number column: never a ValueError
            raise damaged_column(lease.run_id, "checkpoint_seq", repr(row[0])[:40])
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
        fetch = self.chunkio.fetcher(cur, e.run_id, int(row[1]))
        prev = codec.completion(e.run_id, e.step_id or "", row[0], int(row[1]), fetch)
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
            attention=state.attention or None,
            checkpoint=None,
        )
        with self.driver.transaction() as cur:
            if self.driver.fetchone(cur, self.q["fence_row"], fence) is None:
                raise LeaseLostError(lease.run_id, lease.epoch, "restoring the finished status")


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
