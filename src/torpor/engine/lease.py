"""Holding a run's lease while it executes (DESIGN.md §1, lease; G3).

A :class:`Heartbeat` thread renews the lease every ``heartbeat_s`` (at most half the ttl: one
late renewal must not lose it) and notices inbox messages posted meanwhile. Renewals that
failed (the store's connection lost) are counted on the run once the store answers again
(:meth:`~torpor.store.base.Store.note_infra`: ``show`` and the console print it). A renewal
the store refuses means another owner took the run over: the journal is told, and the
execution stops at its next boundary or write without writing anything (its writes would be
fenced off anyway).
Who an owner is, and whether a holder provably died, is :mod:`torpor.owners`.

Right before an effect is called, :func:`before_effect` checks by this process's monotonic
clock that at least a third of the lease's ttl is left since its last successful renewal (or
its acquisition); otherwise it renews first, and stops (LeaseLostError, nothing called) when it
cannot. A process paused for longer than its lease — SIGSTOP, a VM migration, a long GC pause,
a laptop lid — so wakes up, finds its lease too old, tries to renew, is refused because another
worker took the run over, and does not call the effect that worker is about to reconcile.

What remains: a pause *between* that check and the call itself (at most the rest of the
effect's own code before it reaches the outside world) can still let a late call through. The
remedy is the fencing token: an effect that takes a ``fencing_token`` parameter gets the
lease epoch, and a service that remembers the highest token it saw per key refuses the stale
caller (Kleppmann's fencing tokens; see :meth:`torpor.Run.effect`).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from .. import faults
from ..errors import LeaseLostError, StoreFileChangedError, TorporError
from .cancel import CancelWatch
from .journal import Journal

log = logging.getLogger("torpor.lease")

#: The share of the ttl that must be left, by the monotonic clock, before an effect is called.
EFFECT_MARGIN = 1 / 3

#: Set only by ``bench/chaos_lease.py`` to measure what the check prevents (never in use).
_SKIP_CHECK = os.environ.get("TORPOR_BENCH_SKIP_EFFECT_LEASE_CHECK", "") == "1"


def before_effect(j: Journal, sid: str) -> None:
    """Make sure ``j`` may call effect ``sid`` now (see the module docstring): the lease not
    lost, the database file the one opened (SQLite), and at least :data:`EFFECT_MARGIN` of the
    ttl left since the last renewal by the monotonic clock — else renewed now.

    Raises LeaseLostError (the renewal was refused or failed: another worker may hold the run)
    or StoreFileChangedError; nothing is called then.
    """
    faults.point("effect.calling")
    if _SKIP_CHECK:
        return
    if j.lost is not None:
        raise j.lost
    j.store.check_database_file()
    lease = j.lease
    left_ms = lease.ttl_ms - (time.monotonic() - lease.renewed_mono) * 1000
    if left_ms >= lease.ttl_ms * EFFECT_MARGIN:
        return
    try:
        j.lease = j.store.renew_lease(lease)
    except LeaseLostError as exc:
        j.lost = exc
        raise
    except TorporError as exc:
        raise LeaseLostError(
            j.run_id,
            lease.epoch,
            f"{left_ms / 1000:.1f} s of the lease left before effect {sid!r} and it could not "
            f"be renewed ({exc}); the effect was not called",
        ) from exc


class Heartbeat:
    """Renews ``journal.lease`` in a daemon thread until :meth:`stop`."""

    def __init__(self, journal: Journal, interval_s: float, watch: CancelWatch | None = None):
        self.journal = journal
        self.interval_s = interval_s
        #: Told after each renewal (a cancel that reaches a busy step: :mod:`.cancel`).
        self.watch = watch
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
        failed = False  # renewals failed since the last one that went through
        while not self._stop.wait(self.interval_s):
            began = time.monotonic()
            try:
                faults.point("lease.renewing")
                j.lease = j.store.renew_lease(j.lease)
                faults.point("lease.renewed")
                if failed:  # the store answers again: the outage leaves a trace on the run
                    failed = False
                    j.store.note_infra(j.run_id)
                if j.on_renewed is not None:
                    # This host's own bookkeeping (the high-water mark file), not the store: a
                    # failure here is logged and retried at the next renewal, never counted as
                    # a store outage (which note_infra would record on the run).
                    try:
                        j.on_renewed(j)
                    except Exception as exc:
                        log.warning("after renewing the lease of run %s: %s", j.run_id, exc)
                pending = j.store.count_pending_inbox(j.run_id) > 0
                if pending:
                    j.inbox_dirty = True
                j.flush_idle()  # an effect's observation still in this process: write it
                if self.watch is not None:
                    self.watch.beat(pending)
            except (LeaseLostError, StoreFileChangedError) as exc:
                j.lost = exc
                # Lost during an outage of the store's connection — renewals that failed, or
                # one that waited longer than a beat for a connection: say so on the run.
                if failed or time.monotonic() - began > self.interval_s:
                    j.store.note_infra(j.run_id)
                return
            except Exception:  # a transient store error: the next renewal retries
                failed = True
                continue
