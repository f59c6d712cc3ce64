"""A cancel that reaches a busy run (issue 36, item 1; G2, G11).

A cancel is a message in the run's inbox; the executing thread takes it at its next boundary
(:meth:`~torpor.engine.journal.Journal.boundary`). A step that does not return for a long time
reaches no boundary, so the execution's heartbeat (:class:`~torpor.engine.lease.Heartbeat`)
calls :meth:`CancelWatch.beat` after each renewal, and:

1. records a pending cancel at once — while the executing thread is busy in a step's own work
   (:attr:`Journal.busy`), or, in an async workflow, from inside its event loop — so ``show``
   and the console say ``cancel requested`` while the step still runs;
2. interrupts an async workflow at its next ``await`` (its main task is cancelled); a sync
   one stops at its next primitive, once the step returns;
3. after ``grace_s`` seconds (:attr:`torpor.Runtime.cancel_grace_s`), stops the attempts still
   running that can be stopped: a child process (``Timeout(kill=True)``) is killed with its
   process group, a task cancelled. The effect such an attempt was performing is then
   reconciled like any interrupted attempt (``applied`` stands, ``absent`` is not retried,
   ``unknown`` leaves the run ``unresolved``); the run ends ``cancelled`` otherwise;
4. a step still running after that — a thread cannot be stopped, nor a step that runs in the
   executing thread itself — is noted where people look (``ls``, ``show``, the console):
   ``cancelling (step S not responding since T)``. The execution keeps its lease (renewed as
   before) and with it its queue slot until the step returns or the process exits: a lease
   released under a live thread would let its late call reach the world after the run said
   ``cancelled`` (G2). Once the step returns, the run ends ``cancelled`` at its next boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

from ..errors import LeaseLostError, TorporError, TransitionError
from ..history import AttentionNeeded, RunStatus, utc_text
from .attempts import Running
from .journal import Journal

#: Default seconds a cancelled run's running attempts get to return before they are stopped.
CANCEL_GRACE_S = 10.0

#: The start of the attention detail of a cancelled run whose step does not return.
CANCELLING = "cancelling"


class CancelWatch:
    """Watches one execution for a cancel (see the module docstring). ``grace_s``: seconds
    from the cancel being recorded to its running attempts being stopped."""

    def __init__(self, journal: Journal, grace_s: float = CANCEL_GRACE_S):
        self.j = journal
        self.grace_s = grace_s
        self.attempts: list[Running] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._seen_mono: float | None = None
        self._stopped = False
        self._noted = False

    def started(self, running: Running) -> None:
        """An attempt started (:func:`torpor.engine.attempts.watching`)."""
        with self._lock:
            self.attempts = [a for a in self.attempts if not a.done()]
            self.attempts.append(running)
        if self._stopped and running.stoppable:
            running.cancel()  # the run is being cancelled: nothing new runs on past the grace

    def bind(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        """The event loop and main task of an async workflow (interrupted on a cancel)."""
        self._loop, self._task = loop, task

    def beat(self, pending: bool) -> None:
        """From the heartbeat thread, after a renewal; ``pending``: inbox messages wait."""
        j = self.j
        if pending and not j.state.cancel_requested:
            if self._loop is not None:
                self._in_loop(self._take)
            elif j.busy is not None:
                self._take()
        if not j.state.cancel_requested or j.state.status is RunStatus.FINISHED:
            return
        now = time.monotonic()
        if self._seen_mono is None:
            self._seen_mono = now
            if self._loop is not None:
                self._in_loop(self._interrupt)
        if now - self._seen_mono < self.grace_s:
            return
        if not self._stopped:
            self._stopped = True
            with self._lock:
                alive = [a for a in self.attempts if not a.done()]
            for a in alive:
                if a.stoppable:
                    a.cancel()
            if any(a.stoppable for a in alive):
                return  # give the stopped attempts a beat to unwind before noting anything
        busy = j.busy
        if busy is not None and not self._noted:
            self._noted = True
            self._note(*busy)

    def _take(self) -> None:
        """Move the pending messages into the history when a cancel is among them (any other
        message waits for the executing thread's next boundary, as before)."""
        j = self.j
        if j.lost is not None or j.state.status is RunStatus.FINISHED:
            return
        # (On an error, the executing thread takes them at its next boundary.)
        with contextlib.suppress(LeaseLostError, TransitionError, TorporError):
            if any(m.kind == "cancel" for m in j.store.pending_inbox(j.run_id)):
                j.sync()

    def _interrupt(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()

    def _in_loop(self, fn: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # (closed meanwhile: the workflow is done)
                loop.call_soon_threadsafe(fn)

    def _note(self, sid: str, since_mono: float) -> None:
        """Record that the cancelled run's step ``sid`` does not return (once)."""
        j = self.j
        since_ms = int((time.time() - (time.monotonic() - since_mono)) * 1000)
        detail = (
            f"{CANCELLING} (step {sid} not responding since {utc_text(since_ms)}): the cancel "
            f"is recorded, but the step has not returned {self.grace_s:g} s later and its "
            "thread cannot be stopped; the run keeps its lease (and queue slot) until the step "
            "returns or its process exits, then ends cancelled"
        )
        with contextlib.suppress(LeaseLostError, TransitionError, TorporError):
            j.append(AttentionNeeded(detail=detail, by=j.lease.owner), by_code=False)


__all__ = ["CANCELLING", "CANCEL_GRACE_S", "CancelWatch"]
