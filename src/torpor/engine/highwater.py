"""A store checked against this host's high-water mark (issue 33, G16; :mod:`torpor.marks`).

:meth:`HighWater.check` runs when an execution has taken a run and loaded it — before anything
of the workflow runs: it pins the store's identity the first time, and says why the store is
behind when its identity is not the pinned one or the run's history ends before this host's
mark for it (the caller then records that on the run and stops: no effect, no decision
consumed). :meth:`HighWater.advance` raises the mark when an execution ends and at its lease
renewals — written by a writer thread right after, off the execution's path, several runs' in
one fsynced write; never once per effect. A process killed before that write loses the last
advance (a window of one write, after the execution's end or a renewal).
:func:`audit` is what ``torpor doctor`` reports; :func:`accept` is ``torpor store
accept-restore``.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import MarkError, RunNotFoundError, TorporError
from ..history import RunState
from ..marks import Mark, MarkFile, now_ms
from ..store.base import Store
from .journal import Journal

log = logging.getLogger("torpor.highwater")

#: The tail of every "behind" message: what to do.
WHAT_NOW = (
    "no effect runs and no decision is consumed on this store until a person accepts it: "
    "`torpor store accept-restore --as NAME` (`torpor doctor` lists what is behind)"
)


def committed_seq(j: Journal) -> int:
    """Where ``j``'s run's history is known committed up to (:attr:`Journal.committed_seq`:
    never an effect's deferred observation not yet written, nor an append that failed)."""
    return j.committed_seq


def decision_binding(
    config_dir: Path, store: Store, state: RunState, approval_id: str
) -> tuple[str, str]:
    """``(store identity, request nonce)`` a decision on ``approval_id`` of the run in ``state``
    signs (version 2 of the signed bytes, :mod:`torpor.signing`): the identity this host pinned
    for the store when it has a mark of it, else the database's; the request's nonce."""
    sid = store.store_id()
    file = mark_file(config_dir, store)
    with contextlib.suppress(MarkError):
        mark = file.load() if file is not None else None
        if mark is not None:
            sid = mark.store_id
    info = state.approvals.get(approval_id)
    return sid, info.nonce if info is not None else ""


def mark_file(config_dir: Path, store: Store) -> MarkFile | None:
    """This host's mark of ``store`` (None for an in-memory database, which has no past)."""
    location = store.location
    if ":memory:" in location:
        return None
    return MarkFile(config_dir / "marks", location)


class HighWater:
    """``store`` against this host's mark in ``config_dir`` (see the module docstring)."""

    def __init__(self, config_dir: Path, store: Store):
        self.store = store
        self.file = mark_file(config_dir, store)
        self._store_id: str | None = None
        self._pending: dict[str, int] = {}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._wake = threading.Event()
        self._writer: threading.Thread | None = None
        self._closed = False

    def store_id(self) -> str:
        """The store's identity as the database says (read once)."""
        if self._store_id is None:
            self._store_id = self.store.store_id()
        return self._store_id

    def check(self, run_id: str, seq: int) -> str | None:
        """Why the store is behind this host's mark (one line, with what to do), or None.
        ``seq``: where run ``run_id``'s loaded history ends."""
        if self.file is None:
            return None
        sid = self.store_id()
        mark = self.file.load()
        if mark is None:
            self.file.update(sid, lambda m: False)  # pin the identity: first sight
            return None
        why = mark.behind or _why(mark, sid, run_id, seq)
        if not why:
            return None
        if not mark.behind:
            self.file.update(sid, lambda m: _set_behind(m, why))
        return f"{why}; {WHAT_NOW}"

    def reconcile_until(self, run_id: str) -> int:
        """After an accepted restore: the seq this host had seen of ``run_id`` (its new effects
        are reconciled first until its history passes it), else 0."""
        mark = self.file.load() if self.file is not None else None
        return mark.reconcile.get(run_id, 0) if mark is not None else 0

    def advance(self, run_id: str, seq: int) -> None:
        """Raise the run's mark to ``seq`` (a committed seq of its history): noted at once,
        written (and fsynced) by this mark's writer thread right after, off the execution's
        path — several runs' advances in one write — and by :meth:`close`."""
        if self.file is None:
            return
        with self._lock:
            if seq <= self._pending.get(run_id, 0):
                return
            self._pending[run_id] = seq
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_behind, daemon=True, name="torpor-high-water"
                )
                self._writer.start()
                atexit.register(_flush_at_exit, weakref.ref(self))
        self._wake.set()

    def flush(self) -> None:
        """Write the advances noted so far (MarkError when the mark cannot be written)."""
        with self._flushing:
            with self._lock:
                batch, self._pending = self._pending, {}
            if not batch or self.file is None:
                return
            mark = self.file.load()
            if mark is not None and (
                mark.behind or all(mark.seq(r) >= s for r, s in batch.items())
            ):
                return  # nothing new (or a store behind, which advances nothing until accepted)
            at = now_ms()
            self.file.update(
                self.store_id(),
                lambda m: not m.behind and any([m.advance(r, s, at) for r, s in batch.items()]),
            )

    def _write_behind(self) -> None:
        while not self._closed:
            self._wake.wait()
            self._wake.clear()
            try:
                self.flush()
            except TorporError as exc:  # the next advance, or close, tries again
                log.warning("the high-water mark was not advanced: %s", exc)

    def close(self) -> None:
        """Write what is pending and stop the writer thread."""
        self._closed = True
        self._wake.set()
        with contextlib.suppress(TorporError):
            self.flush()


def _flush_at_exit(ref: weakref.ref[HighWater]) -> None:
    hw = ref()
    if hw is not None:
        with contextlib.suppress(Exception):
            hw.flush()


def _why(mark: Mark, store_id: str, run_id: str, seq: int) -> str:
    if mark.store_id != store_id:
        return (
            f"store {mark.location} has identity {store_id}, but this host pinned "
            f"{mark.store_id} there: it was recreated or replaced"
        )
    seen = mark.seq(run_id)
    if seq < seen:
        return (
            f"run {run_id!r}'s history ends at seq {seq}, but this host saw seq {seen} "
            f"committed in store {mark.location}: it was rolled back or restored from an "
            "older copy"
        )
    return ""


def _set_behind(m: Mark, why: str) -> bool:
    m.behind = why
    return True


@dataclass(frozen=True)
class Behind:
    """What :func:`audit` found: the store's identity against the pinned one, and each run whose
    history ends before this host's mark (``(run id, seq now or -1 when gone, seq seen)``)."""

    location: str
    pinned: str
    store_id: str
    flagged: str
    runs: tuple[tuple[str, int, int], ...]

    @property
    def recreated(self) -> bool:
        return self.pinned != self.store_id

    def __bool__(self) -> bool:
        return bool(self.recreated or self.flagged or self.runs)


def _seq_now(store: Store, run_id: str, seen: int) -> int:
    """Where the run's history ends, as far as ``seen`` matters (-1: the run is gone)."""
    try:
        store.get_run(run_id)
    except RunNotFoundError:
        return -1
    if store.read_events(run_id, after_seq=seen - 1, limit=1):
        return seen
    return store.load(run_id).seq


def audit(config_dir: Path, store: Store) -> Behind | None:
    """This host's mark against the store (None: no mark here yet). Reads each marked run's
    row and one event: at most :data:`torpor.marks.MAX_RUNS` of them."""
    file = mark_file(config_dir, store)
    mark = file.load() if file is not None else None
    if mark is None:
        return None
    runs = []
    for run_id in sorted(mark.runs):
        seen = mark.seq(run_id)
        now = _seq_now(store, run_id, seen)
        if 0 <= now < seen:  # (a run gone: deleted by retention, or never in this copy)
            runs.append((run_id, now, seen))
    return Behind(mark.location, mark.store_id, store.store_id(), mark.behind, tuple(runs))


def accept(config_dir: Path, store: Store, by: str, reason: str = "") -> dict[str, Any]:
    """Record a person's decision that ``store`` as it is now is the one to go on with: pin its
    identity, lower each run's mark to where its history ends (remembering the seq seen: its new
    effects are reconciled first), clear the flag. Returns the decision recorded."""
    file = mark_file(config_dir, store)
    if file is None:
        return {}
    found = audit(config_dir, store)
    sid = store.store_id()
    decision: dict[str, Any] = {
        "by": by,
        "at_ms": now_ms(),
        "reason": reason,
        "store_id": sid,
        "was_store_id": found.pinned if found else sid,
        "was_flagged": found.flagged if found else "",
        "runs": {r: [now, seen] for r, now, seen in found.runs} if found else {},
    }

    def change(m: Mark) -> bool:
        if m.store_id != sid:  # another store stood here: nothing this host saw applies
            m.reconcile = {r: m.seq(r) for r in m.runs}
            m.runs = {}
            m.store_id = sid
        for run_id, now, seen in found.runs if found else ():
            m.runs[run_id] = [now, now_ms()]
            m.reconcile[run_id] = max(seen, m.reconcile.get(run_id, 0))
        m.behind = ""
        m.accepted.append(decision)
        return True

    file.update(sid, change)
    return decision


__all__ = [
    "WHAT_NOW",
    "Behind",
    "HighWater",
    "accept",
    "audit",
    "committed_seq",
    "decision_binding",
    "mark_file",
]
