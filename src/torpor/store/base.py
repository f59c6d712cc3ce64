"""The storage boundary: what the engine asks of a store (:class:`Store`), what a database
dialect provides (:class:`Driver`), and the records they exchange.

Layering (after procrastinate's connector/manager split): a *driver* runs named queries and holds
transactions on one database engine; :class:`~torpor.store.sqlstore.SQLStore` implements every
domain operation of :class:`Store` once for all backends. Queries live whole in
``sql/<dialect>.sql`` as ``-- name:`` blocks, the same names in every dialect
(:func:`load_queries`).

Fencing (DESIGN.md G3), as the store enforces it:

- an append inserts its events only while the run row names the writer's ``(owner, epoch)``
  with an unexpired lease — a read of the row inside the insert statement, no write to it — and
  ``(run_id, seq)`` is the events' primary key, so of two writers that folded the same state
  only the first lands (a twin of a lease, or a holder racing the one that took over);
- every write to the run row (status columns, checkpoint, a lease renewal or release) compares
  the epoch;
- acquiring a lease bumps the epoch, which fences off every earlier holder at once.

A write that is fenced off changes nothing and raises
:class:`~torpor.errors.LeaseLostError`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

from ..errors import CorruptRecordError, SchemaVersionError, StoreError

if TYPE_CHECKING:
    from ..history import Event, RunStarted, RunState
from ..urls import display_url
from .domain import EpisodeRows, EpisodeVectorRows, MaintenanceOps, QueueRows, ScheduleRows
from .ledger_rows import LedgerRows
from .stream_rows import StreamRows

_NAME_RE = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.M)


_INCLUDE_RE = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def load_queries(dialect: str, folder: Path | None = None) -> dict[str, str]:
    """Parse ``<folder>/<dialect>.sql`` (by default ``sql/`` beside this module) into
    ``{name: sql}``. A block may name a fragment that others include as ``{{ name }}`` (an
    expression several queries share, written once); a fragment may include another."""
    folder = folder or Path(__file__).parent / "sql"
    text = (folder / f"{dialect}.sql").read_text()
    parts = _NAME_RE.split(text)
    blocks = {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}

    def expand(sql: str, depth: int = 0) -> str:
        if depth > 4:
            raise StoreError(f"{dialect}.sql: fragments included more than 4 deep: {sql[:60]!r}")
        return _INCLUDE_RE.sub(lambda m: expand(blocks[m.group(1)], depth + 1), sql)

    return {n: expand(sql) for n, sql in blocks.items()}


def check_schema(found: int | None, known: int, url: str) -> None:
    """Refuse a database written by a newer schema (SchemaVersionError; nothing is changed)."""
    if found is not None and found > known:
        raise SchemaVersionError(
            f"database {display_url(url)} has schema version {found}, newer than this "
            f"torpor's {known}; "
            "upgrade torpor to open it (nothing was changed)"
        )


_P = ParamSpec("_P")
_R = TypeVar("_R")


def read_retried(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """A read of the store, tried once more when the connection failed under it: a plain
    :class:`~torpor.errors.StoreError` is the driver's wrapping of a lost connection — e.g. a
    PostgreSQL backend terminated while its connection sat idle in the pool, whose termination
    notice was still in flight when the pool's liveness probe looked (the next checkout takes a
    fresh connection). Reads change nothing, so trying again is safe; a second failure, and
    every more specific error (a run not found, a corrupt row), is raised as it is."""

    def read(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(*args, **kwargs)
        except StoreError as exc:
            if type(exc) is not StoreError:
                raise
            return fn(*args, **kwargs)

    read.__name__, read.__qualname__, read.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    read.__wrapped__ = fn  # type: ignore[attr-defined]
    return read


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Lease:
    """Ownership of a run: ``epoch`` is the fencing token (only grows). ``expires_at_ms`` is
    the expiry as the holder counts it (store clock, epoch ms): a holder never appends past it
    without renewing."""

    run_id: str
    owner: str
    epoch: int
    expires_at_ms: int
    ttl_ms: int
    #: The owner whose unreleased lease this one took over (None when it had been released):
    #: the run's last execution died, or was paused and is now fenced off.
    taken_from: str | None = None
    #: This process's monotonic clock (seconds) just before the statement that took or renewed
    #: the lease: the holder counts what is left of the ttl from here, by a clock that no wall
    #: clock step moves and that keeps counting while the process is paused (see
    #: :func:`torpor.engine.lease.before_effect`).
    renewed_mono: float = field(default_factory=time.monotonic, compare=False)


@dataclass(frozen=True)
class RunRecord:
    """The run row: what listing and dispatch see without folding the history. ``last_seq``
    and ``updated_at_ms`` are those of the run's latest event (or row change)."""

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
    #: Why the run cannot proceed, when it is not finished and cannot (a version no worker
    #: has, a replay that diverged, a step that crashes its process); None otherwise.
    attention: str | None = None
    #: Appends the store retried or read back after losing its connection around a commit.
    infra_retries: int = 0


def run_record(row: Sequence[Any]) -> RunRecord:
    """The :class:`RunRecord` of a ``get_run``/``list_runs`` row, whose last column names a
    number column of the run row holding something else (``'column=value'``; SQLite stores any
    value in any column, so a hand edit such as ``not_before_ms = 'soon'`` is possible) or is
    NULL. CorruptRecordError (one line naming the run and the column) for a damaged row (G10:
    a damaged row is named, never a TypeError far from it)."""
    *cols, damage = row
    if damage is not None:
        column, _, value = str(damage).partition("=")
        raise damaged_column(str(cols[0]), column, value)
    return RunRecord(*cols)


def damaged_column(run_id: str, column: str, value: str) -> CorruptRecordError:
    """The one-line error for run ``run_id``'s row holding ``value`` (as SQL quotes it) in
    its number column ``column``."""
    return CorruptRecordError(
        f"run {run_id!r}: column {column} of its row holds {value}, not a number: the row is "
        "damaged (edited by hand?); set it right or delete the run (torpor doctor lists such "
        "rows)",
        run_id=run_id,
    )


@dataclass(frozen=True)
class Dispatch:
    """How a new run is dispatched: its ``queue`` (None: none, never limited), its
    concurrency ``key`` within the queue (one customer, one repository), its ``priority``
    (higher is claimed first; default 0) and a delayed start ``not_before_ms`` (epoch ms of the
    store's clock; a run is never claimed before it)."""

    queue: str | None = None
    key: str | None = None
    priority: int = 0
    not_before_ms: int | None = None


@dataclass(frozen=True)
class RunCount:
    """How many runs have this status, outcome and needs-attention flag."""

    status: str
    outcome: str | None
    attention: bool
    count: int


@dataclass(frozen=True)
class RunStorage:
    """What one run occupies in the database, as stored: its events (how many, and the bytes
    of their payloads), its engine checkpoint, and its inbox messages (consumed or not); the
    chunks its large records are stored in (:mod:`torpor.store.chunks`; their text's bytes, a
    chunk shared with other records or runs counted once for this run). ``artifact_bytes``:
    the artifacts it refers to, in the artifact store, not here."""

    events: int
    history_bytes: int
    checkpoint_bytes: int
    inbox_messages: int
    inbox_bytes: int
    chunk_bytes: int = 0
    artifact_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        """Bytes in the database (artifacts are not)."""
        return self.history_bytes + self.checkpoint_bytes + self.inbox_bytes + self.chunk_bytes


@dataclass(frozen=True)
class InboxMessage:
    """A message to a run from outside its lease holder. ``body`` is JSON data; ``at_ms`` is
    when it arrived (the store's clock at posting)."""

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


# --------------------------------------------------------------------------- constants

#: Room left in an event for the fields around an inbox message's body (its name, ids): a
#: message is refused at ``post_inbox`` above ``MAX_PAYLOAD_BYTES`` minus this.
INBOX_HEADROOM_BYTES = 4096

#: Events after which the engine checkpoint is rewritten: the meaningful boundaries a
#: replacement worker must understand (an artifact created, an effect requested or settled by a
#: verdict, an approval granted or consumed, a wait begun or ended, a user checkpoint, the
#: outcome). An effect's plain observation is not one: it is a step's completion, and the
#: checkpoint written at its intent already answers "what effects may have occurred".
CHECKPOINT_EVENTS = frozenset(
    {
        "artifact_created",
        "effect_intended",
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

#: Inbox message kinds that settle a finished ``unresolved``/``blocked`` run and reopen it.
REOPENING_KINDS = frozenset({"resolve", "reopen"})


# --------------------------------------------------------------------------- protocols


class ChildRows(Protocol):
    """The parent/child columns of runs (:mod:`.children`; issue 37)."""

    def run_parent(self, run_id: str) -> str | None:
        """The run that started ``run_id`` as its child, or None (also for an unknown run)."""
        ...

    def child_runs(self, parent: str, *, limit: int = 10_000) -> list[RunRecord]:
        """The child runs of ``parent``, oldest first (at most ``limit``)."""
        ...

    def await_children(self, parent: str, children: list[str], need: int) -> int:
        """Keep on ``parent``'s row how many more final outcomes of ``children`` its open
        wait needs before a child's outcome wakes it; return that (0 or less: enough now)."""
        ...


class ForkRows(Protocol):
    """A fork's row and copied history (:mod:`.forks`; :mod:`torpor.forks` makes forks)."""

    def create_fork(
        self, run_id: str, origin: str, at_seq: int, events: Sequence[Event], state: RunState
    ) -> bool:
        """Create run ``run_id`` as a fork of ``origin`` at its seq ``at_seq`` with the history
        ``events`` (the origin's 1..``at_seq``, then its ``run_forked``), folded by the caller
        into ``state`` (its checkpoint), in one transaction; False when ``run_id`` exists
        (nothing written); RunNotFoundError for an unknown ``origin``."""
        ...

    def fork_origin(self, run_id: str) -> tuple[str, int] | None:
        """``(origin, seq copied up to)`` of a fork; None for a run that is not one."""
        ...

    def run_forks(self, origin: str, *, limit: int = 1000) -> list[RunRecord]:
        """The forks of ``origin``, oldest first (at most ``limit``)."""
        ...


class Driver(Protocol):
    """What a dialect provides: named queries and transactions on one database engine."""

    dialect: str
    #: Something whoever opened the store should be told (SQLite: a read-only file opened
    #: immutable, whose other writers it cannot see), or None.
    note: str | None

    def transaction(self) -> AbstractContextManager[Any]:
        """A write transaction (SQLite: ``BEGIN IMMEDIATE``); yields a cursor-like handle."""
        ...

    def read(self) -> AbstractContextManager[Any]:
        """A read-only snapshot for several queries."""
        ...

    def execute(self, cur: Any, sql: str, params: dict[str, Any]) -> int:
        """Run one statement; return the affected row count."""
        ...

    def executemany(self, cur: Any, sql: str, rows: Sequence[dict[str, Any]]) -> None:
        """Run one statement once per parameter set of ``rows`` (one prepared statement)."""
        ...

    def fetchone(self, cur: Any, sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None: ...

    def fetchall(self, cur: Any, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]: ...

    def write_one(self, sql: str, params: dict[str, Any]) -> int | None:
        """Run one statement as a transaction of its own, durable when this returns; return
        its row count, or None when it violated a unique constraint (nothing written). A lost
        connection raises StoreError: the statement may or may not have committed."""
        ...

    def fetch_one(self, sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """Run one statement as a transaction of its own and return its first row: committed
        when this returns, with no round trip to the caller while it holds its locks."""
        ...

    def unique_violation(self, exc: BaseException) -> str | None:
        """The violated unique index or constraint when ``exc`` is a unique violation."""
        ...

    def reclaim_pages(self, *, convert: bool = False) -> str:
        """Give pages freed by deletions back to the file system (SQLite ``PRAGMA
        incremental_vacuum``; ``convert``: one full ``VACUUM`` to switch an older file);
        returns what was done, in one line (a database server: nothing to do)."""
        ...

    def close(self) -> None: ...


class Store(
    QueueRows,
    ScheduleRows,
    EpisodeRows,
    EpisodeVectorRows,
    LedgerRows,
    MaintenanceOps,
    ChildRows,
    StreamRows,
    ForkRows,
    Protocol,
):
    """The domain operations the engine, the client, workers and every layer above use — the
    only door to the database (nothing outside :mod:`torpor.store` runs SQL, names a driver or
    the concrete class); one implementation, :class:`~torpor.store.sqlstore.SQLStore`, over
    every :class:`Driver`. Besides a run's row, lease, history and inbox (below), the rows of
    queues, schedules, episodes, retention and maintenance (:mod:`.domain`).

    Times are epoch milliseconds of the store's clock (``now_ms``); PostgreSQL judges lease
    expiry and dispatch by the database clock.
    """

    url: str
    clock: Callable[[], float]
    checkpoint_every: int

    @property
    def note(self) -> str | None:
        """Something whoever opened the store should be told (:attr:`Driver.note`), or None."""
        ...

    def now_ms(self) -> int: ...

    def close(self) -> None: ...

    # runs
    def create_run(
        self,
        run_id: str,
        started: RunStarted,
        dispatch: Dispatch | None = None,
        *,
        scope: str | None = None,
        task_type: str | None = None,
    ) -> bool:
        """Create a run with its ``run_started`` event; False if it existed (idempotent)."""
        ...

    def get_run(self, run_id: str) -> RunRecord:
        """The run row; RunNotFoundError."""
        ...

    def store_id(self) -> str:
        """The store's identity: 32 hex digits created once with its schema (migration 0014)."""
        ...

    @property
    def location(self) -> str:
        """Where the store is, as this host names it (its URL without a password; SQLite: the
        file's resolved path): the key of this host's high-water mark (:mod:`torpor.marks`)."""
        ...

    def trace_context(self, run_id: str, candidate: str | None = None) -> str | None:
        """The run's trace context, set to ``candidate`` first if unset (first writer wins)."""
        ...

    def list_runs(
        self,
        *,
        status: str | None = None,
        outcome: str | None = None,
        limit: int = 100,
        workflow: str | None = None,
        attention: bool | None = None,
    ) -> list[RunRecord]: ...

    def count_runs(self, *, workflow: str | None = None) -> list[RunCount]: ...

    def damaged_runs(self, *, limit: int = 100) -> list[tuple[str, str]]:
        """Up to ``limit`` runs whose row has a number column holding something else, as
        ``(run id, 'column=value')`` (always none on PostgreSQL, whose columns are typed)."""
        ...

    def run_storage(self, run_id: str) -> RunStorage: ...

    def runnable_runs(self, limit: int = 100) -> list[str]: ...

    # leases
    def acquire_lease(
        self,
        run_id: str,
        owner: str,
        ttl_s: float,
        *,
        take_from: tuple[str, int] | None = None,
        starts: bool = True,
    ) -> Lease:
        """Take the run's lease (epoch + 1) when it is free, expired, ours, or the one named
        by ``take_from`` (an owner proven dead, with its epoch); LeaseHeldError otherwise.
        ``starts``: mark the run started (it holds a slot of its queue)."""
        ...

    def claim_next(
        self,
        owner: str,
        ttl_s: float,
        *,
        accept: Mapping[str, Sequence[str]] | None = None,
        exclude: Sequence[str] = (),
    ) -> Lease | None: ...

    def renew_lease(self, lease: Lease) -> Lease: ...

    def note_infra(self, run_id: str) -> None:
        """Count one infrastructure incident on the run's row (``infra_retries``; ``show`` and
        the console print it): an append read back, or lease renewals that failed while the
        store's connection was lost and later succeeded. Best effort: never raises."""
        ...

    def check_database_file(self) -> None:
        """Raise StoreFileChangedError when the database file this store opened was deleted
        or replaced since (SQLite: its device and inode); a no-op for a database server."""
        ...

    def check_sound(self) -> None:
        """Before deleting or rewriting anything: SQLite's ``PRAGMA quick_check`` of the file
        (DamagedStoreError on any finding, the store then marked damaged:
        :mod:`torpor.store.damage`); a no-op for a database server."""
        ...

    def unrunnable_versions(
        self, accept: Mapping[str, Sequence[str]], limit: int = 100
    ) -> list[tuple[str, str]]:
        """``(run id, version)`` of runnable runs of the workflows in ``accept`` recorded under a
        version not in it, not yet marked as such (a worker names them; it cannot run them)."""
        ...

    def held_on_host(self, host: str, limit: int = 100) -> list[tuple[str, str, int, str, str]]:
        """``(run id, owner, epoch, workflow, version)`` of unfinished runs leased by an owner
        on ``host``."""
        ...

    def release_lease(self, lease: Lease) -> None: ...

    def next_wake_at_ms(
        self, *, accept: Mapping[str, Sequence[str]] | None = None
    ) -> int | None: ...

    def wait_for_wake(self, timeout_s: float, stop: Callable[[], bool] = ...) -> bool: ...

    # history
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
        """Append ``events`` — already folded into ``state`` by the caller — atomically under
        the lease's fence; see :class:`~torpor.store.sqlstore.SQLStore`."""
        ...

    def restore_status(self, lease: Lease, state: RunState) -> None: ...

    def load(self, run_id: str) -> RunState:
        """Latest checkpoint + the events after it (G8)."""
        ...

    def read_events(
        self, run_id: str, after_seq: int = 0, limit: int = 1_000_000
    ) -> list[Event]: ...

    def iter_events(self, run_id: str, page: int = 1000) -> Iterator[Event]: ...

    def completions_after(self, run_id: str, after_seq: int) -> dict[str, Completion]: ...

    def step_completion(self, run_id: str, step_id: str) -> Completion | None: ...

    def step_events(self, run_id: str, step_id: str) -> list[Event]: ...

    # inbox
    def post_inbox(
        self, run_id: str, kind: str, body: dict[str, Any], message_id: str | None = None
    ) -> bool: ...

    def pending_inbox(self, run_id: str) -> list[InboxMessage]: ...

    def count_pending_inbox(self, run_id: str) -> int: ...


__all__ = [
    "CHECKPOINT_EVENTS",
    "INBOX_HEADROOM_BYTES",
    "REOPENING_KINDS",
    "ChildRows",
    "Completion",
    "Dispatch",
    "Driver",
    "ForkRows",
    "InboxMessage",
    "Lease",
    "RunRecord",
    "Store",
    "check_schema",
    "load_queries",
]
