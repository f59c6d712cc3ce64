"""Schedule rows. A mixin of :class:`~torpor.store.sqlstore.SQLStore` (the
:class:`~torpor.store.domain.ScheduleRows` part of its protocol, which names the columns of a
row); the SQL is in the ``schedule_*`` blocks of ``sql/<dialect>.sql``. Decoding a row, naming a
damaged one and computing cron slots is :mod:`torpor.schedules`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import Driver
from .domain import Row


class ScheduleStore:
    """See :class:`~torpor.store.domain.ScheduleRows`."""

    driver: Driver
    q: dict[str, str]
    now_ms: Callable[[], int]

    def _write(self, query: str, params: dict[str, Any]) -> int:
        with self.driver.transaction() as cur:
            return self.driver.execute(cur, self.q[query], params)

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
        params = {
            "name": name,
            "workflow": workflow,
            "input": input_json,
            "cron": cron,
            "tz": tz,
            "catchup": catchup,
            "queue": queue,
            "next_fire_ms": next_fire_ms,
            "now_ms": now_ms,
        }
        self._write("schedule_upsert", params)

    def schedule_row(self, name: str) -> Row | None:
        """The schedule's row, or None."""
        with self.driver.read() as cur:
            return self.driver.fetchone(cur, self.q["schedule_get"], {"name": name})

    def schedule_rows(self) -> list[Row]:
        """Every schedule's row, by name."""
        with self.driver.read() as cur:
            return self.driver.fetchall(cur, self.q["schedule_list"], {})

    def delete_schedule(self, name: str) -> bool:
        """Delete the schedule; False if there was none."""
        return self._write("schedule_delete", {"name": name}) > 0

    def pause_schedule(
        self, name: str, *, paused: bool, next_fire_ms: int | None, now_ms: int | None = None
    ) -> None:
        """Pause, or resume with ``next_fire_ms`` (None: kept); a new generation."""
        params = {"name": name, "paused": paused, "next_fire_ms": next_fire_ms}
        self._write("schedule_pause", {**params, "now_ms": now_ms or self.now_ms()})

    def due_schedule_rows(self, now_ms: int, limit: int) -> list[Row]:
        """Rows of schedules due by ``now_ms``, earliest first."""
        with self.driver.read() as cur:
            params = {"now_ms": now_ms, "limit": limit}
            return self.driver.fetchall(cur, self.q["schedule_due"], params)

    def next_schedule_fire_ms(self) -> Any:
        """The earliest next fire (or retry) of the schedules not paused, as stored."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self.q["schedule_next_fire"], {})
        return None if row is None else row[0]

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
        """Move the schedule on (compare-and-set); False when someone else did."""
        params = {
            "name": name,
            "generation": generation,
            "prev_fire_ms": prev_fire_ms,
            "next_fire_ms": next_fire_ms,
            "last_fire_ms": last_fire_ms,
            "now_ms": now_ms,
        }
        return self._write("schedule_advance", params) > 0

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
        """Record why the schedule could not fire (compare-and-set on the values read)."""
        params = {
            "name": name,
            "generation": generation,
            "prev_fire_ms": prev_fire_ms,
            "retry_at_ms": retry_at_ms,
            "error": error,
            "now_ms": now_ms,
        }
        return self._write("schedule_fail", params) > 0


__all__ = ["ScheduleStore"]
