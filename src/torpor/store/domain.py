"""The rows of the store beyond a run's history: queues, schedules, episodes, retention and
maintenance — the records they exchange and the protocols :class:`~torpor.store.base.Store`
is made of (implemented once, over every driver, by the mixins :mod:`.queues`,
:mod:`.schedules`, :mod:`.episodes` and :mod:`.maintenance` of
:class:`~torpor.store.sqlstore.SQLStore`).

The store hands rows back as the database holds them, columns in the order each method
names: deciding what a row means — validating it (a damaged row is named by the layer that
reads it: :mod:`torpor.queues`, :mod:`torpor.schedules`), wording a reason, computing a cron
slot, ranking episodes — stays above the store. Times are epoch milliseconds of the store's
clock; durations are milliseconds unless a name says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..history import Event


#: A row as the database returns it (columns in the order the method documents).
Row = tuple[Any, ...]

#: The ``blob_refs`` owner of an episode's artifact references: this prefix and its id (run
#: retention never deletes such rows; the episode's pruning does).
EPISODE_OWNER_PREFIX = "episode:"


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class QueueView:
    """What decides whether an unstarted run may start, read in one snapshot (see
    :meth:`QueueRows.queue_view`): the run's queue columns ``run`` (status, queue, concurrency
    key, priority, not_before_ms, started_at_ms), its queue's row ``queue`` (None when the run
    has no queue, is not an unstarted pending run, or its queue is not defined), the runs
    holding a slot ``active`` (first started first) and the starts within the queue's longest
    rate period ``recent`` (latest first), each as ``(run id, key, started_at_ms)``."""

    run: Row
    queue: Row | None = None
    active: tuple[Row, ...] = ()
    recent: tuple[Row, ...] = ()


@dataclass(frozen=True)
class EpisodeRecord:
    """An episode as the store writes it. ``conditions``, ``refs`` and ``claims`` are JSON
    objects (``refs["artifacts"]``: sha256 hex digests the episode keeps from collection);
    ``tags``: the index tokens of its filters, space-separated; ``at_seq``: the boundary's seq
    in its run's history; ``created_at_ms``: epoch ms."""

    episode_id: str
    run_id: str
    boundary: str
    scope: str
    agent: str | None
    task_type: str | None
    kind: str
    outcome: str | None
    summary: str
    lesson: str
    at_seq: int
    created_at_ms: int
    conditions: dict[str, Any] = field(default_factory=dict)
    refs: dict[str, Any] = field(default_factory=dict)
    claims: dict[str, str] = field(default_factory=dict)
    tags: str = ""


@dataclass(frozen=True)
class EpisodeFilter:
    """What an episode search is restricted to: the exact columns (None: any; times epoch ms,
    inclusive) and ``tags``, the index tokens that must all be present (the same filter, as
    the full-text index holds it)."""

    scope: str
    tags: tuple[str, ...]
    agent: str | None = None
    task_type: str | None = None
    outcome: str | None = None
    live: bool = True
    since_ms: int = -(2**62)
    until_ms: int = 2**62

    def params(self) -> dict[str, Any]:
        """The exact columns as query parameters."""
        return {
            "scope": self.scope,
            "agent": self.agent,
            "task_type": self.task_type,
            "outcome": self.outcome,
            "live": self.live,
            "since_ms": self.since_ms,
            "until_ms": self.until_ms,
        }


@dataclass(frozen=True)
class RetentionPolicy:
    """How long a workflow's finished runs are kept: ``keep_days`` after they finished, and/or
    the ``keep_last`` most recent; both None keeps them forever. ``archive_url``: an fsspec URL
    (a folder) their history is written to, as JSON Lines, before they are deleted.
    ConfigError for ``keep_days`` <= 0 or ``keep_last`` < 0."""

    workflow: str
    keep_days: float | None = None
    keep_last: int | None = None
    archive_url: str | None = None

    def __post_init__(self) -> None:
        if self.keep_days is not None and not self.keep_days > 0:
            raise ConfigError(
                f"retention of {self.workflow!r}: keep_days must be > 0, not {self.keep_days}"
            )
        if self.keep_last is not None and self.keep_last < 0:
            raise ConfigError(
                f"retention of {self.workflow!r}: keep_last must be >= 0, not {self.keep_last}"
            )

    @property
    def forever(self) -> bool:
        return self.keep_days is None and self.keep_last is None


@dataclass(frozen=True)
class RunSize:
    """What one run occupies: its history's payloads, its engine checkpoint, the chunks and the
    artifacts it refers to (bytes; a chunk or artifact shared with other runs counts for each)."""

    run_id: str
    workflow: str
    status: str
    outcome: str | None
    history_bytes: int
    checkpoint_bytes: int
    chunk_bytes: int
    artifact_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.history_bytes + self.checkpoint_bytes + self.chunk_bytes + self.artifact_bytes


# --------------------------------------------------------------------------- protocols


class QueueRows(Protocol):
    """Queue definitions and the queue columns of runs (:mod:`torpor.queues` reads them)."""

    def set_queue(
        self,
        name: str,
        *,
        concurrency: int | None,
        key_concurrency: int | None,
        rate_limit: int | None,
        rate_period_ms: int | None,
        key_rate_limit: int | None,
        key_rate_period_ms: int | None,
    ) -> None:
        """Define queue ``name`` with these limits (None: that limit does not apply),
        replacing any it had."""
        ...

    def queue_row(self, name: str) -> Row | None:
        """``(name, concurrency, key_concurrency, rate_limit, rate_period_ms, key_rate_limit,
        key_rate_period_ms)`` of the queue, or None when it is not defined."""
        ...

    def queue_rows(self) -> list[Row]:
        """Every queue's row (as :meth:`queue_row`), by name."""
        ...

    def delete_queue(self, name: str) -> bool:
        """Forget the queue; False if it was not defined."""
        ...

    def run_queue_row(self, run_id: str) -> Row | None:
        """``(status, queue, concurrency key, priority, not_before_ms, started_at_ms)`` of the
        run, or None for an unknown run."""
        ...

    def queue_view(self, run_id: str, limit: int) -> QueueView | None:
        """The :class:`QueueView` of the run (at most ``limit`` active and recent runs), in one
        snapshot; None for an unknown run."""
        ...

    def runs_queue_columns(self, limit: int) -> list[Row]:
        """``(run id, *run_queue_row)`` of up to ``limit`` runs, by run id."""
        ...

    def damaged_pending_queue_columns(self, limit: int) -> list[Row]:
        """As :meth:`runs_queue_columns`, for up to ``limit`` pending runs whose queue columns
        hold a value of the wrong type (SQLite only: PostgreSQL's columns are typed)."""
        ...


class ScheduleRows(Protocol):
    """Schedule rows (:mod:`torpor.schedules` decodes them and computes the slots). A row is
    ``(name, workflow, input JSON, cron, tz, catchup, queue, paused, next_fire_ms,
    last_fire_ms, generation, last_error, retry_at_ms)``."""

    def put_schedule(
        self,
        name: str,
        *,
        workflow: str,
        input_json: str,
        cron: str,
        tz: str,
        catchup: str,
        queue: str | None,
        next_fire_ms: int,
        now_ms: int,
    ) -> None:
        """Define schedule ``name`` or replace it (a new generation; its error cleared)."""
        ...

    def schedule_row(self, name: str) -> Row | None:
        """The schedule's row, or None."""
        ...

    def schedule_rows(self) -> list[Row]:
        """Every schedule's row, by name."""
        ...

    def delete_schedule(self, name: str) -> bool:
        """Delete the schedule; False if there was none."""
        ...

    def pause_schedule(
        self, name: str, *, paused: bool, next_fire_ms: int | None, now_ms: int | None = None
    ) -> None:
        """Pause the schedule, or resume it with ``next_fire_ms`` (None: kept); a new
        generation, stamped ``now_ms`` (None: the store's clock)."""
        ...

    def due_schedule_rows(self, now_ms: int, limit: int) -> list[Row]:
        """Up to ``limit`` rows of schedules not paused whose next fire (and retry time) is due
        by ``now_ms``, earliest first."""
        ...

    def next_schedule_fire_ms(self) -> Any:
        """The earliest next fire (or retry) of the schedules not paused, as stored (None when
        there is none)."""
        ...

    def advance_schedule(
        self,
        name: str,
        *,
        generation: Any,
        prev_fire_ms: Any,
        next_fire_ms: int,
        last_fire_ms: int | None,
        now_ms: int,
    ) -> bool:
        """Move the schedule's next fire on (compare-and-set on ``generation`` and
        ``prev_fire_ms`` as read); False when someone else did, or it was edited."""
        ...

    def fail_schedule(
        self,
        name: Any,
        *,
        generation: Any,
        prev_fire_ms: Any,
        retry_at_ms: int,
        error: str,
        now_ms: int,
    ) -> bool:
        """Record why the schedule could not fire and when to retry, its next fire kept
        (compare-and-set on the values as read, damaged or not)."""
        ...


class EpisodeIndex(Protocol):
    """The full-text index of episodes within one read snapshot (:mod:`torpor.episodes.search`
    ranks with it). The filter's size and each word's document count within it are counted in
    the index on every backend (:meth:`count`)."""

    def count(self, f: EpisodeFilter, words: Sequence[str], cap: int) -> int:
        """How many episodes of ``f`` hold any of ``words`` (all of ``f`` when none), up to
        ``cap``."""
        ...

    def counted(
        self, f: EpisodeFilter, words: Sequence[str], n_cap: int, cap: int
    ) -> tuple[int, dict[str, int]] | None:
        """``(episodes of f, {word: episodes of f holding it})`` in one step for a scope-only
        filter — each count exact or at least its cap (``n_cap``, ``cap``); a word it cannot
        answer is left out — or None (another filter: :meth:`count` counts instead)."""
        ...

    def scored(self, f: EpisodeFilter, idf: Mapping[str, float], over: int) -> list[Row]:
        """``(id, score)`` of up to ``over`` episodes of ``f``, a word's weight in ``idf``
        added for each one it holds, best first (ties: newest)."""
        ...

    def recent(
        self, f: EpisodeFilter, words: Sequence[str], over: int, n: int
    ) -> tuple[list[Row], bool]:
        """``([(id, 0.0)], may there be more)``: up to ``over`` newest episodes of ``f``
        holding any of ``words`` (``n``: the filter's size)."""
        ...

    def rows(self, f: EpisodeFilter, ids: Sequence[int]) -> dict[int, Row]:
        """``{id: episode row}`` of the ``ids`` whose exact columns match ``f`` (a row as
        :meth:`EpisodeRows.episode_row`, without its score)."""
        ...


class EpisodeRows(Protocol):
    """Episodes: written at run boundaries, searched, superseded, pruned (:mod:`torpor.episodes`
    decides what they say and how they rank). An episode row is ``(episode_id, run_id,
    boundary, scope, agent, task_type, kind, outcome, summary, lesson, at_seq, created_at_ms,
    conditions JSON, refs JSON, claims JSON, superseded_by, valid_until_ms, score)``."""

    def episode_filing(self, run_id: str) -> Row | None:
        """``(workflow, scope, task_type, seq captured so far)`` of the run; None for an
        unknown run."""
        ...

    def write_episodes(
        self,
        records: Sequence[EpisodeRecord],
        *,
        captured: tuple[str, int] | None,
        contradicts: Callable[[dict[str, str], dict[str, str]], bool],
        window: int,
        conflicts: Sequence[Row] = (),
    ) -> list[EpisodeRecord]:
        """Write ``records`` in one transaction (one whose ``(run_id, boundary)`` exists is
        left as it is), each new one superseding the live episodes of its scope and task type
        (the latest ``window``) whose claims it ``contradicts(new, old)``; the artifacts in
        ``refs["artifacts"]`` recorded in ``blob_refs``; ``conflicts``: ``ledger_conflicts``
        rows to record in the same transaction, each once
        (:data:`torpor.store.episode_scopes.CONFLICT_COLUMNS`). ``captured``: ``(run id,
        seq)`` to record as captured. Returns the records newly written (the objects given,
        in order)."""
        ...

    def supersede_episode(self, old_id: str, new_id: str) -> bool:
        """Mark ``old_id`` superseded by ``new_id``; False when it already was."""
        ...

    def episode_runs_behind(self, limit: int) -> list[str]:
        """Up to ``limit`` runs filed for episodes, waiting or finished, with boundaries not
        yet captured, oldest first."""
        ...

    def episode_row(self, episode_id: str) -> Row | None:
        """The episode's row (score 0.0), or None."""
        ...

    def episode_index(self) -> AbstractContextManager[EpisodeIndex]:
        """The :class:`EpisodeIndex` over one read snapshot."""
        ...

    def count_episodes(self) -> int:
        """How many episodes the store holds (all scopes)."""
        ...

    def prune_episodes(self, *, before_ms: int, superseded_only: bool, batch: int) -> int:
        """Delete the episodes created before ``before_ms`` (only superseded ones when
        ``superseded_only``), ``batch`` per transaction, with their artifact references;
        returns how many."""
        ...

    def collect_episode_refs(self, *, dry_run: bool) -> tuple[int, int, int]:
        """Delete (``dry_run``: count) the artifact references of episodes that no longer
        exist: ``(references dropped, episodes keeping artifacts, artifacts they keep)``."""
        ...

    def episode_scopes(self) -> list[Row]:
        """``[(scope, episodes)]`` of every scope holding episodes, by scope."""
        ...

    def episode_scopes_in_use(self) -> bool:
        """Whether any episode is filed under a scope other than ``""``."""
        ...

    def scope_episode_rows(self, scope: str, *, after: int, limit: int) -> list[Row]:
        """Up to ``limit`` rows of ``scope`` in the order written after position ``after``
        (an episode row, then its position)."""
        ...

    def scope_ledger_facts(self, scope: str, run_id: str, *, runs: int) -> list[Row]:
        """``[(run_id, seq, idx, at_ms, kind, text, key)]``: the non-``unit`` ledger records
        of run ``run_id`` and of the runs of the scope's latest ``runs`` episodes, in the
        order stated; ``[]`` when ``run_id`` has none."""
        ...

    def scope_conflicts(self, scope: str, *, until_ms: int, limit: int) -> list[Row]:
        """Up to ``limit`` ``ledger_conflicts`` rows of the scope recorded by ``until_ms``,
        newest first."""
        ...

    def forget_scope(self, scope: str) -> dict[str, int]:
        """Delete the scope's episodes, their artifact references and its rows in every
        registered scoped table, in one transaction: ``{what: rows deleted}``
        (:mod:`torpor.store.episode_scopes`)."""
        ...


class EpisodeVectorRows(Protocol):
    """Episode vectors (:mod:`.episode_vectors`): an episode's text embedded by a model, one
    row per ``(episode id, model)``, a vector given and returned as little-endian float32
    ``bytes``; read only by id (:mod:`torpor.episodes.hybrid` ranks with them)."""

    def write_episode_vectors(
        self, model: str, vectors: Sequence[tuple[str, bytes]], *, now_ms: int
    ) -> int:
        """Store ``(episode_id, vector)`` pairs of ``model`` in one transaction (a pair
        already stored is left as it is); returns how many were given."""
        ...

    def episode_vectors(self, model: str, episode_ids: Sequence[str]) -> dict[str, bytes]:
        """``{episode_id: vector}`` of those of ``episode_ids`` with a vector of ``model``."""
        ...

    def episodes_without_vectors(self, model: str, limit: int) -> list[tuple[str, str, str]]:
        """``(episode_id, summary, lesson)`` of up to ``limit`` episodes, newest first, with
        no vector of ``model``."""
        ...

    def count_episode_vectors(self, model: str) -> int:
        """How many vectors of ``model`` the store holds."""
        ...

    def nearest_episodes(
        self, model: str, f: EpisodeFilter, query: bytes, limit: int
    ) -> list[tuple[tuple[object, ...], bytes]] | None:
        """``[(episode row, vector)]`` of the ``limit`` episodes of ``f`` nearest ``query`` by
        an approximate vector index (pgvector), or None when the store has none."""
        ...

    def drop_orphan_episode_vectors(self) -> int:
        """Delete the vectors whose episode is gone; returns how many."""
        ...


class MaintenanceOps(Protocol):
    """Retention, garbage collection, archives and storage figures (:mod:`.maintenance`;
    :mod:`torpor.retention` drives them)."""

    def retention_policies(self) -> list[RetentionPolicy]:
        """Every workflow's retention policy."""
        ...

    def set_retention_policy(self, policy: RetentionPolicy) -> None:
        """Record ``policy`` for its workflow (a policy that keeps all and archives nothing
        removes the row)."""
        ...

    def expired_runs(self, policy: RetentionPolicy, limit: int = 1000) -> list[str]:
        """Finished runs of ``policy.workflow`` past it, oldest first."""
        ...

    def delete_run(self, run_id: str) -> bool:
        """Delete a finished, not reopenable run whole; False when it is not such a run."""
        ...

    def collectable_chunks(self, grace_ms: int) -> tuple[int, int]:
        """``(count, bytes)`` of the chunks :meth:`collect_chunks` would delete now."""
        ...

    def collect_chunks(self, grace_ms: int) -> tuple[int, int]:
        """Delete the chunks nothing names, unused for ``grace_ms``; ``(count, bytes)``."""
        ...

    def pin_blob(self, run_id: str, sha256: str, size: int) -> None:
        """Reference an artifact for ``run_id`` before it is stored (an in-flight pin)."""
        ...

    def referenced_artifacts(self) -> set[str]:
        """The sha256 of every artifact a run or a pending inbox message refers to."""
        ...

    def run_references(self, limit: int = 1_000_000) -> list[tuple[str, str, str, int, bool]]:
        """``(run id, kind, sha256, size, present)`` of every run's references."""
        ...

    def chunk_problem(self, sha256: str) -> str | None:
        """What is wrong with a stored chunk (missing, altered), or None."""
        ...

    def reclaim_pages(self, *, convert: bool = False) -> str:
        """Give freed pages back to the file system (SQLite); returns what was done."""
        ...

    def run_blob_bytes(self, run_id: str) -> tuple[int, int]:
        """``(chunk bytes, artifact bytes)`` the run refers to."""
        ...

    def largest_runs(self, limit: int = 20, workflow: str | None = None) -> list[RunSize]:
        """Runs by what they occupy, largest first."""
        ...

    def archive_lines(self, record: dict[str, Any], events: Iterable[Event]) -> Iterator[str]:
        """A run's archive as JSON Lines (a header with ``record``, then its events)."""
        ...

    def restore_run(self, lines: Iterable[str], where: str) -> str:
        """Bring an archived run back; returns its id. StoreError when it exists already,
        CorruptRecordError naming ``where`` for an archive that cannot be read."""
        ...


__all__ = [
    "EPISODE_OWNER_PREFIX",
    "EpisodeFilter",
    "EpisodeIndex",
    "EpisodeRecord",
    "EpisodeRows",
    "EpisodeVectorRows",
    "MaintenanceOps",
    "QueueRows",
    "QueueView",
    "RetentionPolicy",
    "Row",
    "RunSize",
    "ScheduleRows",
]
