"""Executes runs in this process: start, resume, and follow a run through its timers.

One :class:`Runtime` per process (it owns a lease-owner id); each :meth:`Runtime.execute` takes
the run's lease, loads its state (latest checkpoint + the events after it) and hands it to the
engine (:class:`~torpor.engine.execution.Execution`), which runs the workflow function with a
:class:`~torpor.Run` handle and records the outcome — or leaves the run waiting, holding
nothing.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from . import queues, serde, telemetry
from .artifacts import ArtifactStore
from .config import Settings
from .engine import children
from .engine.cancel import CANCEL_GRACE_S
from .engine.execution import Execution, RunResult
from .engine.highwater import HighWater, committed_seq
from .engine.journal import Journal
from .errors import (
    ConfigError,
    LeaseHeldError,
    NotSerializable,
    PayloadError,
    StoreBehindMarkError,
    TorporError,
    VersionMismatchError,
)
from .history import Event, RunStarted, RunState, RunStatus
from .keys import Trust
from .owners import new_owner_id
from .run import Run
from .store import open_store
from .store.base import Lease, Store
from .workflows import check_run_id, get_workflow

#: Longest scope accepted (a user, a tenant, a team: what episodes are filed under).
MAX_SCOPE_CHARS = 200

log = logging.getLogger("torpor.runtime")

#: A parent's outcomes that cancel its unfinished children (:mod:`torpor.engine.children`).
_CANCELS_CHILDREN = frozenset(o.value for o in children.CANCELS_CHILDREN)


#: (The rule is :func:`torpor.workflows.check_run_id`, shared with child runs.)
_check_run_id = check_run_id


def _check_scope(scope: object) -> None:
    if scope is None:
        return
    if not isinstance(scope, str) or len(scope) > MAX_SCOPE_CHARS:
        raise ConfigError(
            f"scope must be a string of at most {MAX_SCOPE_CHARS} characters, not {scope!r:.80}"
        )


def _version_mismatch(recorded: str, running: str) -> str:
    """The needs-attention detail of a run recorded under a version the running code refuses
    (the same words whoever finds it, so it is recorded once)."""
    return (
        f"version mismatch (recorded {recorded}, running {running}): run it with code of "
        f"version {recorded}, or declare that version compatible"
    )


def heartbeat_for(lease_ttl_s: float, heartbeat_s: float | None = None) -> float:
    """The heartbeat (seconds) of a lease of ``lease_ttl_s``: ``heartbeat_s``, by default a
    third of it. ConfigError when it is not > 0 and at most a third (a lease must survive two
    late renewals; etcd and Consul sessions renew at TTL/3)."""
    beat = heartbeat_s if heartbeat_s is not None else lease_ttl_s / 3
    if beat <= 0 or beat > lease_ttl_s / 3 + 1e-9:
        raise ConfigError(
            f"heartbeat_s={beat} must be > 0 and at most a third of "
            f"lease_ttl_s={lease_ttl_s}: a lease must survive two late renewals (the "
            "field's default; etcd and Consul sessions renew at TTL/3)"
        )
    return beat


class Runtime:
    """Executes runs of registered workflows against a store.

    ``lease_ttl_s``: lease lifetime in seconds; ``heartbeat_s`` (default a third of it) must be
    at most a third of the ttl (ConfigError otherwise): two late renewals do not lose the lease.
    ``auto_approve``: grant every approval of the runs this runtime executes by policy,
    recorded under this approver name as "approved by the start flag of run X, given by
    user@host" — not a signature; only a runtime with the flag honours such a decision.
    Signed decisions are verified against the trusted keyring (:mod:`torpor.keys`; KeyringError
    if it is configured under ``TORPOR_HOME``, ConfigError for an HMAC key under 32 bytes in
    the ``hmac-local`` mode). ``on_event``: called with each appended event (progress).
    """

    def __init__(
        self,
        store: Store | str | None = None,
        artifacts: ArtifactStore | str | None = None,
        *,
        settings: Settings | None = None,
        owner: str | None = None,
        lease_ttl_s: float = 30.0,
        heartbeat_s: float | None = None,
        auto_approve: str | None = None,
        on_event: Callable[[Event], None] | None = None,
        clock: Callable[[], float] | None = None,
        cancel_grace_s: float = CANCEL_GRACE_S,
    ):
        telemetry.get()  # a bad OTEL_* value stops here, before a store is opened or created
        self.settings = settings or Settings.from_env(
            store if isinstance(store, str) else None,
            artifacts if isinstance(artifacts, str) else None,
        )
        self.store: Store = (
            open_store(self.settings.database_url, clock=clock or time.time)
            if store is None or isinstance(store, str)
            else store
        )
        #: How this runtime waits for a timer: ``clock.sleep`` when the clock has one (a fake
        #: clock advances instead of sleeping), else ``time.sleep``.
        self.sleep: Callable[[float], None] = getattr(clock, "sleep", None) or time.sleep
        self.fake_clock = self.sleep is not time.sleep
        self.artifacts = (
            artifacts
            if isinstance(artifacts, ArtifactStore)
            else ArtifactStore(self.settings.artifacts_url)
        )
        self.owner = owner or new_owner_id()
        self.lease_ttl_s = lease_ttl_s
        self.heartbeat_s = heartbeat_for(lease_ttl_s, heartbeat_s)
        if not cancel_grace_s >= 0:
            raise ConfigError(f"cancel_grace_s={cancel_grace_s} must be >= 0 seconds")
        self.cancel_grace_s = cancel_grace_s
        self.auto_approve = auto_approve
        #: Set to make executions release their run at the next boundary (graceful shutdown).
        self.stopping = threading.Event()
        self.on_event = on_event
        self.signing_key = self.settings.signing_key()
        self.trust = Trust(self.settings.keyring_path(), self.settings.hmac_key())
        self._high_water: HighWater | None = None

    def close(self) -> None:
        if self._high_water is not None:
            self._high_water.close()
        self.store.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ lifecycle

    def start(
        self,
        workflow: str | Callable[..., Any],
        input: Any = None,
        *,
        run_id: str | None = None,
        queue: str | None = None,
        key: str | None = None,
        priority: int = 0,
        start_at: datetime | float | None = None,
        scope: str | None = None,
        task_type: str | None = None,
    ) -> str:
        """Create a run (not executed yet). Idempotent: an existing ``run_id`` is returned
        as is (ConfigError if it belongs to another workflow), its queue and start time left
        as they were.

        ``queue``: the queue a worker claims it from, under that queue's limits
        (:mod:`torpor.queues`); ``key``: its concurrency key within the queue (per-key limits);
        ``priority``: higher is claimed first (default 0); ``start_at``: not claimed before
        this time (an aware ``datetime``, or epoch seconds). BadInputError for a key without a
        queue, a naive datetime, or a malformed queue name.

        ``scope``: whom the run works for (a user, a tenant, a team; at most
        :data:`MAX_SCOPE_CHARS` characters): its episodes are filed under it, and the lessons
        it is given come from it alone (:mod:`torpor.episodes`). ``task_type``: overrides the
        task type its episodes are filed under (an agent's default: its name); ConfigError for
        a workflow that declares none (its runs get no episodes)."""
        dispatch = queues.dispatch_for(queue, key, priority, start_at)
        wf = get_workflow(workflow)
        if run_id is not None:
            _check_run_id(run_id)
        _check_scope(scope)
        if task_type is not None and wf.task_type is None:
            raise ConfigError(
                f"task_type={task_type!r}: workflow {wf.name!r} declares no task type, so its "
                "runs get no episodes; declare one (@workflow(task_type=...), or an Agent)"
            )
        rid = run_id if run_id is not None else uuid.uuid4().hex[:16]
        try:
            data = serde.to_jsonable(input)
        except NotSerializable as exc:
            raise PayloadError(rid, None, f"run input is not serializable: {exc}") from None
        tel = telemetry.get()  # resolved (a ConfigError raised) before the run is created
        created = self.store.create_run(
            rid,
            RunStarted(
                workflow=wf.name,
                version=wf.version,
                input=data,
                criteria=list(wf.criteria),
                goal=wf.goal,
                module=getattr(wf.fn, "__module__", "") or "",
            ),
            dispatch,
            scope=scope,
            task_type=task_type or wf.task_type,
        )
        if created and tel is not None:
            tel.started(self.store, rid)  # the run's trace joins the caller's current span
        if not created:
            rec = self.store.get_run(rid)
            if rec.workflow != wf.name:
                raise ConfigError(f"run {rid!r} exists and belongs to workflow {rec.workflow!r}")
        return rid

    def execute(self, run_id: str, *, lease: Lease | None = None) -> RunResult:
        """Execute the run once under a fresh lease until it finishes or waits.

        ``lease``: one already taken (a worker's ``claim_next``); it is released at the end.
        Raises LeaseHeldError if another live process holds it, VersionMismatchError /
        NonDeterminismError (run left untouched and resumable) for code that does not match.
        """
        if lease is None:
            lease = self.store.acquire_lease(run_id, self.owner, self.lease_ttl_s)
        ex: Execution | None = None
        try:
            state = self.store.load(run_id)
            wf = get_workflow(state.workflow, state.module)
            ex = Execution(self, wf, lease, state, heartbeat_s=self.heartbeat_s, make_handle=Run)
            self._check_high_water(ex)
            try:
                wf.check_version(run_id, state.version)
            except VersionMismatchError:
                # Named where people look (ls, show), once, and left as it is for its code.
                ex.note_attention(_version_mismatch(state.version, wf.version))
                raise
            if state.status is RunStatus.FINISHED and not self.store.count_pending_inbox(run_id):
                res = ex.result()
            else:
                res = self._run_traced(ex, lease, state)
            if wf.task_type is not None:
                self._capture_episodes(run_id)
            return res
        finally:
            if ex is not None and ex.journal.store_identity and ex.journal.lost is None:
                with contextlib.suppress(TorporError):  # (a mark not written: the next does)
                    self.high_water.advance(run_id, committed_seq(ex.journal))
            with contextlib.suppress(Exception):
                self.store.release_lease(lease)

    @property
    def high_water(self) -> HighWater:
        """This host's high-water mark of the store (:mod:`torpor.engine.highwater`)."""
        if self._high_water is None:
            self._high_water = HighWater(self.settings.config_dir(), self.store)
        return self._high_water

    def _check_high_water(self, ex: Execution) -> None:
        """Before anything of the workflow runs: refuse a store behind this host's mark (G16;
        recorded on the run, StoreBehindMarkError), and hand the execution the pinned store
        identity, the seq until which new effects are reconciled first (after an accepted
        restore) and the mark's advance at each lease renewal."""
        j = ex.journal
        hw = self.high_water
        why = hw.check(j.run_id, j.state.seq)
        if why is not None:
            ex.note_attention(why)
            raise StoreBehindMarkError(why)
        j.store_identity = hw.store_id()
        j.reconcile_until = hw.reconcile_until(j.run_id)

        def renewed(journal: Journal) -> None:
            hw.advance(journal.run_id, committed_seq(journal))

        j.on_renewed = renewed

    def _run_traced(self, ex: Execution, lease: Lease, state: RunState) -> RunResult:
        """``ex.run()``, as one attempt span of the run's trace when telemetry is on."""
        tel = telemetry.get()
        traced = None if tel is None else telemetry.trace_attempt(tel, self.store, lease, state)
        if traced is None:
            return ex.run()
        ex.journal.observer = traced
        try:
            res = ex.run()
        except BaseException as exc:
            traced.close(None, None, exc)
            raise
        traced.close(res.status, res.outcome, None)
        return res

    def _capture_episodes(self, run_id: str) -> None:
        """Write the episodes of the run's new boundaries (an end, a wait, a milestone). A
        failure is logged, not raised: the run's own record is intact, and the next execution
        or ``torpor memory sync`` writes what is missing (writes are idempotent)."""
        from .episodes.store import EpisodeStore  # (only when used: a cold resume skips it)

        try:
            EpisodeStore(self.store).capture(run_id)
        except TorporError as exc:
            log.warning("run %s: episodes not captured yet: %s", run_id, exc)

    def note_unrunnable(self, run_id: str, version: str) -> bool:
        """Record on run ``run_id`` (recorded under ``version``, which this process's code for
        its workflow cannot continue) why no worker takes it — once; False when its lease is
        held (someone is on it) or it was already noted. Used by idle workers."""
        try:
            lease = self.store.acquire_lease(run_id, self.owner, self.lease_ttl_s, starts=False)
        except LeaseHeldError:
            return False
        try:
            state = self.store.load(run_id)
            wf = get_workflow(state.workflow, state.module)
            if wf.accepts(state.version):
                return False
            ex = Execution(self, wf, lease, state, heartbeat_s=self.heartbeat_s, make_handle=Run)
            return ex.note_attention(_version_mismatch(state.version, wf.version))
        finally:
            with contextlib.suppress(Exception):
                self.store.release_lease(lease)

    def _drive_children(self, run_id: str, follow_timers: bool, poll_s: float) -> bool:
        """Execute run ``run_id``'s unfinished children that no worker has to start (in no
        queue, no delayed start) and no one else holds; True when one of them finished. A
        child that cannot be executed here (its workflow unknown, its version refused) is
        logged and left, like a run no worker can take."""
        finished = False
        for rec in self.store.child_runs(run_id):
            if rec.status == RunStatus.FINISHED.value:
                continue
            if queues.left_to_workers(self.store, rec.run_id):
                continue
            try:
                res = self.resume(rec.run_id, follow_timers=follow_timers, poll_s=poll_s)
            except LeaseHeldError:
                continue  # a worker has it
            except TorporError as exc:
                # The child cannot go on here (its code, its version, a replay that diverged):
                # it says why where people look; the parent waits on, and is not stopped.
                log.warning("run %s: child run %s not executed here: %s", run_id, rec.run_id, exc)
                continue
            finished = finished or res.status == RunStatus.FINISHED.value
        return finished

    def run(
        self,
        workflow: str | Callable[..., Any],
        input: Any = None,
        *,
        run_id: str | None = None,
        scope: str | None = None,
        task_type: str | None = None,
        follow_timers: bool = True,
        poll_s: float = 0.05,
    ) -> RunResult:
        """Start (or rejoin) a run and execute it; see :meth:`start` for ``scope`` and
        ``task_type``, :meth:`resume` for ``follow_timers``. An existing run started with a
        queue or a delayed start is only returned as it is (a worker starts it, under its
        queue's limits): see :func:`torpor.queues.left_to_workers`."""
        rid = self.start(workflow, input, run_id=run_id, scope=scope, task_type=task_type)
        if queues.left_to_workers(self.store, rid):
            rec = self.store.get_run(rid)
            return RunResult(rid, rec.status, rec.outcome)
        return self.resume(rid, follow_timers=follow_timers, poll_s=poll_s)

    def resume(
        self,
        run_id: str,
        *,
        follow_timers: bool = True,
        poll_s: float = 0.05,
        on_sleep: Callable[[RunResult], None] | None = None,
    ) -> RunResult:
        """Execute the run; while it sleeps on a timer (``run.sleep``) and ``follow_timers`` is
        set, stay in this process (holding no lease) and execute again when it is due or woken
        (``on_sleep`` is told each time it stays, with the deadline in ``wake_at_ms``). Waits
        for a signal or a person return at once with status ``waiting``."""
        while True:
            res = self.execute(run_id)
            if res.wait_kind == "children":
                # Children in no queue run here, one after another (the same process, as
                # SQLite's default); once one finished the parent looks again.
                if self._drive_children(run_id, follow_timers, poll_s):
                    continue
                return res
            if res.outcome in _CANCELS_CHILDREN:
                self._drive_children(run_id, follow_timers, poll_s)  # they wind down here
            if res.status != RunStatus.WAITING.value or not follow_timers:
                return res
            if res.wait_kind != "timer":
                return res
            rec = self.store.get_run(run_id)
            if rec.wake_at_ms is None:
                return res  # waits on a person or a signal: nothing to hold the process for
            if on_sleep is not None:
                on_sleep(res)
            while True:
                rec = self.store.get_run(run_id)
                if rec.status != RunStatus.WAITING.value:
                    break
                if rec.wake_at_ms is not None and rec.wake_at_ms <= self.store.now_ms():
                    break
                if rec.wake_at_ms is None:
                    return res
                due_s = max(0.0, (rec.wake_at_ms - self.store.now_ms()) / 1000)
                # A fake clock jumps to the deadline; the real one is polled for early wakes.
                self.sleep(due_s if self.fake_clock else min(poll_s, due_s))


__all__ = ["RunResult", "Runtime"]
