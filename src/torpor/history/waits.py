"""The rules of waits and messages (registered into :data:`torpor.history.fold.RULES` like
every other rule): a wait begins and ends; a signal is buffered until a wait takes it; a cancel
is noted; a message with no effect is refused with its reason (G11).

Whether a message satisfies a wait is decided by when it *arrived* (the store's clock at
posting, recorded on the message's event) against the deadline fixed when the wait began — never
by when a process got round to looking. So a wait with an answer that arrived in time cannot
time out, and a signal or decision that arrived at or after the deadline cannot complete it.
"""

from __future__ import annotations

from .events import (
    REOPENABLE,
    CancelRequested,
    ChildEnded,
    Event,
    MessageRefused,
    RunStatus,
    SignalReceived,
    WaitCompleted,
    WaitStarted,
)
from .fold import Refuse, rule
from .state import PendingSignal, RunState, WaitInfo


@rule(WaitStarted)
def _wait_started(s: RunState, p: WaitStarted, e: Event, refuse: Refuse) -> None:
    if s.wait is not None:
        raise refuse(f"run already waits on {s.wait.kind} {s.wait.name!r}")
    if p.kind == "timer" and p.deadline_ms is None:
        raise refuse("a timer wait needs a deadline")
    if p.kind == "children" and not 1 <= p.need <= len(p.children):
        raise refuse(f"a wait on {len(p.children)} child run(s) needs 1..{len(p.children)} of them")
    if p.kind != "children" and (p.children or p.need):
        raise refuse(f"a {p.kind} wait names no child runs")
    s.wait = WaitInfo(
        wait_id=p.wait_id,
        kind=p.kind,
        name=p.name,
        deadline_ms=p.deadline_ms,
        reason=p.reason,
        children=list(p.children),
        need=p.need,
    )
    s.status = RunStatus.WAITING


@rule(SignalReceived)
def _signal_received(s: RunState, p: SignalReceived, e: Event, refuse: Refuse) -> None:
    pending = s.signals.get(p.name, [])
    if any(x.signal_id == p.signal_id for x in pending):
        raise refuse(f"signal {p.signal_id!r} already received")
    w = s.wait
    open_for_it = w is not None and w.kind == "signal" and w.name == p.name
    if p.wait_id is not None:
        # An answer to one wait instance goes to that wait or nowhere (the inbox refuses it
        # with a message_refused when the wait is closed, answered or past its deadline).
        if w is None or not open_for_it or w.wait_id != p.wait_id:
            raise refuse(f"signal {p.signal_id!r} answers wait {p.wait_id!r}, which is not open")
        sig = PendingSignal(signal_id=p.signal_id, arrived_at_ms=p.arrived_at_ms)
        if not sig.answers(w):
            raise refuse(f"signal {p.signal_id!r} arrived after the deadline of wait {w.wait_id!r}")
    late = (
        w is not None
        and open_for_it
        and w.deadline_ms is not None
        and p.arrived_at_ms is not None
        and p.arrived_at_ms >= w.deadline_ms
    )
    s.signals.setdefault(p.name, []).append(
        PendingSignal(
            signal_id=p.signal_id,
            payload=p.payload,
            arrived_at_ms=p.arrived_at_ms,
            wait_id=p.wait_id,
            late_for=w.wait_id if late and w is not None else None,
        )
    )


def _late(arrived_at_ms: int | None, deadline_ms: int | None) -> bool:
    """Whether a message that arrived at ``arrived_at_ms`` came at or after ``deadline_ms``
    (an unknown arrival is taken as in time: recorded before event schema 3)."""
    return deadline_ms is not None and arrived_at_ms is not None and arrived_at_ms >= deadline_ms


@rule(WaitCompleted)
def _wait_completed(s: RunState, p: WaitCompleted, e: Event, refuse: Refuse) -> None:
    if s.wait is None or s.wait.wait_id != p.wait_id:
        raise refuse(f"wait {p.wait_id!r} is not the open wait")
    w = s.wait
    if p.via == "timer" and w.kind != "timer":
        raise refuse(f"a {w.kind} wait is not completed by a timer")
    if p.via == "deadline" and w.deadline_ms is None:
        raise refuse(f"wait {p.wait_id!r} has no deadline")
    if p.via == "signal" and w.kind != "signal":
        raise refuse(f"a {w.kind} wait is not completed by a signal")
    if p.via == "decision" and w.kind != "approval":
        raise refuse(f"a {w.kind} wait is not completed by a decision")
    if (p.via == "children") != (w.kind == "children"):
        raise refuse(f"a {w.kind} wait is not completed via {p.via}")
    # Whether a message satisfies a wait is decided by when it arrived, against the deadline
    # fixed when the wait began: never by when a process got round to looking.
    if p.via == "deadline" and w.kind == "signal":
        answer = s.answer()
        if answer is not None:
            raise refuse(
                f"wait {p.wait_id!r} has an answer that arrived before its deadline "
                f"(signal {answer.signal_id!r})"
            )
    if w.kind == "approval" and p.via in ("deadline", "decision"):
        appr = s.approvals.get(w.name)
        decided = appr is not None and appr.status != "requested"
        in_time = decided and appr is not None and not _late(appr.arrived_at_ms, w.deadline_ms)
        if p.via == "deadline" and in_time:
            raise refuse(f"approval {w.name!r} was decided before the deadline of its wait")
        if p.via == "decision" and not decided:
            raise refuse(f"approval {w.name!r} has no decision yet")
        if p.via == "decision" and not in_time:
            raise refuse(f"the decision on {w.name!r} arrived after the deadline of its wait")
    if p.via == "signal":
        pending = s.signals.get(w.name, [])
        idx = next((i for i, x in enumerate(pending) if x.signal_id == p.signal_id), None)
        if idx is None:
            raise refuse(f"signal {p.signal_id!r} for {w.name!r} was not received")
        if not pending[idx].answers(w):
            why = "is addressed to another wait" if pending[idx].wait_id else "arrived late"
            raise refuse(f"signal {p.signal_id!r} {why}: it does not answer wait {w.wait_id!r}")
        pending.pop(idx)
        if not pending:
            s.signals.pop(w.name, None)
    s.wait = None
    s.status = RunStatus.RUNNING


@rule(MessageRefused)
def _message_refused(s: RunState, p: MessageRefused, e: Event, refuse: Refuse) -> None:
    if not p.reason:
        raise refuse(f"the refusal of message {p.message_id!r} must say why")
    if p.kind == "steer":
        for x in s.steering:
            if x.message_id == p.message_id and x.status == "pending":
                x.status = "refused"
    if p.kind == "signal" and p.name is not None:
        buffered = s.signals.get(p.name)
        if buffered:
            rest = [x for x in buffered if x.signal_id != p.message_id]
            if rest:
                s.signals[p.name] = rest
            else:
                del s.signals[p.name]


@rule(CancelRequested)
def _cancel_requested(s: RunState, p: CancelRequested, e: Event, refuse: Refuse) -> None:
    s.cancel_requested = True
    s.cancel_reason = f"cancelled by {p.by}" + (f": {p.reason}" if p.reason else "")


@rule(ChildEnded)
def _child_ended(s: RunState, p: ChildEnded, e: Event, refuse: Refuse) -> None:
    if p.child_run_id == s.run_id:
        raise refuse("a run is not its own child")
    s.children[p.child_run_id] = p.outcome


def children_in_doubt(s: RunState) -> list[str]:
    """Child runs whose latest reported outcome is ``unresolved`` or ``blocked``: a person
    must settle them, and the parent cannot succeed over them (G14)."""
    return [c for c, o in s.children.items() if o in REOPENABLE]
