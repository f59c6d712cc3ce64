"""Retention and garbage collection: ``torpor gc``, also run by workers on a schedule.

One pass (:func:`collect`):

1. **Retention.** For each workflow with a policy (:class:`~torpor.store.domain.
   RetentionPolicy`, set with ``torpor retention`` or :func:`set_policy`; a workflow without
   one keeps its runs forever), its finished runs past the policy are archived first when the
   policy names an archive URL (:func:`archive_run`: the history as JSON Lines, which
   :func:`restore_archive` brings back) and then deleted. A pending, running or waiting run is
   never deleted, nor a finished one a person can still reopen (``unresolved``, ``blocked``).
2. **Other owners.** Collectors registered with :func:`register_collector` run next. Episodes
   keep the artifacts they name (``blob_refs`` rows owned by ``episode:<id>``, written and
   pruned with the episode); their collector drops the rows of episodes deleted another way.
3. **Chunks** no run refers to, unused for the grace period, are deleted.
4. **Artifacts** (files in the artifact store) no run refers to — nor any pending inbox message
   — and older than the grace period are deleted, with temporary files left by a crash. An
   artifact store belongs to one database: shared by two, each would collect the other's.
5. **Pages.** SQLite gives the freed pages back to the file system (``PRAGMA
   incremental_vacuum``; a file made before torpor 0006 needs ``torpor gc --vacuum`` once).

Collection never races a run: a chunk is written in the same transaction as the run's
reference to it, and a value offloaded to the artifact store (a large step result, an
artifact, a large signal payload) is referenced by its run *before* it is written (an
in-flight pin, :meth:`~torpor.store.maintenance.MaintenanceStore.pin_blob`), so whatever the
grace a blob or chunk a run that is not finished refers to, or is about to, is kept. The grace
period (default one hour) is a second guard, for what nothing pins: a file copied into the
artifact store by hand, the clock of a remote artifact store (its modification times) running
behind this machine's. ``torpor gc`` refuses a grace below :data:`GRACE_FLOOR_S` without
``--force``. A pass that deletes anything first runs the store's quick integrity check
(:meth:`~torpor.store.base.Store.check_sound`): a damaged file is never rewritten.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

from .artifacts import ArtifactStore
from .errors import ConfigError
from .store.base import Store
from .store.chunkio import GRACE_MS
from .store.domain import RetentionPolicy

#: The shortest grace period (seconds) ``torpor gc`` accepts without ``--force``: below it a
#: blob another machine wrote just now can look old when the artifact store's clock is behind
#: this one's (see the module docstring).
GRACE_FLOOR_S = 300.0

#: ``fn(store, dry_run) -> one line saying what it did`` (or would do): collectors of owners of
#: stored data other than runs (episodes), run by every pass after run retention.
COLLECTORS: list[Callable[[Store, bool], str]] = []


def register_collector(fn: Callable[[Store, bool], str]) -> Callable[[Store, bool], str]:
    """Run ``fn(store, dry_run)`` in every collection pass (a decorator too). A collector
    deletes what its owner's policy no longer keeps, including its own ``blob_refs`` rows (owner
    ids that are not run ids, e.g. ``episode:<id>``); chunks and artifacts no row names any
    more are then collected by the pass."""
    if fn not in COLLECTORS:
        COLLECTORS.append(fn)
    return fn


@register_collector
def _episodes(store: Store, dry_run: bool) -> str:
    """The episodes' references (:func:`torpor.episodes.gc.collect`), imported only when a pass
    runs: a worker's cold resume never loads episodes."""
    from .episodes.gc import collect as collect_episodes

    return collect_episodes(store, dry_run)


@dataclass
class GcReport:
    """What one pass did (or, with ``dry_run``, would do)."""

    dry_run: bool
    #: Finished runs past their workflow's retention: deleted (or to be).
    runs: list[str] = field(default_factory=list)
    #: ``run id -> archive URL`` of the runs archived before deletion.
    archived: dict[str, str] = field(default_factory=dict)
    chunks: int = 0
    chunk_bytes: int = 0
    artifacts: int = 0
    artifact_bytes: int = 0
    #: What each registered collector said.
    others: list[str] = field(default_factory=list)
    #: What was done to give pages back (SQLite).
    pages: str = ""


def set_policy(
    store: Store,
    workflow: str,
    *,
    keep_days: float | None = None,
    keep_last: int | None = None,
    archive_url: str | None = None,
) -> RetentionPolicy:
    """Keep ``workflow``'s finished runs ``keep_days`` after they finished and/or the
    ``keep_last`` most recent (a run outside either limit set is deleted); neither keeps them
    forever. ``archive_url``: an fsspec folder URL their history is archived to first.
    ConfigError for a bad limit."""
    if not workflow:
        raise ConfigError("retention needs a workflow name")
    policy = RetentionPolicy(workflow, keep_days, keep_last, archive_url)
    store.set_retention_policy(policy)
    return policy


def archive_path(url: str, run_id: str) -> str:
    """Where :func:`archive_run` writes ``run_id``'s archive under the folder ``url``."""
    return f"{url.rstrip('/')}/{quote(run_id, safe='')}.jsonl"


def archive_run(store: Store, run_id: str, url: str) -> str:
    """Write ``run_id``'s history (and run row) to ``<url>/<run id>.jsonl`` (any fsspec URL),
    complete before it is visible (a temporary name, then a rename). Returns the file's URL.
    Artifacts the run refers to are not copied."""
    import fsspec

    rec = dataclasses.asdict(store.get_run(run_id))
    lines = store.archive_lines(rec, store.iter_events(run_id))
    target = archive_path(url, run_id)
    fs, path = fsspec.core.url_to_fs(target)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with fs.open(tmp, "w") as f:
        for line in lines:
            f.write(line + "\n")
    fs.mv(tmp, path)
    return target


def restore_archive(store: Store, url: str) -> str:
    """Bring back the run archived at ``url`` (a file :func:`archive_run` wrote); returns its
    id. StoreError when a run of that id exists; CorruptRecordError for a file that is not a
    readable archive."""
    import fsspec

    store.check_sound()  # a damaged file is never written to (DamagedStoreError)
    try:
        with fsspec.open(url, "r") as f:
            return store.restore_run(f, url)
    except FileNotFoundError:
        raise ConfigError(f"archive {url}: no such file") from None


def collect(
    store: Store,
    artifacts: ArtifactStore | None = None,
    *,
    dry_run: bool = False,
    grace_s: float = GRACE_MS / 1000,
    vacuum: bool = False,
    limit: int = 1000,
    check: bool = True,
) -> GcReport:
    """One collection pass (see the module docstring); at most ``limit`` runs per workflow.
    ``dry_run``: change nothing, report what would go (chunks and artifacts that deleting the
    runs would free are not counted). ``vacuum``: convert an SQLite file made before torpor
    chose incremental auto-vacuum (a full VACUUM, once). ``check``: run the store's quick
    integrity check first (DamagedStoreError, nothing deleted, for a damaged SQLite file);
    False only when the caller just did (``torpor gc`` checks before it opens the file)."""
    if not math.isfinite(grace_s) or grace_s < 0:
        raise ConfigError(f"gc grace period must be a number of seconds >= 0, not {grace_s}")
    if check and not dry_run:
        store.check_sound()  # a damaged file is never rewritten (DamagedStoreError)
    report = GcReport(dry_run)
    for policy in store.retention_policies():
        for run_id in store.expired_runs(policy, limit):
            if dry_run:
                report.runs.append(run_id)
                continue
            if policy.archive_url:
                report.archived[run_id] = archive_run(store, run_id, policy.archive_url)
            if store.delete_run(run_id):
                report.runs.append(run_id)
    for fn in list(COLLECTORS):
        report.others.append(fn(store, dry_run))
    grace_ms = int(grace_s * 1000)
    if dry_run:
        report.chunks, report.chunk_bytes = store.collectable_chunks(grace_ms)
    else:
        report.chunks, report.chunk_bytes = store.collect_chunks(grace_ms)
    if artifacts is not None:
        report.artifacts, report.artifact_bytes = _collect_artifacts(
            artifacts, store.referenced_artifacts(), grace_s, dry_run
        )
    if not dry_run:
        report.pages = store.reclaim_pages(convert=vacuum)
    return report


def _mtime(info: dict[str, Any]) -> float | None:
    """A file's modification time (epoch seconds) from an fsspec ``info``, if it has one."""
    for key in ("mtime", "LastModified", "updated", "created"):
        v = info.get(key)
        if isinstance(v, int | float):
            return float(v)
        if isinstance(v, datetime):
            return v.timestamp()
        if isinstance(v, str):
            try:
                return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def _collect_artifacts(
    artifacts: ArtifactStore, referenced: set[str], grace_s: float, dry_run: bool
) -> tuple[int, int]:
    """Delete (or count) the blobs nothing refers to, older than ``grace_s`` (the file
    system's clock); ``(count, bytes)``. A blob without a modification time is kept."""
    fs, root = artifacts.fs, artifacts.root
    base = f"{root}/sha256"
    if not fs.exists(base):
        return 0, 0
    cutoff = time.time() - grace_s
    count = size = 0
    for path, info in fs.find(base, detail=True).items():
        name = os.path.basename(path)
        digest = name.split(".", 1)[0]
        if name == digest and digest in referenced:
            continue
        mtime = _mtime(info)
        if mtime is None or mtime >= cutoff:
            continue
        count += 1
        size += int(info.get("size") or 0)
        if not dry_run:
            fs.rm(path)
    return count, size


__all__ = [
    "COLLECTORS",
    "GRACE_FLOOR_S",
    "GRACE_MS",
    "GcReport",
    "archive_path",
    "archive_run",
    "collect",
    "register_collector",
    "restore_archive",
    "set_policy",
]
