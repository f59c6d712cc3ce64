"""Durable waits (DESIGN.md §1, wait; G7): a wait for a signal, and a sleep on a timer.

A wait is a step (``wait:<signal>``, ``sleep``) whose start records ``wait_started`` with its
deadline, fixed when the wait *begins* and kept across restarts; the run then holds no lease,
thread or process (:class:`~torpor.errors.Suspended` unwinds the workflow). A signal sent
before the wait began is kept and taken when it begins. The wait ends with ``wait_completed``
and the step's completion: the signal's payload, the timer, or the deadline (a timeout).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .. import faults
from ..errors import NonDeterminismError, Suspended, TorporError, WaitTimeout
from ..history import Policy, StepCompleted, StepStarted, WaitCompleted, WaitStarted
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
    return res.get("payload")


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
    """End the open wait ``wid`` if its wake condition holds (a pending signal, the timer or
    the deadline passed), else suspend the run."""
    w = j.state.wait
    if w is None or w.wait_id != wid:
        raise NonDeterminismError(
            f"run {j.run_id!r} waits on {w.wait_id if w else None!r}, but the code "
            f"reached wait {wid!r}"
        )
    if w.kind == "signal":
        pending = j.state.signals.get(w.name) or []
        if pending:
            sig = pending[0]
            result = {"payload": sig.payload, "signal_id": sig.signal_id}
            j.append(
                WaitCompleted(
                    wait_id=wid, via="signal", signal_id=sig.signal_id, payload=sig.payload
                ),
                StepCompleted(step_id=wid, policy=Policy.READ, result=result),
            )
            faults.point("wait.completed")
            return _completion(j, wid)
    if w.deadline_ms is not None and j.now_ms() >= w.deadline_ms:
        j.append(
            WaitCompleted(wait_id=wid, via="timer" if w.kind == "timer" else "deadline"),
            StepCompleted(step_id=wid, policy=Policy.READ, result={"timeout": w.kind != "timer"}),
        )
        faults.point("wait.completed")
        return _completion(j, wid)
    raise Suspended(f"waiting for {w.reason or w.kind}")


def _completion(j: Journal, wid: str) -> Completion:
    comp = j.recorded(wid, Policy.READ)
    assert comp is not None, wid
    return comp
