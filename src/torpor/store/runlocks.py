"""Liveness without clocks on SQLite (issue 33, G16): the executing process holds an OS lock.

A process that takes a run's lease on a SQLite store also takes an exclusive ``flock(2)`` on a
per-run lock file beside the database (``<db>-runlocks/<sha256(run id)[:32]>.lock``, holding
the owner id, run id, lease ttl and epoch as text), and keeps it until it releases the lease.
The kernel drops the lock when the process dies, however it dies (``kill -9``), and only then. So,
on one host, whether the holder of a lease is alive is a fact, not a reading of two clocks:

- a lock that is **held** means the holder is alive: its lease is not taken over, even when
  it looks expired by this process's wall clock (a clock skewed by 29 s or 1 h, issue 33
  attack 1) — unless the holder is *hung*: its lease row has not been renewed for a whole
  lease ttl by this process's monotonic clock (no wall clock is read for that). Lease time
  then only bounds hangs (SIGSTOP, a frozen VM), and the hung holder, once it wakes, finds its
  lease lost before its next effect (:func:`torpor.engine.lease.before_effect`);
- a lock that is **free** while its file names the lease's owner and epoch means that owner
  died (a file is never removed: what it names proves nothing once the lease row moved on):
  ``resume`` and workers take the run over at once, without waiting out the lease;
- no lock file (a holder of an older torpor, or a lease being taken right now) proves
  nothing: the earlier rules apply (:func:`torpor.owners.owner_is_dead`, then lease expiry).

flock locks belong to an open file description: two stores in one process on one run are two
holders, as two processes would be. They need a local file system (NFS and other network file
systems do not carry them reliably — nor SQLite's own locks). PostgreSQL keeps the database
clock (``now()`` of the one server) and needs none of this.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

#: How long :meth:`RunLocks.take` keeps trying while another process briefly probes the lock.
TAKE_TRIES = 50


def lock_dir(db_path: str) -> Path:
    """The folder of a SQLite file's run locks: ``<db>-runlocks`` beside it."""
    return Path(db_path + "-runlocks")


@dataclass
class RunLocks:
    """The run locks of one SQLite file, as one store instance sees them."""

    dir: Path
    held: dict[str, int] = field(default_factory=dict)
    #: run id -> ((owner, epoch, expires at ms) last seen while its lock was held, monotonic s
    #: when first seen so): a lease row unchanged for a ttl means a hung holder.
    seen: dict[str, tuple[tuple[str, int, int], float]] = field(default_factory=dict)

    def path(self, run_id: str) -> Path:
        digest = hashlib.sha256(run_id.encode()).hexdigest()[:32]
        return self.dir / f"{digest}.lock"

    def take(self, run_id: str, owner: str, ttl_ms: int = 0, epoch: int = 0) -> bool:
        """Lock ``run_id``'s file for this store (True), or False when another open file holds
        it (a hung holder that was taken over; the next renewal tries again). Never blocks for
        long: a probe holds the lock for microseconds."""
        if run_id in self.held:
            self._write(self.held[run_id], owner, run_id, ttl_ms, epoch)
            return True
        path = self.path(run_id)
        try:
            self.dir.mkdir(mode=0o755, exist_ok=True)
        except OSError:
            return False  # a read-only folder: the earlier rules apply
        for _ in range(TAKE_TRIES):
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                time.sleep(0.001)
                continue
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # unlinked by a releaser between our open and our lock: again
                os.close(fd)
                continue
            self._write(fd, owner, run_id, ttl_ms, epoch)
            self.held[run_id] = fd
            return True
        return False

    @staticmethod
    def _write(fd: int, owner: str, run_id: str, ttl_ms: int, epoch: int) -> None:
        data = f"{owner}\n{run_id}\n{ttl_ms}\n{epoch}\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)

    def drop(self, run_id: str) -> None:
        """Release ``run_id``'s lock. The file stays (removing it costs a journaled metadata
        write, milliseconds on a busy disk, on every release): what it names — the last
        holder and its epoch — proves nothing once the lease row moved on."""
        fd = self.held.pop(run_id, None)
        if fd is not None:
            os.close(fd)  # (closing releases the flock)

    def probe(self, run_id: str) -> tuple[str, str, int, int]:
        """``("held", owner, ttl ms, epoch)``: a live process holds the lock (for a lease of
        that ttl and epoch); ``("free", owner, ttl ms, epoch)``: the file is there, unlocked
        (its last holder, ``owner`` at ``epoch``, is dead or gave it up); ``("none", "", 0,
        0)``: no lock file, or this store holds it (it proves nothing of another owner in
        this process)."""
        path = self.path(run_id)
        if run_id in self.held:
            # This store holds it: one process, for another owner of its own (tests do that);
            # the lock tells nothing about that owner, the earlier rules apply.
            return "none", "", 0, 0
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return "none", "", 0, 0
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return ("held", *self._read(path))
            return ("free", *self._read(path))
        finally:
            os.close(fd)

    @staticmethod
    def _read(path: Path) -> tuple[str, int, int]:
        try:
            lines = path.read_text(errors="replace").split("\n")
        except OSError:
            return "", 0, 0
        ttl = lines[2] if len(lines) > 2 else ""
        epoch = lines[3] if len(lines) > 3 else ""
        return lines[0], int(ttl) if ttl.isdigit() else 0, int(epoch) if epoch.isdigit() else 0

    def hung(self, run_id: str, row: tuple[str, int, int], ttl_s: float) -> bool:
        """Whether a holder whose lock is held is hung: its lease row ``(owner, epoch, expires
        at ms)`` has been seen unchanged for ``ttl_s`` by this process's monotonic clock."""
        now = time.monotonic()
        prev = self.seen.get(run_id)
        if prev is None or prev[0] != row:
            self.seen[run_id] = (row, now)
            return False
        return now - prev[1] >= ttl_s

    def close(self) -> None:
        for run_id in list(self.held):
            self.drop(run_id)


__all__ = ["RunLocks", "lock_dir"]
