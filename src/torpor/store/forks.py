"""Fork rows (issue 45): a run made as a copy of another's history up to a seq, and the
columns that name its origin (``runs.fork_of``/``fork_seq``, migration 0028). A mixin of
:class:`~torpor.store.sqlstore.SQLStore` (the :class:`~.base.ForkRows` part of its
protocol); the SQL is in ``sql/forks/<dialect>.sql``. What a fork means — which points may be
forked, what it changes, how its effects are keyed — is :mod:`torpor.forks`.

The fork's row, its copied events, its ``run_forked`` event, its checkpoint, its references to
the chunks and artifacts the copied events name and the fact-ledger rows of its copied
compactions are written in one transaction: a process
killed while forking leaves the whole fork or nothing. The copied events keep their seq, time
and lease epoch; the row's epoch is the highest of them, so the fork's first lease fences off
every one (epochs only grow, as :meth:`~.maintenance.MaintenanceStore.restore_run` does).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import RunNotFoundError
from ..urls import display_url
from . import codec
from .base import Driver, RunRecord, load_queries, read_retried
from .chunkio import ChunkIO
from .ledger import write_ledger

if TYPE_CHECKING:
    from ..history import Event, RunState


@functools.cache
def _queries(dialect: str) -> dict[str, str]:
    """``{name: sql}`` from ``sql/forks/<dialect>.sql``."""
    return load_queries(dialect, Path(__file__).parent / "sql" / "forks")


class ForkStore:
    """See :class:`~.base.ForkRows` for each method's rows."""

    driver: Driver
    q: dict[str, str]
    url: str
    chunkio: ChunkIO
    now_ms: Callable[[], int]
    get_run: Callable[[str], RunRecord]

    def create_fork(
        self, run_id: str, origin: str, at_seq: int, events: Sequence[Event], state: RunState
    ) -> bool:
        from ..history import ContextCompacted

        q = _queries(self.driver.dialect)
        sink: dict[str, str] = {}
        rows = [codec.encode(e, sink) for e in events]
        arts = codec.artifact_refs([r["payload"] for r in rows] + list(sink.values()), events)
        checkpoint = codec.checkpoint_text(state, sink)
        params: dict[str, Any] = {
            "run_id": run_id,
            "origin": origin,
            "fork_seq": at_seq,
            "workflow": state.workflow,
            "version": state.version,
            "status": state.status.value,
            "wake_at_ms": state.wait.deadline_ms if state.wait is not None else None,
            "last_seq": state.seq,
            "checkpoint": checkpoint,
            "lease_epoch": max(e.epoch for e in events),
            "now_ms": self.now_ms(),
        }
        with self.driver.transaction() as cur:
            if not self.driver.execute(cur, q["fork_insert_run"], params):
                if self.driver.fetchone(cur, self.q["child_parent"], {"run_id": origin}) is None:
                    raise RunNotFoundError(f"no run {origin!r} in {display_url(self.url)}")
                return False
            self.chunkio.write(cur, run_id, sink, arts)
            for r in rows:
                self.driver.execute(cur, self.q["insert_event"], r)
            for e in events:  # the fact-ledger rows of copied compactions (issue 30)
                p = e.payload
                if isinstance(p, ContextCompacted) and p.ledger:
                    write_ledger(self.driver, cur, run_id, e.seq, e.at_ms, p.ledger)
            self.driver.fetchone(cur, self.q["notify_wake"], {"run_id": run_id})
        self.chunkio.wrote(run_id, sink, arts)
        return True

    @read_retried
    def fork_origin(self, run_id: str) -> tuple[str, int] | None:
        q = _queries(self.driver.dialect)
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, q["fork_origin"], {"run_id": run_id})
        return None if row is None or row[0] is None else (str(row[0]), int(row[1]))

    @read_retried
    def run_forks(self, origin: str, *, limit: int = 1000) -> list[RunRecord]:
        q = _queries(self.driver.dialect)
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, q["fork_runs"], {"origin": origin, "limit": limit})
        out = []
        for (fid,) in rows:
            try:
                out.append(self.get_run(str(fid)))
            except RunNotFoundError:
                continue  # deleted (retention) since it was listed: not a fork any more
        return out


__all__ = ["ForkStore"]
