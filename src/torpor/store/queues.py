"""Queue rows: definitions and the queue columns of runs. A mixin of
:class:`~torpor.store.sqlstore.SQLStore` (the :class:`~torpor.store.domain.QueueRows` part of
its protocol); the SQL is in the ``queue_*`` blocks of ``sql/<dialect>.sql``. What the rows
mean — limits validated, a damaged row named, why a run is queued — is :mod:`torpor.queues`.
"""

from __future__ import annotations

from collections.abc import Callable

from .base import Driver
from .domain import QueueView, Row


class QueueStore:
    """See :class:`~torpor.store.domain.QueueRows` for each method's rows."""

    driver: Driver
    q: dict[str, str]
    now_ms: Callable[[], int]

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
        """Define queue ``name`` with these limits, replacing any it had."""
        params = {
            "name": name,
            "concurrency": concurrency,
            "key_concurrency": key_concurrency,
            "rate_limit": rate_limit,
            "rate_period_ms": rate_period_ms,
            "key_rate_limit": key_rate_limit,
            "key_rate_period_ms": key_rate_period_ms,
            "now_ms": self.now_ms(),
        }
        with self.driver.transaction() as cur:
            self.driver.execute(cur, self.q["queue_upsert"], params)

    def queue_row(self, name: str) -> Row | None:
        """The queue's row, or None when it is not defined."""
        with self.driver.read() as cur:
            return self.driver.fetchone(cur, self.q["queue_get"], {"name": name})

    def queue_rows(self) -> list[Row]:
        """Every queue's row, by name."""
        with self.driver.read() as cur:
            return self.driver.fetchall(cur, self.q["queue_list"], {})

    def delete_queue(self, name: str) -> bool:
        """Forget the queue; False if it was not defined."""
        with self.driver.transaction() as cur:
            return self.driver.execute(cur, self.q["queue_delete"], {"name": name}) > 0

    def run_queue_row(self, run_id: str) -> Row | None:
        """The run's queue columns, or None for an unknown run."""
        with self.driver.read() as cur:
            return self.driver.fetchone(cur, self.q["queue_run"], {"run_id": run_id})

    def queue_view(self, run_id: str, limit: int) -> QueueView | None:
        """The run's :class:`~torpor.store.domain.QueueView` in one snapshot. Its queue's
        rows are read only for an unstarted pending run of a queue; the recent starts only when
        the queue has a rate limit (within its longest period, by the store's clock)."""
        d, q = self.driver, self.q
        with d.read() as cur:
            run = d.fetchone(cur, q["queue_run"], {"run_id": run_id})
            if run is None:
                return None
            status, queue, _key, _priority, _not_before, started_at_ms = run
            if status != "pending" or started_at_ms is not None or not isinstance(queue, str):
                return QueueView(run)
            row = d.fetchone(cur, q["queue_get"], {"name": queue})
            if row is None:
                return QueueView(run)
            active = d.fetchall(cur, q["queue_active"], {"queue": queue, "limit": limit})
            periods = [v for v in (row[4], row[6]) if isinstance(v, int) and v > 0]
            recent: list[Row] = []
            if periods:
                params = {"queue": queue, "since_ms": self.now_ms() - max(periods), "limit": limit}
                recent = d.fetchall(cur, q["queue_recent_starts"], params)
        return QueueView(run, row, tuple(active), tuple(recent))

    def runs_queue_columns(self, limit: int) -> list[Row]:
        """``(run id, *queue columns)`` of up to ``limit`` runs, by run id."""
        with self.driver.read() as cur:
            return self.driver.fetchall(cur, self.q["queue_columns"], {"limit": limit})

    def damaged_pending_queue_columns(self, limit: int) -> list[Row]:
        """As :meth:`runs_queue_columns`, for pending runs whose queue columns are damaged."""
        with self.driver.read() as cur:
            return self.driver.fetchall(cur, self.q["queue_damaged_pending"], {"limit": limit})


__all__ = ["QueueStore"]
