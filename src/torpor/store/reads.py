"""Reading a run's history: its events page by page, its state (the latest engine checkpoint
plus the events after it, G8), completions of steps. A mixin of
:class:`~torpor.store.sqlstore.SQLStore`, kept apart so each file reads in one sitting; it uses
the store's driver, named queries and chunk reader.

A history with a hole in it, a corrupt row or an impossible history is refused with
:class:`~torpor.errors.CorruptRecordError` naming the run and the seq; a checkpoint that cannot
be trusted is passed over (the state is folded from the history) and logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import CorruptRecordError, RunNotFoundError, TransitionError

if TYPE_CHECKING:
    from ..history import Event, RunState

from ..urls import display_url
from . import codec
from .base import Completion, Driver, read_retried
from .chunkio import ChunkIO
from .chunks import Fetch

log = logging.getLogger("torpor.store")


class HistoryReads:
    """The read side of a run's history (see the module docstring)."""

    driver: Driver
    url: str
    q: dict[str, str]
    chunkio: ChunkIO

    @read_retried
    def read_events(self, run_id: str, after_seq: int = 0, limit: int = 1_000_000) -> list[Event]:
        """Events with ``seq > after_seq`` in order. Raises CorruptRecordError on a bad row, and
        on a history with a hole in it: seqs are dense, and reach at least the seq the run row
        last recorded — a damaged database that loses rows is refused, not shown in part."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(
                cur,
                self.q["events_after"],
                {"run_id": run_id, "after_seq": after_seq, "limit": limit},
            )
            recorded = None
            if len(rows) < limit:
                row = self.driver.fetchone(cur, self.q["recorded_seq"], {"run_id": run_id})
                recorded = int(row[0]) if row and row[0] is not None else None
            events = [
                codec.decode(run_id, r, self.chunkio.fetcher(cur, run_id, r[0])) for r in rows
            ]
        expected = after_seq + 1
        for e in events:
            if e.seq != expected:
                break
            expected += 1
        else:
            if recorded is None or expected > recorded:
                return events
        raise CorruptRecordError(
            f"run {run_id!r}: event seq {expected} is missing from its history (the run row "
            f"records seq {recorded or '?'}); the database may be damaged: run torpor doctor",
            run_id=run_id,
            seq=expected,
        )

    def iter_events(self, run_id: str, page: int = 1000) -> Iterator[Event]:
        """All events of a run, read page by page."""
        after = 0
        while True:
            batch = self.read_events(run_id, after, page)
            yield from batch
            if len(batch) < page:
                return
            after = batch[-1].seq

    @read_retried
    def load(self, run_id: str) -> RunState:
        """The run's state: latest engine checkpoint + the events after it (G8).

        A checkpoint that cannot be decoded, or that the events after it do not fold onto, is
        not trusted: the state is then refolded from the full history (events are the
        authority; nothing is rewritten). A corrupt event, or a stored history that is itself
        impossible, raises CorruptRecordError naming run and seq.
        """
        from ..history import RunState

        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self.q["get_checkpoint"], {"run_id": run_id})
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r} in {display_url(self.url)}")
            ckpt_seq, ckpt_text, row_seq = row[0], row[1], int(row[2])
            fetch, user_state = self._checkpoint_readers(cur, run_id, ckpt_seq)
            state = codec.checkpoint_state(run_id, ckpt_seq, ckpt_text, row_seq, fetch, user_state)
            if state is None and ckpt_text:
                why = codec.checkpoint_problem(
                    run_id, ckpt_seq, ckpt_text, row_seq, fetch, user_state
                )
                log.warning("run %r: %s; its state is folded from the history", run_id, why)
            rows = self._events_after(cur, run_id, state.seq if state else 0)
            if state is not None and not rows and state.seq > 0:
                # The checkpoint covers the whole history: its last event is read all the same
                # (one indexed row), so a damaged last event is refused here as every reader of
                # the history refuses it, instead of resuming past it (issue 35).
                self._check_event_at(cur, run_id, state.seq)
            if state is not None:
                try:
                    return self._fold_rows(cur, run_id, state, rows, row_seq)
                except TransitionError:
                    # The checkpoint disagrees with the history: refold from the start.
                    rows = self._events_after(cur, run_id, 0)
            try:
                return self._fold_rows(cur, run_id, RunState(run_id=run_id), rows, row_seq)
            except TransitionError as exc:
                raise CorruptRecordError(
                    f"run {run_id!r} seq {exc.seq}: the stored history is impossible: {exc.rule}",
                    run_id=run_id,
                    seq=exc.seq,
                ) from exc

    def _check_event_at(self, cur: Any, run_id: str, seq: int) -> None:
        """CorruptRecordError (naming the run and seq) when the event at ``seq`` is missing or
        cannot be decoded."""
        row = self.driver.fetchone(cur, self.q["event_at"], {"run_id": run_id, "seq": seq})
        if row is None:
            raise CorruptRecordError(
                f"run {run_id!r}: event seq {seq} is missing from its history (its checkpoint "
                "covers it); the database may be damaged: run torpor doctor",
                run_id=run_id,
                seq=seq,
            )
        codec.decode(run_id, row, self.chunkio.fetcher(cur, run_id, seq))

    def _checkpoint_readers(
        self, cur: Any, run_id: str, ckpt_seq: Any
    ) -> tuple[Fetch, Callable[[int], Any]]:
        """What reading a stored engine checkpoint needs: its chunks, and the user checkpoint
        state it refers to (the ``checkpoint_saved`` event at a seq; see codec.checkpoint_text)."""
        fetch = self.chunkio.fetcher(cur, run_id, ckpt_seq)

        def user_state(seq: int) -> Any:
            from ..history import CheckpointSaved

            row = self.driver.fetchone(cur, self.q["event_at"], {"run_id": run_id, "seq": seq})
            if row is None:
                raise ValueError(f"no event at seq {seq}")
            ev = codec.decode(run_id, row, self.chunkio.fetcher(cur, run_id, seq))
            if not isinstance(ev.payload, CheckpointSaved):
                raise ValueError(f"seq {seq} is a {ev.type}, not a user checkpoint")
            return ev.payload.state

        return fetch, user_state

    @read_retried
    def checkpoint_problem(self, run_id: str) -> str | None:
        """Why the run's stored engine checkpoint cannot be trusted (edited, damaged, a chunk
        missing), or None when it can or there is none (``torpor doctor``)."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self.q["get_checkpoint"], {"run_id": run_id})
            if row is None:
                return None
            fetch, user_state = self._checkpoint_readers(cur, run_id, row[0])
            return codec.checkpoint_problem(run_id, row[0], row[1], int(row[2]), fetch, user_state)

    def _events_after(self, cur: Any, run_id: str, after: int) -> list[tuple[Any, ...]]:
        params = {"run_id": run_id, "after_seq": after, "limit": 1 << 62}
        return self.driver.fetchall(cur, self.q["events_after"], params)

    def _fold_rows(
        self, cur: Any, run_id: str, state: RunState, rows: list[tuple[Any, ...]], row_seq: int
    ) -> RunState:
        from ..history import apply

        for r in rows:
            apply(state, codec.decode(run_id, r, self.chunkio.fetcher(cur, run_id, r[0])))
        if state.seq < row_seq:
            raise CorruptRecordError(
                f"run {run_id!r}: history ends at seq {state.seq} but the run row says {row_seq}",
                run_id=run_id,
                seq=state.seq,
            )
        return state

    @read_retried
    def completions_after(self, run_id: str, after_seq: int) -> dict[str, Completion]:
        """Latest completion per step among events after ``after_seq`` (the replay cache)."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(
                cur, self.q["completions_after"], {"run_id": run_id, "after_seq": after_seq}
            )
            return {
                sid: codec.completion(
                    run_id, sid, payload, seq, self.chunkio.fetcher(cur, run_id, seq)
                )
                for sid, payload, seq in rows
            }

    @read_retried
    def step_completion(self, run_id: str, step_id: str) -> Completion | None:
        """The latest completion of one step (indexed lookup), or None."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(
                cur, self.q["step_completion"], {"run_id": run_id, "step_id": step_id}
            )
            if row is None:
                return None
            fetch = self.chunkio.fetcher(cur, run_id, row[1])
            return codec.completion(run_id, step_id, row[0], int(row[1]), fetch)

    @read_retried
    def step_events(self, run_id: str, step_id: str) -> list[Event]:
        """Every event recorded for one step."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(
                cur, self.q["step_events"], {"run_id": run_id, "step_id": step_id}
            )
            return [codec.decode(run_id, r, self.chunkio.fetcher(cur, run_id, r[0])) for r in rows]
