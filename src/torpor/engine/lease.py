"""Holding a run's lease while it executes (DESIGN.md §1, lease; G3).

A :class:`Heartbeat` thread renews the lease every ``heartbeat_s`` (at most half the ttl: one
late renewal must not lose it) and notices inbox messages posted meanwhile. A renewal the store
refuses means another owner took the run over: the journal is told, and the execution stops at
its next boundary or write without writing anything (its writes would be fenced off anyway).
Who an owner is, and whether a holder provably died, is :mod:`torpor.owners`.
"""

from __future__ import annotations

import threading

from .. import faults
from ..errors import LeaseLostError
from .journal import Journal


class Heartbeat:
    """Renews ``journal.lease`` in a daemon thread until :meth:`stop`."""

    def __init__(self, journal: Journal, interval_s: float):
        self.journal = journal
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, daemon=True, name=f"lease-{journal.run_id}"
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _beat(self) -> None:
        j = self.journal
        while not self._stop.wait(self.interval_s):
            try:
                faults.point("lease.renewing")
                j.lease = j.store.renew_lease(j.lease)
                faults.point("lease.renewed")
                if j.store.count_pending_inbox(j.run_id):
                    j.inbox_dirty = True
            except LeaseLostError as exc:
                j.lost = exc
                return
            except Exception:  # a transient store error: the next renewal retries
                continue
