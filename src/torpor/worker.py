"""A worker: picks runnable runs, executes them under leases, reacts to wakeups.

Any number of workers, on any number of machines, may share one PostgreSQL database (or one
SQLite file on one machine). Each loop iteration claims one runnable run — pending, crashed
(lease expired), or waiting with a due timer or a new inbox message — with
``FOR UPDATE SKIP LOCKED`` on PostgreSQL, executes it in a thread of its pool, and releases it
when it waits or ends. Idle workers block on ``LISTEN torpor_wake`` (PostgreSQL) or a short
poll (SQLite), never longer than the next timer deadline.

Workers also fire due schedules (:mod:`torpor.schedules`) of the workflows they import: one run
per slot, however many workers.

Shutdown (SIGTERM/SIGINT, or :meth:`Worker.stop`): stop claiming; running executions release
their run at their next boundary (or finish first); the worker exits when they are done.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from . import queues, retention, telemetry
from .errors import ConfigError, LeaseHeldError, LeaseLostError, TorporError
from .owners import owner_is_dead
from .runtime import RunResult, Runtime
from .schedules import Schedules, fire_due, note_damaged
from .store.base import Lease
from .workflows import accepted_versions

log = logging.getLogger("torpor.worker")

#: Back-off of a run that failed in this worker without an outcome: first and longest skip.
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 60.0
#: The shortest idle wait (a due timer another worker holds must not make the loop spin).
MIN_IDLE_S = 0.02
#: How often an idle worker looks for runs held by dead processes of its host, and for runs of
#: versions it cannot continue (to name them).
DEAD_SCAN_S = 1.0
VERSION_SCAN_S = 5.0
#: How often an idle worker looks for pending runs whose queue columns were damaged (logged once).
DAMAGE_SCAN_S = 60.0
#: How often an idle worker looks for due schedules (and bounds its idle wait by the next).
SCHEDULE_SCAN_S = 0.5
#: How often a worker runs a garbage collection pass (:mod:`torpor.retention`) when it is idle
#: (``TORPOR_GC_INTERVAL_S``; 0 turns it off).
GC_INTERVAL_S = 3600.0
#: How often an idle worker writes the episodes a dead process left unwritten (seconds).
EPISODES_SWEEP_S = 60.0


@dataclass
class WorkerStats:
    """Counts since the worker started. ``executed`` counts executions (a run that waited and
    woke is executed more than once); ``runs`` the distinct runs executed; ``finished`` and
    ``outcomes`` the runs this worker finished; ``waiting`` the runs it last left waiting — a
    run it later finished is no longer counted (issue 36: "waiting 1" after the only run
    succeeded)."""

    executed: int = 0
    finished: int = 0
    waiting: int = 0
    lost: int = 0
    errors: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    runs: int = 0

    def __post_init__(self) -> None:
        #: The unfinished runs this worker executed, by the status it left them in (a finished
        #: run leaves it: the worker's memory does not grow with the runs it finished).
        self._left: dict[str, str] = {}

    def note(self, run_id: str, status: str) -> None:
        """Run ``run_id``'s execution left it in ``status``."""
        before = self._left.pop(run_id, None)
        if before is None:
            self.runs += 1
        if status != "finished":
            self._left[run_id] = status
        self.waiting += (status == "waiting") - (before == "waiting")


class Worker:
    """Execute runnable runs from ``runtime.store``.

    ``concurrency``: runs executed at once (threads). ``poll_s``: the longest an idle worker
    sleeps before looking again; it is woken sooner by any commit that may have made a run
    runnable (PostgreSQL: NOTIFY; SQLite: ``PRAGMA data_version``). ``gc_interval_s``: how
    often an idle worker runs a garbage collection pass (retention, chunks, artifacts:
    :func:`torpor.retention.collect`); default ``TORPOR_GC_INTERVAL_S`` or one hour, 0 never. Raises
    ConfigError for a concurrency below 1 or a negative interval.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        concurrency: int = 1,
        poll_s: float = 1.0,
        on_result: Callable[[RunResult], None] | None = None,
        gc_interval_s: float | None = None,
    ):
        if concurrency < 1:
            raise ConfigError(f"worker concurrency must be >= 1, not {concurrency}")
        if gc_interval_s is None:
            raw = os.environ.get("TORPOR_GC_INTERVAL_S", "").strip()
            try:
                gc_interval_s = float(raw) if raw else GC_INTERVAL_S
            except ValueError:
                raise ConfigError(f"TORPOR_GC_INTERVAL_S={raw!r} is not a number") from None
        if gc_interval_s < 0:
            raise ConfigError(f"worker gc_interval_s must be >= 0, not {gc_interval_s}")
        self.gc_interval_s = gc_interval_s
        self._next_gc = time.monotonic() + gc_interval_s
        #: The latest collection pass of this worker.
        self.last_gc: retention.GcReport | None = None
        self.runtime = runtime
        self.store = runtime.store
        self.concurrency = concurrency
        self.poll_s = poll_s
        self.on_result = on_result
        self.stats = WorkerStats()
        self._stop = threading.Event()
        self._slots = threading.Semaphore(concurrency)
        self._lock = threading.Lock()
        #: run_id -> (monotonic time until which it is skipped, last delay)
        self._backoff: dict[str, tuple[float, float]] = {}
        self._next_dead_scan = 0.0
        self._next_version_scan = 0.0
        self._next_damage_scan = 0.0
        #: Damaged rows already logged: (run id, what is wrong).
        self._damaged: set[tuple[str, str]] = set()
        tel = telemetry.get()
        if tel is not None:
            tel.watch(self.store)  # torpor.runs by status, observed at each metrics collection
        self._next_schedule_scan = 0.0
        self._next_fire_ms: int | None = None
        self._next_episodes_sweep = 0.0

    def stop(self) -> None:
        """Stop claiming; running executions release their run at the next boundary."""
        self._stop.set()
        self.runtime.stopping.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop the worker gracefully (main thread only)."""

        def handler(signum: int, frame: Any) -> None:
            log.info("signal %s: stopping after the current boundaries", signum)
            self.stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def _execute(self, run_id: str, lease: Any) -> None:
        try:
            res = self.runtime.execute(run_id, lease=lease)
            with self._lock:
                self.stats.executed += 1
                if res.outcome:
                    self.stats.finished += 1
                    self.stats.outcomes[res.outcome] = self.stats.outcomes.get(res.outcome, 0) + 1
                self.stats.note(run_id, res.status)
            if self.on_result is not None:
                self.on_result(res)
            with self._lock:
                self._backoff.pop(run_id, None)
        except LeaseHeldError:
            pass
        except LeaseLostError as exc:
            # Fenced off (the lease expired while this worker was stalled, and another worker
            # took the run over): nothing was written; the new owner carries on.
            with self._lock:
                self.stats.lost += 1
            log.warning("run %s: LeaseLostError: %s", run_id, exc)
        except TorporError as exc:
            delay = self._back_off(run_id)
            log.error(
                "run %s: %s: %s (not claimed again by this worker for %.1fs)",
                run_id,
                type(exc).__name__,
                exc,
                delay,
            )
        except Exception:
            delay = self._back_off(run_id)
            log.exception("run %s: unexpected error (skipped for %.1fs)", run_id, delay)
        finally:
            self._slots.release()

    def _take_over_dead(self) -> Lease | None:
        """The lease of a run this worker can execute whose holder is a process of this host
        proven dead (``kill -9``, an OOM kill): taken over at once, as ``torpor resume`` does,
        instead of waiting out its lease (checked at most once a second)."""
        now = time.monotonic()
        if now < self._next_dead_scan:
            return None
        self._next_dead_scan = now + DEAD_SCAN_S
        accept = accepted_versions()
        excluded = set(self._excluded())
        for run_id, owner, epoch, workflow, version in self.store.held_on_host(
            socket.gethostname()
        ):
            if run_id in excluded or version not in accept.get(workflow, ()):
                continue
            if owner == self.runtime.owner or not owner_is_dead(owner):
                continue
            try:
                return self.store.acquire_lease(
                    run_id, self.runtime.owner, self.runtime.lease_ttl_s, take_from=(owner, epoch)
                )
            except LeaseHeldError:
                continue  # another worker was quicker
        return None

    def _note_unrunnable(self) -> None:
        """Name, once, the runnable runs of this worker's workflows recorded under a version it
        cannot continue (a deploy changed the code): ``ls``/``show`` then say why no worker
        takes them, instead of the worker skipping them silently (checked every few seconds)."""
        now = time.monotonic()
        if now < self._next_version_scan:
            return
        self._next_version_scan = now + VERSION_SCAN_S
        try:
            for run_id, version in self.store.unrunnable_versions(accepted_versions()):
                self.runtime.note_unrunnable(run_id, version)
        except TorporError as exc:
            log.warning("noting runs of unrunnable versions failed: %s", exc)
        self._note_damaged()

    def _note_damaged(self) -> None:
        """Log, once each, damaged run rows (a number column holding text), pending runs whose
        queue columns and schedules whose rows were damaged (edited by hand): no claim takes
        such a run, no worker fires such a schedule, others are served (G10), and
        ``ls``/``show``/``schedule ls``/``doctor`` name them (checked every
        :data:`DAMAGE_SCAN_S`)."""
        now = time.monotonic()
        if now < self._next_damage_scan:
            return
        self._next_damage_scan = now + DAMAGE_SCAN_S
        try:
            rows = self.store.damaged_runs()
            for run_id, damage in rows:
                if (run_id, damage) not in self._damaged:
                    self._damaged.add((run_id, damage))
                    column, _, value = damage.partition("=")
                    log.error(
                        "run %r is damaged: column %s of its row holds %s, not a number (ls "
                        "and show refuse it until it is set right; torpor doctor)",
                        run_id, column, value,
                    )  # fmt: skip
            note_damaged(self.store)  # (schedules: logged once by torpor.schedules)
            damaged = queues.damaged_pending(self.store)
        except TorporError as exc:
            log.warning("looking for damaged rows failed: %s", exc)
            return
        named = {run_id for run_id, _ in rows}
        for row, why in damaged:
            if row not in named and (row, why) not in self._damaged:
                self._damaged.add((row, why))
                log.error("%s; skipped (torpor doctor lists such rows)", why)

    def _fire_schedules(self) -> None:
        """Start the runs of due schedules whose workflow this worker has (one run per slot
        whatever the number of workers: :func:`~torpor.schedules.fire_due`); checked at most
        every :data:`SCHEDULE_SCAN_S`, or when the next fire is due."""
        now = time.monotonic()
        due = self._next_fire_ms is not None and self._next_fire_ms <= self.store.now_ms()
        if now < self._next_schedule_scan and not due:
            return
        self._next_schedule_scan = now + SCHEDULE_SCAN_S
        try:
            for run_id in fire_due(self.runtime):
                log.info("schedule fired: run %s", run_id)
            self._next_fire_ms = Schedules(self.store).next_fire_ms()
        except TorporError as exc:
            log.warning("firing schedules failed: %s", exc)
        except Exception:  # a bug must not take the fleet down: the runs go on being served
            log.exception("firing schedules failed (retried at the next scan)")

    def _back_off(self, run_id: str) -> float:
        """The run failed here without an outcome (its history is intact; the cause may be
        transient, or specific to this worker): skip it for a while, doubling each time, so one
        such run never monopolizes the worker nor spins it."""
        now = time.monotonic()
        with self._lock:
            self.stats.errors += 1
            _, prev = self._backoff.get(run_id, (0.0, 0.0))
            delay = min(BACKOFF_MAX_S, max(BACKOFF_MIN_S, prev * 2))
            self._backoff[run_id] = (now + delay, delay)
            # Forget runs whose back-off ended long ago.
            for rid, (until, _) in list(self._backoff.items()):
                if until < now - 2 * BACKOFF_MAX_S:
                    del self._backoff[rid]
        return delay

    def _excluded(self) -> list[str]:
        now = time.monotonic()
        with self._lock:
            return [rid for rid, (until, _) in self._backoff.items() if until > now]

    def _next_backoff_end(self) -> float | None:
        now = time.monotonic()
        with self._lock:
            ends = [until - now for until, _ in self._backoff.values() if until > now]
        return min(ends) if ends else None

    def run(self, *, until_idle: bool = False, max_seconds: float | None = None) -> WorkerStats:
        """Loop until stopped (or, with ``until_idle``, until nothing is runnable or due soon).

        ``max_seconds`` bounds the loop's duration (for tests and benchmarks). Raises
        StoreFileChangedError when the SQLite file it works on was deleted or replaced (after
        the executions in progress stopped at their own check).
        """
        start = time.monotonic()
        futures: list[Future[None]] = []
        served = accepted_versions()
        if served:
            log.info("worker %s serves %s", self.runtime.owner, ", ".join(sorted(served)))
        else:
            log.warning(
                "worker %s: no workflow is registered in this process, so it claims no run; "
                "import the modules that define them (torpor worker --import MODULE)",
                self.runtime.owner,
            )
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="torpor-run") as pool:
            while not self._stop.is_set():
                if max_seconds is not None and time.monotonic() - start > max_seconds:
                    break
                self.store.check_database_file()
                self._fire_schedules()
                if not self._slots.acquire(timeout=self.poll_s):
                    continue
                try:
                    lease = (
                        self.store.claim_next(
                            self.runtime.owner,
                            self.runtime.lease_ttl_s,
                            accept=accepted_versions(),
                            exclude=self._excluded(),
                        )
                        or self._take_over_dead()
                    )
                except TorporError as exc:
                    self._slots.release()
                    log.warning("claim failed: %s", exc)
                    self._stop.wait(min(self.poll_s, 0.25))
                    continue
                if lease is not None:
                    futures.append(pool.submit(self._execute, lease.run_id, lease))
                    futures = [f for f in futures if not f.done()]
                    continue
                self._slots.release()
                self._note_unrunnable()
                self._maybe_collect()
                self._sweep_episodes()
                if until_idle and not futures_running(futures):
                    nxt = self.store.next_wake_at_ms(accept=accepted_versions())
                    if nxt is None or nxt - self.store.now_ms() > self.poll_s * 1000:
                        break
                self._idle_wait()
            for f in futures:
                with contextlib.suppress(Exception):
                    f.result()
        return self.stats

    def _maybe_collect(self) -> None:
        """An idle worker's scheduled garbage collection pass (every ``gc_interval_s``)."""
        if not self.gc_interval_s or time.monotonic() < self._next_gc:
            return
        self._next_gc = time.monotonic() + self.gc_interval_s
        try:
            rep = retention.collect(self.store, self.runtime.artifacts)
        except TorporError as exc:
            log.warning("garbage collection failed: %s", exc)
            return
        self.last_gc = rep
        if rep.runs or rep.chunks or rep.artifacts:
            log.info(
                "gc: %d runs deleted, %d chunks (%d bytes), %d artifacts (%d bytes) collected",
                len(rep.runs), rep.chunks, rep.chunk_bytes, rep.artifacts, rep.artifact_bytes,
            )  # fmt: skip

    def _sweep_episodes(self) -> None:
        """When idle, at most every :data:`EPISODES_SWEEP_S`: write the episodes a process
        that died between a run's boundary and their capture left unwritten (a finished run
        is not executed again to capture them)."""
        now = time.monotonic()
        if now < self._next_episodes_sweep:
            return
        self._next_episodes_sweep = now + EPISODES_SWEEP_S
        from .episodes.store import EpisodeStore  # imported when first used

        try:
            n = EpisodeStore(self.store).catch_up(limit=100)
        except TorporError as exc:
            log.warning("episodes sweep failed: %s", exc)
            return
        if n:
            log.info("wrote %d episode(s) left unwritten by a process that died", n)

    def _idle_wait(self) -> None:
        """Block until a wakeup (NOTIFY / data_version), the next timer, the end of a back-off,
        or ``poll_s``. A timer already due that could not be claimed (another worker is on it,
        or it is backed off) still waits a little, so the loop never spins."""
        timeout = self.poll_s
        try:
            nxt = self.store.next_wake_at_ms(accept=accepted_versions())
        except TorporError:
            nxt = None
        for due in (nxt, self._next_fire_ms):
            if due is not None:
                timeout = min(timeout, (due - self.store.now_ms()) / 1000)
        backoff_end = self._next_backoff_end()
        if backoff_end is not None:
            timeout = min(timeout, backoff_end)
        self.store.wait_for_wake(max(timeout, MIN_IDLE_S), self._stop.is_set)


def futures_running(futures: list[Future[None]]) -> bool:
    """True while any execution is still in progress."""
    return any(not f.done() for f in futures)
