"""Durable waits (DESIGN.md §1, wait; G7): a wait for a signal, and a sleep on a timer.

A wait is a step (``wait:<signal>``, ``sleep``) whose start records ``wait_started`` with its
deadline, fixed when the wait *begins* and kept across restarts; the run then holds no lease,
thread or process (:class:`~torpor.errors.Suspended` unwinds the workflow). A signal sent
before the wait began is kept (buffered) and taken when it begins. The wait ends with
``wait_completed`` and the step's completion: the signal's payload, the timer, or the deadline
(a timeout).

Whether a signal satisfies the wait is decided by when it *arrived* (the store's clock at
posting) against the deadline — not by when this process looked: a signal that arrived in time
is taken even if the run resumes long after the deadline, and one that arrived after it is not
(it stays buffered for a later wait of its name, and ``show`` says it came late). A timeout is
recorded only while no message is pending (``if_inbox_empty``), so a message posted just before
the deadline is never overtaken by the timeout.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .. import faults
from ..errors import (
    InboxPendingError,
    NonDeterminismError,
    Suspended,
    TorporError,
    WaitTimeout,
)
from ..history import Payload, Policy, StepCompleted, StepStarted, WaitCompleted, WaitStarted
from ..store.base import Completion
from .journal import Journal


def wait_for(j: Journal, signal: str, timeout: timedelta | None = None) -> Any:
    """Wait for a signal named ``signal`` (see :meth:`torpor.Run.wait_for`)."""
    wid = j.next_id(f"wait:{signal}")
    j.boundary()
    comp = j.recorded(wid, Policy.READ)
    if comp is None:
        j.sync()
        if j.state.wait is None:
            deadline = j.now_ms() + int(timeout.total_seconds() * 1000) if timeout else None
            _begin(j, wid, "signal", signal, deadline, f"signal {signal!r}")
        comp = _settle(j, wid)
    res = comp.result or {}
    if res.get("timeout"):
        raise WaitTimeout(f"run {j.run_id!r}: wait {wid!r} reached its deadline")
    return j.unblob(wid, res.get("payload"), "signal payload")


def sleep(
    j: Journal, duration: timedelta | float | None = None, until: datetime | None = None
) -> None:
    """Sleep on a timer (see :meth:`torpor.Run.sleep`)."""
    wid = j.next_id("sleep")
    j.boundary()
    if j.recorded(wid, Policy.READ) is not None:
        return
    if j.state.wait is None:
        if until is not None:
            deadline = int(until.timestamp() * 1000)
        elif duration is not None:
            secs = duration.total_seconds() if isinstance(duration, timedelta) else duration
            deadline = j.now_ms() + int(secs * 1000)
        else:
            raise TorporError("run.sleep needs a duration or until=")
        _begin(j, wid, "timer", "sleep", deadline, "timer")
    _settle(j, wid)


def _begin(j: Journal, wid: str, kind: str, name: str, deadline: int | None, reason: str) -> None:
    j.append(
        StepStarted(step_id=wid, policy=Policy.READ, purpose=f"wait for {reason}"),
        WaitStarted(wait_id=wid, kind=kind, name=name, deadline_ms=deadline, reason=reason),
        wake_at_ms=deadline,
    )
    faults.point("wait.started")


def _settle(j: Journal, wid: str) -> Completion:
    """End the open wait ``wid`` if its wake condition holds (a buffered signal that arrived
    before the deadline, the timer, or the deadline passed), else suspend the run."""
    w = j.state.wait
    if w is None or w.wait_id != wid:
        raise NonDeterminismError(
            f"run {j.run_id!r} waits on {w.wait_id if w else None!r}, but the code "
            f"reached wait {wid!r}"
        )
    for _ in range(GUARD_RETRIES):
        sig = j.state.answer()
        if sig is not None:
            result = {"payload": sig.payload, "signal_id": sig.signal_id}
            j.append(
                WaitCompleted(
                    wait_id=wid, via="signal", signal_id=sig.signal_id, payload=sig.payload
                ),
                StepCompleted(step_id=wid, policy=Policy.READ, result=result),
            )
            faults.point("wait.completed")
            return _completion(j, wid)
        if w.deadline_ms is None or j.now_ms() < w.deadline_ms:
            raise Suspended(f"waiting for {w.reason or w.kind}")
        timer = w.kind == "timer"
        if expire(
            j,
            WaitCompleted(wait_id=wid, via="timer" if timer else "deadline"),
            StepCompleted(step_id=wid, policy=Policy.READ, result={"timeout": not timer}),
        ):
            return _completion(j, wid)
    raise TorporError(f"run {j.run_id!r} wait {wid!r}: inbox messages keep arriving")


#: How many times a guarded append is tried while messages keep landing before it.
GUARD_RETRIES = 20


def expire(j: Journal, *payloads: Payload) -> bool:
    """Record a wait's end by its deadline (or timer) — only while no inbox message is
    pending. False when one landed meanwhile: it is moved into the history (it may have
    arrived before the deadline and answer the wait), and the caller looks again."""
    try:
        j.append(*payloads, if_inbox_empty=True)
    except InboxPendingError:
        j.sync()
        return False
    faults.point("wait.completed")
    return True


def _completion(j: Journal, wid: str) -> Completion:
    comp = j.recorded(wid, Policy.READ)
    assert comp is not None, wid
    return comp
