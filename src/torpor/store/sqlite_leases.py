"""Leases on SQLite judged by the executing process's OS lock (issue 33; see :mod:`.runlocks`).

A mixin of :class:`~torpor.store.sqlite.SQLiteStore`: every way a lease is taken (acquire,
claim), renewed and released also takes, keeps or drops the run's lock file beside the
database, and a lease whose holder's lock is held is never taken over on the strength of a
wall clock.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import LeaseHeldError
from .base import Lease
from .runlocks import RunLocks, lock_dir
from .sqlstore import SQLStore


class OSLockedLeases(SQLStore):
    """SQLStore leases with the run's OS lock (the driver has a ``path``)."""

    driver: Any

    @property
    def location(self) -> str:
        """``sqlite://`` + the database file's resolved path (see :attr:`SQLStore.location`)."""
        if self.driver.path == ":memory:":
            return f"sqlite://:memory:{id(self)}"
        return "sqlite://" + os.path.realpath(self.driver.path)

    @property
    def locks(self) -> RunLocks | None:
        """This store's run locks (:mod:`.runlocks`); None for an in-memory database."""
        if self.driver.path == ":memory:":
            return None
        found: RunLocks | None = self.__dict__.get("_locks")
        if found is None:
            found = self.__dict__["_locks"] = RunLocks(lock_dir(os.path.realpath(self.driver.path)))
            self.driver.may_take = self._may_take
        return found

    def _may_take(self, run_id: str, owner: str, epoch: int, expires_ms: int, ttl_ms: int) -> bool:
        """Whether a claim may take an expired lease: not while its holder's OS lock is held,
        unless that holder is hung (its row unchanged for its ttl, seen by successive claims
        on this process's monotonic clock)."""
        locks = self.locks
        if locks is None:
            return True
        state, _, held_ttl_ms, _ = locks.probe(run_id)
        if state != "held":
            return True
        return locks.hung(
            run_id, (owner, int(epoch), int(expires_ms)), (held_ttl_ms or ttl_ms) / 1000
        )

    def acquire_lease(
        self,
        run_id: str,
        owner: str,
        ttl_s: float,
        *,
        take_from: tuple[str, int] | None = None,
        starts: bool = True,
    ) -> Lease:
        """:meth:`SQLStore.acquire_lease`, judged by the run's OS lock first
        (:mod:`.runlocks`): a holder whose lock is held is alive and keeps the run, whatever
        the clocks say, unless hung for a ttl; one whose lock is free is dead and is taken over
        at once. The lock is then taken for this store."""
        locks = self.locks
        if locks is not None and take_from is None:
            rec = self.get_run(run_id)
            if rec.lease_owner and rec.lease_owner != owner:
                state, holder, ttl_ms, epoch = locks.probe(run_id)
                if state == "free" and (holder, epoch) == (rec.lease_owner, rec.lease_epoch):
                    take_from = (rec.lease_owner, rec.lease_epoch)  # its process died
                elif (
                    state == "held"
                    and rec.lease_expires_at_ms <= self.now_ms()
                    # Expired by this clock, yet its process lives: hung, or a clock is off.
                    and not self._hung(run_id, rec, ttl_ms or int(ttl_s * 1000))
                ):
                    raise LeaseHeldError(
                        run_id,
                        rec.lease_owner,
                        rec.lease_expires_at_ms,
                        "its process is alive and renewing (it holds the run's OS lock "
                        f"{locks.path(run_id)}), whatever the clocks say; it is taken "
                        "over when that process dies, or stops renewing for a whole lease",
                    )
        lease = super().acquire_lease(run_id, owner, ttl_s, take_from=take_from, starts=starts)
        if locks is not None:
            locks.take(run_id, owner, lease.ttl_ms, lease.epoch)
        return lease

    def _hung(self, run_id: str, rec: Any, ttl_ms: int) -> bool:
        """Watch the lease row of a holder whose lock is held for up to its ttl (``ttl_ms``)
        by this process's monotonic clock: True when it did not change (the holder renews
        every third of it at most: it is hung) or its lock was let go; False when it did."""
        first = (rec.lease_owner, rec.lease_epoch, rec.lease_expires_at_ms)
        end = time.monotonic() + ttl_ms / 1000
        while time.monotonic() < end:
            time.sleep(min(0.05, ttl_ms / 20_000))
            now = self.get_run(run_id)
            if (now.lease_owner, now.lease_epoch, now.lease_expires_at_ms) != first:
                return False
            if self.locks is not None and self.locks.probe(run_id)[0] != "held":
                return True
        return True

    def claim_next(
        self,
        owner: str,
        ttl_s: float,
        *,
        accept: Mapping[str, Sequence[str]] | None = None,
        exclude: Sequence[str] = (),
    ) -> Lease | None:
        """:meth:`SQLStore.claim_next`, never taking a run whose OS lock a live process holds
        (unless hung for a ttl; see :meth:`acquire_lease`); the lock is taken for this store."""
        locks = self.locks  # (registers the claim's judge of expired leases: _may_take)
        lease = super().claim_next(owner, ttl_s, accept=accept, exclude=exclude)
        if lease is not None and locks is not None:
            locks.take(lease.run_id, owner, lease.ttl_ms, lease.epoch)
        return lease

    def renew_lease(self, lease: Lease) -> Lease:
        """:meth:`SQLStore.renew_lease`; a holder that took a hung holder's run over takes the
        run's OS lock once that holder is gone."""
        renewed = super().renew_lease(lease)
        locks = self.locks
        if locks is not None and lease.run_id not in locks.held:
            locks.take(lease.run_id, lease.owner, lease.ttl_ms, lease.epoch)
        return renewed

    def release_lease(self, lease: Lease) -> None:
        """:meth:`SQLStore.release_lease`, then the run's OS lock."""
        try:
            super().release_lease(lease)
        finally:
            locks = self.locks
            if locks is not None:
                locks.drop(lease.run_id)

    def close(self) -> None:
        locks = self.__dict__.get("_locks")
        if locks is not None:
            locks.close()
        super().close()


__all__ = ["OSLockedLeases"]
