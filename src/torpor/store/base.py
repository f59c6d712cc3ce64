"""The storage boundary: one protocol, one set of domain operations, dialects as drivers.

Layering (after procrastinate's connector/manager split): a *driver* knows how to run a named
query and hold a transaction on one database engine; :class:`SQLStore` owns every domain
operation — idempotent start, leases with fencing, fenced appends, checkpoints, the inbox — and
is written once for all backends. Queries live in ``sql/<dialect>.sql`` as ``-- name:`` blocks,
the same names in every dialect.

Fencing (DESIGN.md G3): every append runs, inside its transaction, one conditional ``UPDATE`` of
the run row that only matches while the writer's ``(owner, epoch)`` is current, the lease is
unexpired by the store's clock, and ``last_seq`` is what the writer last saw. If it matches no
row, nothing is written and :class:`~torpor.errors.LeaseLostError` is raised.
"""

from __future__ import annotations

import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from .. import faults, serde
from ..errors import (
    CorruptRecordError,
    InboxError,
    InboxPendingError,
    LeaseHeldError,
    LeaseLostError,
    PayloadError,
    RunNotFoundError,
    SchemaVersionError,
    StoreError,
    TransitionError,
)
from ..history import (
    EVENT_SCHEMA_VERSION,
    EVENT_TYPES,
    Event,
    Payload,
    RunStarted,
    RunState,
    apply,
    starts_step,
)

_NAME_RE = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.M)

#: Stands for "no default": a required field is always written.
_REQUIRED = object()
_FIELD_PLANS: dict[type, tuple[tuple[str, Any], ...]] = {}


def _field_plan(model: type[Payload]) -> tuple[tuple[str, Any], ...]:
    """``(field name, default)`` of a payload model, in declaration order (cached)."""
    plan = _FIELD_PLANS.get(model)
    if plan is None:
        out = []
        for name, f in model.model_fields.items():
            if f.is_required():
                default: Any = _REQUIRED
            elif f.default_factory is not None:
                default = f.default_factory()  # type: ignore[call-arg]
            else:
                default = f.default
            out.append((name, default))
        plan = _FIELD_PLANS[model] = tuple(out)
    return plan


def _code(sql: str) -> str:
    """A named query without its comment lines and final ``;``: to be put inside another."""
    lines = [ln for ln in sql.splitlines() if not ln.lstrip().startswith("--")]
    return "\n".join(lines).strip().rstrip(";")


def load_queries(dialect: str) -> dict[str, str]:
    """Parse ``sql/<dialect>.sql`` into ``{name: sql}``."""
    text = (Path(__file__).parent / "sql" / f"{dialect}.sql").read_text()
    parts = _NAME_RE.split(text)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}


def _proc_identity(pid: int | str = "self") -> tuple[str, str, str] | None:
    """(boot id, pid-namespace inode, process start time) on Linux, else None."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
        ns = str(os.stat(f"/proc/{pid}/ns/pid").st_ino) if pid == "self" else ""
        stat = Path(f"/proc/{pid}/stat").read_text()
        start = stat.rsplit(")", 1)[1].split()[19]  # field 22: starttime (clock ticks)
    except (OSError, IndexError):
        return None
    return boot, ns, start


def new_owner_id() -> str:
    """A lease owner id, unique per process instance: ``host:pid:random~boot~pidns~start``.

    The suffix (Linux) lets :func:`owner_is_dead` tell a dead local process from a live one in
    another PID namespace with the same hostname, and from a later process reusing the pid.
    """
    ident = _proc_identity()
    suffix = "~" + "~".join(ident) if ident else ""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}{suffix}"


def owner_is_dead(owner: str) -> bool:
    """True when ``owner`` names a process of *this* machine, boot and PID namespace that no
    longer exists (or whose pid now belongs to a later process).

    Lets a local resume take over right after ``kill -9`` instead of waiting out the lease.
    Anything it cannot prove dead — a remote owner, another container or PID namespace with the
    same hostname, an owner id without the identity suffix, a live process — is left to lease
    expiry, judged by the store's clock.
    """
    try:
        host, pid_s, rest = owner.split(":", 2)
        pid = int(pid_s)
        _, boot, ns, start = rest.split("~")
    except ValueError:
        return False
    mine = _proc_identity()
    if mine is None or host != socket.gethostname() or pid == os.getpid():
        return False
    if (boot, ns) != mine[:2]:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    # A zombie (killed, not yet reaped) is dead; so is the owner if its pid was reused.
    return stat[0] == "Z" or stat[19] != start


@dataclass(frozen=True)
class Lease:
    """Ownership of a run: ``epoch`` is the fencing token (only grows)."""

    run_id: str
    owner: str
    epoch: int
    expires_at_ms: int
    ttl_ms: int


@dataclass(frozen=True)
class RunRecord:
    """The run row: what listing and dispatch see without folding the history."""

    run_id: str
    workflow: str
    version: str
    status: str
    outcome: str | None
    created_at_ms: int
    updated_at_ms: int
    wake_at_ms: int | None
    lease_owner: str | None
    lease_epoch: int
    lease_expires_at_ms: int
    last_seq: int
    checkpoint_seq: int


@dataclass(frozen=True)
class InboxMessage:
    """A message to a run from outside its lease holder. ``body`` is JSON data."""

    message_id: str
    kind: str
    body: dict[str, Any]
    at_ms: int


@dataclass(frozen=True)
class Completion:
    """A recorded step completion, as replay needs it."""

    step_id: str
    result: Any
    policy: str | None
    input_hash: str | None
    seq: int


class Driver(Protocol):
    """What a dialect provides: named queries and transactions on one database engine."""

    dialect: str

    def transaction(self) -> AbstractContextManager[Any]:
        """A write transaction (SQLite: ``BEGIN IMMEDIATE``); yields a cursor-like handle."""
        ...

    def execute(self, cur: Any, sql: str, params: dict[str, Any]) -> int:
        """Run one statement; return the affected row count."""
        ...

    def executemany(self, cur: Any, sql: str, rows: Sequence[dict[str, Any]]) -> None: ...

    def append_plain(
        self, fence_sql: str, fence: dict[str, Any], insert_sql: str, rows: Sequence[dict[str, Any]]
    ) -> tuple[Any, ...] | None:
        """One write transaction: ``fence_sql`` (returns one row, or none when fenced off:
        then nothing is written and None is returned), then ``insert_sql`` for each row."""
        ...

    def execute_one(self, sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """Run one statement as a transaction of its own (committed durably when it returns);
        return its first row."""
        ...

    def fetchone(self, cur: Any, sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None: ...

    def fetchall(self, cur: Any, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]: ...

    def read(self) -> AbstractContextManager[Any]:
        """A read-only snapshot for several queries."""
        ...

    def is_unique_violation(self, exc: BaseException) -> bool: ...

    def close(self) -> None: ...


#: Room left in an event for the fields around an inbox message's body (its name, ids): a
#: message is refused at ``post_inbox`` above ``MAX_PAYLOAD_BYTES`` minus this.
INBOX_HEADROOM_BYTES = 4096

#: Events of these types are boundaries after which the engine checkpoint is rewritten.
CHECKPOINT_EVENTS = frozenset(
    {
        "artifact_created",
        "effect_intended",
        "effect_observed",
        "effect_reconciled",
        "effect_failed",
        "approval_decided",
        "approval_consumed",
        "wait_started",
        "wait_completed",
        "checkpoint_saved",
        "run_finished",
        "run_reopened",
        "version_accepted",
    }
)


class SQLStore:
    """Domain operations over a :class:`Driver`. Thread-safe when the driver is.

    ``checkpoint_every`` bounds how many events may follow the latest engine checkpoint: besides
    the meaningful boundaries in :data:`CHECKPOINT_EVENTS`, the checkpoint is rewritten whenever
    the tail would exceed it, so loading a run never reads more than that many events (G8).
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
        #: run id -> (lease epoch, seq, checkpoint seq, (status, outcome, wake_at_ms, version))
        #: after this store's latest append to the run: lets the next append under the same
        #: lease decide on the checkpoint up front, and leave the run row's status columns
        #: alone when they do not change (the common case: a step of a running run).
        self._ckpt_seqs: dict[str, tuple[int, int, int, tuple[Any, ...]]] = {}
        self._append_sqls: dict[tuple[str, bool, int], str] = {}

    # ----------------------------------------------------------------- helpers

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

    # ----------------------------------------------------------------- encoding

    @staticmethod
    def encode(event: Event) -> dict[str, Any]:
        """The row of one event. Raises PayloadError when the payload is too large or not
        JSON data.

        Each field goes through :func:`serde.to_jsonable`, the same rule as every recorded
        value: bytes, sets, non-string keys, NaN or lone surrogates are refused with their path
        instead of being silently converted (pydantic's JSON mode would turn NaN into null and
        bytes into text, so the history would no longer say what the run saw).

        Fields equal to their default are left out of the stored JSON (decoding fills them back
        in from the same model), which keeps the history compact: a trivial step's one event
        carries ``{"attempt":1,"policy":"read","result":1,"step_id":"s1"}`` instead of every
        field spelled out.
        """
        p = event.payload
        values = p.__dict__
        try:
            data = {}
            for name, default in _field_plan(type(p)):
                v = values[name]
                if v is default or (type(v) is type(default) and v == default):
                    continue
                kind = type(v)
                if kind is int or kind is bool or (kind is str and v.isascii()):
                    data[name] = v  # already JSON data (what to_jsonable would return)
                else:
                    data[name] = serde.to_jsonable(v, f"{event.type}.{name}")
            text = serde.dumps(data)
        except (serde.NotSerializable, ValueError, TypeError) as exc:
            raise PayloadError(
                event.run_id, event.step_id, f"{event.type} payload is not serializable: {exc}"
            ) from None
        size = len(text) if text.isascii() else len(text.encode())
        if size > serde.MAX_PAYLOAD_BYTES:
            raise PayloadError(
                event.run_id,
                event.step_id,
                f"{event.type} payload is {size} bytes, over the "
                f"{serde.MAX_PAYLOAD_BYTES}-byte limit; store large values as an artifact",
            )
        return {
            "run_id": event.run_id,
            "seq": event.seq,
            "type": event.type,
            "step_id": values.get("step_id"),
            "epoch": event.epoch,
            "at_ms": event.at_ms,
            "v": EVENT_SCHEMA_VERSION,
            "payload": text,
        }

    @staticmethod
    def decode(run_id: str, row: tuple[Any, ...]) -> Event:
        """An event from ``(seq, type, epoch, at_ms, v, payload)``; CorruptRecordError if bad.

        Whatever is wrong with the row (an unknown or newer schema version, an unknown type,
        a payload that is not JSON or does not match its type, bad column types), the error
        names the run and the seq; nothing is repaired or rewritten.
        """
        seq, etype, epoch, at_ms, v, payload = row

        def corrupt(problem: str) -> CorruptRecordError:
            return CorruptRecordError(
                f"run {run_id!r} seq {seq}: {problem}", run_id=run_id, seq=seq
            )

        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise corrupt(f"unknown event schema version {v!r}")
        if v > EVENT_SCHEMA_VERSION:
            raise corrupt(
                f"event schema version {v} is newer than this torpor understands "
                f"({EVENT_SCHEMA_VERSION}); upgrade torpor (nothing was changed)"
            )
        model = EVENT_TYPES.get(etype) if isinstance(etype, str) else None
        if model is None:
            raise corrupt(f"unknown event type {etype!r}")
        try:
            data = serde.loads(payload)
        except (ValueError, TypeError) as exc:
            raise corrupt(f"corrupt {etype} payload: not JSON ({exc})") from exc
        try:
            body = model.model_validate(data)
            return Event(run_id=run_id, seq=seq, type=etype, payload=body, at_ms=at_ms, epoch=epoch)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"]) or "payload"
            raise corrupt(f"corrupt {etype} row: {loc}: {err['msg']}") from exc

    # ----------------------------------------------------------------- runs

    def create_run(self, run_id: str, started: RunStarted) -> bool:
        """Create a run with its ``run_started`` event. Idempotent: False if it existed."""
        now = self.now_ms()
        ev = Event(run_id=run_id, seq=1, type="run_started", payload=started, at_ms=now, epoch=0)
        row = self.encode(ev)
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

    def acquire_lease(self, run_id: str, owner: str, ttl_s: float) -> Lease:
        """Take the run's lease, bumping its epoch.

        Succeeds when the lease is free, expired (store clock), already ours, or held by a
        process on this host that is gone (see :func:`owner_is_dead`). Raises LeaseHeldError
        otherwise and RunNotFoundError for an unknown run.
        """
        ttl_ms = int(ttl_s * 1000)
        rec = self.get_run(run_id)
        stale_owner, stale_epoch = None, None
        if rec.lease_owner and rec.lease_owner != owner and owner_is_dead(rec.lease_owner):
            stale_owner, stale_epoch = rec.lease_owner, rec.lease_epoch
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
                ),
            )
        if row is None:
            rec = self.get_run(run_id)
            raise LeaseHeldError(run_id, rec.lease_owner or "?", rec.lease_expires_at_ms)
        return Lease(run_id, owner, int(row[0]), int(row[1]), ttl_ms)

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
        with self._lease_transaction() as cur:
            row = self.driver.fetchone(
                cur,
                self.q["claim_next"],
                self._p(
                    owner=owner,
                    ttl_ms=ttl_ms,
                    accept=_accept_json(accept),
                    exclude=serde.dumps(list(exclude)),
                ),
            )
        if row is None:
            return None
        return Lease(str(row[0]), owner, int(row[1]), int(row[2]), ttl_ms)

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

        SQLite has no notifications: this sleeps for the timeout (a short poll). PostgreSQL
        overrides it with LISTEN/NOTIFY. Returns True when woken by a notification.
        """
        end = time.monotonic() + timeout_s
        while not stop() and time.monotonic() < end:
            time.sleep(min(0.01, max(0.0, end - time.monotonic())))
        return False

    def renew_lease(self, lease: Lease) -> Lease:
        """Extend the lease by its ttl. Raises LeaseLostError if it was lost or expired."""
        with self._lease_transaction() as cur:
            n = self.driver.execute(
                cur,
                self.q["renew_lease"],
                self._p(
                    run_id=lease.run_id, owner=lease.owner, epoch=lease.epoch, ttl_ms=lease.ttl_ms
                ),
            )
        if n == 0:
            raise LeaseLostError(lease.run_id, lease.epoch, "renewal refused")
        return Lease(
            lease.run_id, lease.owner, lease.epoch, self.now_ms() + lease.ttl_ms, lease.ttl_ms
        )

    def release_lease(self, lease: Lease) -> None:
        """Give the lease up (no-op if it is no longer ours)."""
        self._ckpt_seqs.pop(lease.run_id, None)  # what this lease wrote is no longer needed
        with self._lease_transaction() as cur:
            self.driver.execute(
                cur,
                self.q["release_lease"],
                self._p(run_id=lease.run_id, owner=lease.owner, epoch=lease.epoch),
            )

    # ----------------------------------------------------------------- history

    def append(
        self,
        lease: Lease,
        events: Sequence[Event],
        state: RunState,
        *,
        wake_at_ms: int | None = None,
        consumed: Sequence[tuple[str, int]] = (),
        force_checkpoint: bool = False,
        guard_inbox: bool = False,
        proven_new: Collection[str] = (),
    ) -> None:
        """Append ``events`` (already applied to ``state``) in one fenced transaction.

        ``state`` is the run state *after* the events; it is written as the engine checkpoint
        when an event is a boundary (:data:`CHECKPOINT_EVENTS`) or the tail grew past
        ``checkpoint_every``. ``consumed`` marks inbox messages as moved into the history at the
        given seq. With ``guard_inbox`` the append is refused with :class:`InboxPendingError` if any
        inbox message is pending (an approval must not be consumed past a revocation). A run
        that goes to wait while messages are pending is woken at once. Raises LeaseLostError
        (nothing written) when fenced off, PayloadError when an event cannot be encoded.

        ``proven_new``: ids of steps the caller has proved, under this lease, to have no
        recorded completion (the executor's replay cache, or an indexed lookup, found none).
        Their ``step_started`` skips the indexed rerun probe (:meth:`_refuse_rerun`); every
        other ``step_started`` is probed. The fence makes the proof hold at commit: nothing
        can have been written to the run since the caller last appended.
        """
        if not events:
            return
        for attempt in range(3):
            try:
                faults.point("append.committing")
                self._append_once(
                    lease,
                    events,
                    state,
                    wake_at_ms=wake_at_ms,
                    consumed=consumed,
                    force_checkpoint=force_checkpoint,
                    guard_inbox=guard_inbox,
                    proven_new=proven_new,
                )
                faults.point("append.committed")
                return
            except (
                LeaseLostError,
                InboxPendingError,
                TransitionError,
                PayloadError,
                CorruptRecordError,  # a bad stored row is not an ambiguous commit
            ):
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
        state: RunState,
        *,
        wake_at_ms: int | None = None,
        consumed: Sequence[tuple[str, int]] = (),
        force_checkpoint: bool = False,
        guard_inbox: bool = False,
        proven_new: Collection[str] = (),
    ) -> None:
        """One attempt of :meth:`append` in one transaction.

        The fenced ``UPDATE`` of the run row returns the run's checkpoint seq, so deciding
        whether the tail has outgrown ``checkpoint_every`` costs no extra statement; a
        step start the caller proved new skips the rerun probe. A plain append — no inbox
        work, no probe, the checkpoint seq known from this lease's previous append — takes the
        short path: the fenced update carries the checkpoint when one is due, then the inserts
        (:meth:`Driver.append_plain`); where the dialect has ``append_fast`` (PostgreSQL) it is
        one statement in its own transaction: one round trip and one WAL flush.
        """
        if not events:
            return
        self._check_batch(lease, events, state)
        rows = [self.encode(e) for e in events]
        first = events[0].seq
        run_id = lease.run_id
        do_ckpt = force_checkpoint
        probe = []
        for e in events:
            et = e.type
            if et in CHECKPOINT_EVENTS:
                do_ckpt = True
            elif e.step_id not in proven_new and starts_step(e):
                probe.append(e)
        status = state.status.value
        columns = (
            status,
            state.outcome.value if state.outcome else None,
            wake_at_ms,
            state.version,
        )
        fence = self._p(
            run_id=run_id,
            owner=lease.owner,
            epoch=lease.epoch,
            prev_seq=first - 1,
            last_seq=state.seq,
        )
        row_columns = {
            "status": status,
            "outcome": columns[1],
            "wake_at_ms": wake_at_ms,
            "version": state.version,
        }
        known = self._ckpt_seqs.get(run_id)
        if (
            not probe
            and not consumed
            and not guard_inbox
            and status != "waiting"
            and known is not None
            and known[0] == lease.epoch
            and known[1] == first - 1
        ):
            do_ckpt = do_ckpt or state.seq - known[2] >= self.checkpoint_every
            # A running run's status columns as this lease last wrote them: left alone when
            # unchanged (a narrower update of the row, measurably cheaper on PostgreSQL),
            # written otherwise. (Others change these columns only for waiting or finished
            # runs: wake_run, reopen_run.)
            same = status == "running" and known[3] == columns
            fence["checkpoint"] = self._checkpoint_text(state) if do_ckpt else None
            if not same:
                fence.update(row_columns)
            self._ckpt_seqs.pop(run_id, None)  # until this append is known to have landed
            if "append_fast" in self.q:  # the dialect does it in one statement
                for i, r in enumerate(rows):
                    fence[f"seq{i}"] = r["seq"]
                    fence[f"type{i}"] = r["type"]
                    fence[f"step_id{i}"] = r["step_id"]
                    fence[f"at_ms{i}"] = r["at_ms"]
                    fence[f"v{i}"] = r["v"]
                    fence[f"payload{i}"] = r["payload"]
                sql = self._append_sql("append_fast", columns=not same, n=len(rows))
                row = self.driver.execute_one(sql, fence)
            else:
                sql = self._append_sql("fence_append", columns=not same)
                row = self.driver.append_plain(sql, fence, self.q["insert_event"], rows)
            if row is None:
                raise LeaseLostError(
                    run_id, lease.epoch, f"fence check failed appending seq {first}"
                )
            self._ckpt_seqs[run_id] = (lease.epoch, state.seq, int(row[0]), columns)
            return
        fence.update(row_columns)
        # A boundary event's checkpoint goes with the fenced update; one due because the tail
        # grew is known only from the checkpoint seq the update returns (save_checkpoint below).
        fence["checkpoint"] = self._checkpoint_text(state) if do_ckpt else None
        waiting = status == "waiting"
        self._ckpt_seqs.pop(run_id, None)
        with self.driver.transaction() as cur:
            row = self.driver.fetchone(cur, self._append_sql("fence_append", columns=True), fence)
            if row is None:
                raise LeaseLostError(
                    run_id, lease.epoch, f"fence check failed appending seq {first}"
                )
            ckpt_seq = int(row[0])
            if probe:
                # Checked event by event, so a rerun within one batch is seen too.
                for e, r in zip(events, rows, strict=True):
                    if any(e is x for x in probe):
                        self._refuse_rerun(cur, e)
                    self.driver.execute(cur, self.q["insert_event"], r)
            elif len(rows) == 1:
                self.driver.execute(cur, self.q["insert_event"], rows[0])
            else:
                self.driver.executemany(cur, self.q["insert_event"], rows)
            if not do_ckpt and state.seq - ckpt_seq >= self.checkpoint_every:
                ckpt_seq = state.seq
                self.driver.execute(
                    cur,
                    self.q["save_checkpoint"],
                    {
                        "run_id": run_id,
                        "checkpoint_seq": ckpt_seq,
                        "checkpoint": self._checkpoint_text(state),
                    },
                )
            for message_id, seq in consumed:
                self.driver.execute(
                    cur, self.q["consume_inbox"], {"message_id": message_id, "seq": seq}
                )
            if guard_inbox or waiting:
                row = self.driver.fetchone(cur, self.q["count_pending_inbox"], {"run_id": run_id})
                if row and int(row[0]):
                    if guard_inbox:
                        raise InboxPendingError(f"run {run_id!r} has inbox messages to apply")
                    self.driver.execute(cur, self.q["wake_run"], self._p(run_id=run_id))
                    self.driver.fetchone(cur, self.q["notify_wake"], {"run_id": run_id})
        self._ckpt_seqs[run_id] = (lease.epoch, state.seq, ckpt_seq, columns)

    def _append_sql(self, name: str, *, columns: bool, n: int = 0) -> str:
        """The query ``name`` (``fence_append`` or ``append_fast``) as run (cached): with the
        run row's status columns (``status_columns``) in its update or without them, and for
        ``append_fast`` with ``/* fence */`` and one VALUES row per event for ``n`` events."""
        key = (name, columns, n)
        sql = self._append_sqls.get(key)
        if sql is None:
            sql = _code(self.q[name]).replace("/* fence */", _code(self.q["fence_append"]))
            sql = sql.replace("/* columns */", _code(self.q["status_columns"]) if columns else "")
            values = ", ".join(
                f"(CAST(:seq{i} AS bigint), CAST(:type{i} AS text), CAST(:step_id{i} AS text), "
                f"CAST(:at_ms{i} AS bigint), CAST(:v{i} AS integer), CAST(:payload{i} AS text))"
                for i in range(n)
            )
            sql = self._append_sqls[key] = sql.replace("/* events */", values)
        return sql

    @staticmethod
    def _checkpoint_text(state: RunState) -> str:
        """The engine checkpoint as stored: the state's JSON without the fields that hold their
        defaults (loading validates it back to the same state). A run's checkpoint is
        rewritten often and, on PostgreSQL, copied with every update of its run row, so its
        size is paid per step: a running trivial run's is ~200 bytes instead of ~750."""
        return state.model_dump_json(exclude_defaults=True)

    @staticmethod
    def _check_batch(lease: Lease, events: Sequence[Event], state: RunState) -> None:
        """Cheap checks that ``events`` are what the caller folded into ``state``: this run,
        dense seqs ending at ``state.seq``, written under the lease's epoch. (The transitions
        themselves were checked by :func:`~torpor.history.apply` when the caller folded them;
        the store adds what the compact state cannot know, see :meth:`_refuse_rerun`.)"""
        first = events[0].seq
        for i, e in enumerate(events):
            if e.run_id != lease.run_id:
                raise TransitionError(
                    lease.run_id, e.seq, e.type, f"event belongs to run {e.run_id!r}"
                )
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

    def _refuse_rerun(self, cur: Any, e: Event) -> None:
        """G1/G4 beyond the compact state: a completed step never starts again (a compute
        step may, for a different input hash). Checked against the indexed history."""
        p = e.payload
        row = self.driver.fetchone(
            cur, self.q["step_completion"], {"run_id": e.run_id, "step_id": e.step_id}
        )
        if row is None:
            return
        prev = self._completion(e.run_id, e.step_id or "", row[0], int(row[1]))
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

    def read_events(self, run_id: str, after_seq: int = 0, limit: int = 1_000_000) -> list[Event]:
        """Events with ``seq > after_seq`` in order. Raises CorruptRecordError on a bad row."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(
                cur,
                self.q["events_after"],
                {"run_id": run_id, "after_seq": after_seq, "limit": limit},
            )
        return [self.decode(run_id, r) for r in rows]

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
            ckpt_seq, ckpt_text, last_seq = row[0], row[1], int(row[2])
            state = self._checkpoint_state(run_id, ckpt_seq, ckpt_text, last_seq)
            rows = self.driver.fetchall(
                cur,
                self.q["events_after"],
                {"run_id": run_id, "after_seq": state.seq if state else 0, "limit": 1 << 62},
            )
        if state is not None:
            try:
                return self._fold_rows(run_id, state, rows, last_seq)
            except TransitionError:
                pass  # the checkpoint disagrees with the history: refold from the start
            with self.driver.read() as cur:
                rows = self.driver.fetchall(
                    cur,
                    self.q["events_after"],
                    {"run_id": run_id, "after_seq": 0, "limit": 1 << 62},
                )
        try:
            return self._fold_rows(run_id, RunState(run_id=run_id), rows, last_seq)
        except TransitionError as exc:
            raise CorruptRecordError(
                f"run {run_id!r} seq {exc.seq}: the stored history is impossible: {exc.rule}",
                run_id=run_id,
                seq=exc.seq,
            ) from exc

    @staticmethod
    def _checkpoint_state(
        run_id: str, ckpt_seq: Any, ckpt_text: Any, last_seq: int
    ) -> RunState | None:
        """The engine checkpoint, or None when there is none or it cannot be trusted."""
        if not ckpt_text or not isinstance(ckpt_seq, int) or not 0 < ckpt_seq <= last_seq:
            return None
        try:
            state = RunState.model_validate_json(ckpt_text)
        except (ValidationError, ValueError, TypeError):
            return None
        if state.run_id != run_id or state.seq != ckpt_seq:
            return None
        return state

    def _fold_rows(
        self, run_id: str, state: RunState, rows: list[tuple[Any, ...]], last_seq: int
    ) -> RunState:
        for r in rows:
            apply(state, self.decode(run_id, r))
        if state.seq != last_seq:
            raise CorruptRecordError(
                f"run {run_id!r}: history ends at seq {state.seq} but the run row says {last_seq}",
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
        out: dict[str, Completion] = {}
        for step_id, payload, seq in rows:
            out[step_id] = self._completion(run_id, step_id, payload, seq)
        return out

    def step_completion(self, run_id: str, step_id: str) -> Completion | None:
        """The latest completion of one step (indexed lookup), or None."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(
                cur, self.q["step_completion"], {"run_id": run_id, "step_id": step_id}
            )
        if row is None:
            return None
        return self._completion(run_id, step_id, row[0], int(row[1]))

    def step_events(self, run_id: str, step_id: str) -> list[Event]:
        """Every event recorded for one step."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(
                cur, self.q["step_events"], {"run_id": run_id, "step_id": step_id}
            )
        return [self.decode(run_id, r) for r in rows]

    def _completion(self, run_id: str, step_id: str, payload: str, seq: int) -> Completion:
        try:
            data = serde.loads(payload)
            return Completion(
                step_id, data.get("result"), data.get("policy"), data.get("input_hash"), seq
            )
        except (ValueError, AttributeError, TypeError) as exc:
            raise CorruptRecordError(
                f"run {run_id!r} seq {seq}: corrupt step_completed payload of step {step_id!r}",
                run_id=run_id,
                seq=seq,
            ) from exc

    # ----------------------------------------------------------------- inbox

    def post_inbox(
        self, run_id: str, kind: str, body: dict[str, Any], message_id: str | None = None
    ) -> bool:
        """Queue a message for the run and wake it if it waits. False if ``message_id`` was
        already posted to this run (deduplicated forever); InboxError if it was posted to
        another run. A message in :data:`REOPENING_KINDS` also makes a finished ``unresolved``
        or ``blocked`` run runnable again, so workers pick the settled run up; if the message
        turns out not to apply, the executor writes the finished status back."""
        message_id = message_id or uuid.uuid4().hex
        try:
            text = serde.dumps(serde.to_jsonable(body))
        except serde.NotSerializable as exc:
            raise PayloadError(run_id, None, f"{kind} message is not serializable: {exc}") from None
        size = len(text.encode())
        if size > serde.MAX_PAYLOAD_BYTES - INBOX_HEADROOM_BYTES:
            # The event that records the message adds its own fields: leave room for them, or
            # a message accepted here could never be recorded.
            raise PayloadError(
                run_id,
                None,
                f"{kind} message is {size} bytes, over the "
                f"{serde.MAX_PAYLOAD_BYTES - INBOX_HEADROOM_BYTES}-byte limit for messages; "
                "send a reference (an artifact hash)",
            )
        with self.driver.transaction() as cur:
            # Lock the run row first (PostgreSQL: FOR UPDATE) so a message cannot slip past a
            # concurrent fenced append that is consuming an approval.
            if self.driver.fetchone(cur, self.q["lock_run"], {"run_id": run_id}) is None:
                raise RunNotFoundError(f"no run {run_id!r} in {self.url}")
            n = self.driver.execute(
                cur,
                self.q["insert_inbox"],
                self._p(
                    message_id=message_id,
                    run_id=run_id,
                    kind=kind,
                    body=text,
                ),
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

    def restore_status(self, lease: Lease, state: RunState) -> None:
        """Write the run row's status columns from ``state`` without appending (fenced): used
        when a reopening message did not apply and the run stays finished."""
        with self.driver.transaction() as cur:
            n = self.driver.execute(
                cur,
                self.q["fence_and_update"],
                self._p(
                    run_id=lease.run_id,
                    owner=lease.owner,
                    epoch=lease.epoch,
                    prev_seq=state.seq,
                    last_seq=state.seq,
                    status=state.status.value,
                    outcome=state.outcome.value if state.outcome else None,
                    wake_at_ms=None,
                    version=state.version,
                ),
            )
        if n == 0:
            raise LeaseLostError(lease.run_id, lease.epoch, "restoring the finished status")

    def pending_inbox(self, run_id: str) -> list[InboxMessage]:
        """Messages not yet moved into the history, oldest first."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self.q["pending_inbox"], {"run_id": run_id})
        out = []
        for mid, kind, body, at_ms in rows:
            try:
                data = serde.loads(body)
                if not isinstance(data, dict):
                    raise ValueError("not an object")
            except ValueError:
                # Never let one bad message block the run forever: deliver an empty body, which
                # the executor records as a warning naming the message (nothing is rewritten).
                data = {}
            out.append(InboxMessage(mid, kind, data, int(at_ms)))
        return out

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


#: Inbox message kinds that settle a finished ``unresolved``/``blocked`` run and reopen it.
REOPENING_KINDS = frozenset({"resolve", "reopen"})


def check_schema(found: int | None, known: int, url: str) -> None:
    """Refuse a database written by a newer schema (nothing is changed)."""
    if found is not None and found > known:
        raise SchemaVersionError(
            f"database {url} has schema version {found}, newer than this torpor's {known}; "
            "upgrade torpor to open it (nothing was changed)"
        )


__all__ = [
    "Completion",
    "Driver",
    "InboxMessage",
    "InboxPendingError",
    "Lease",
    "RunRecord",
    "SQLStore",
    "StoreError",
    "check_schema",
    "load_queries",
    "new_owner_id",
    "owner_is_dead",
]
