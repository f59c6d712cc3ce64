"""The transition rules of steering and escalation (issue 39, G4, G11): a steering message is
taken once, in arrival order, by a boundary of a running run; a retraction names a model call
that returned and a steering message that interrupts; an escalation stage comes after the one
before it, on an approval still waiting, a hand-over names the people who decide next, and a
final ``deny`` denies the approval (a decision arriving after it is refused)."""

from __future__ import annotations

from .events import Event, RunStatus
from .fold import Refuse, rule
from .state import RunState, SteerInfo
from .steer_events import ReplyRetracted, SteerReceived, SteerTaken, WaitEscalated


@rule(SteerReceived)
def _steer_received(s: RunState, p: SteerReceived, e: Event, refuse: Refuse) -> None:
    if not p.text.strip():
        raise refuse(f"steering message {p.message_id!r} is empty")
    if any(x.message_id == p.message_id for x in s.steering):
        raise refuse(f"steering message {p.message_id!r} was already received")
    s.steering.append(
        SteerInfo(
            message_id=p.message_id,
            text=p.text,
            by=p.by,
            interrupt=p.interrupt,
            arrived_at_ms=p.arrived_at_ms,
        )
    )


@rule(SteerTaken)
def _steer_taken(s: RunState, p: SteerTaken, e: Event, refuse: Refuse) -> None:
    pending = [x for x in s.steering if x.status == "pending"]
    if s.status is RunStatus.FINISHED:
        raise refuse("a finished run takes no steering message")
    if len(set(p.message_ids)) != len(p.message_ids):
        raise refuse("a boundary takes each steering message once")
    for mid in p.message_ids:
        cur = next((x for x in s.steering if x.message_id == mid), None)
        if cur is None:
            raise refuse(f"steering message {mid!r} is unknown")
        if cur.status != "pending":
            raise refuse(f"steering message {mid!r} is already {cur.status} (seen once)")
    want = [x.message_id for x in pending[: len(p.message_ids)]]
    if want != p.message_ids:
        raise refuse(f"steering messages are taken in arrival order: {want} first")
    for x in pending[: len(p.message_ids)]:
        x.status, x.taken_by = "taken", p.step_id


@rule(ReplyRetracted)
def _reply_retracted(s: RunState, p: ReplyRetracted, e: Event, refuse: Refuse) -> None:
    step = s.steps.get(p.step_id)
    if step is not None and step.status != "completed":
        raise refuse(f"model call {p.step_id!r} did not return: there is no reply to retract")
    msg = next((x for x in s.steering if x.message_id == p.message_id), None)
    if msg is None or not msg.interrupt:
        raise refuse(f"steering message {p.message_id!r} is not an interrupting one")


@rule(WaitEscalated)
def _wait_escalated(s: RunState, p: WaitEscalated, e: Event, refuse: Refuse) -> None:
    info = s.approvals.get(p.approval_id)
    if info is None or info.status != "requested":
        raise refuse(
            f"approval {p.approval_id!r} is {info.status if info else 'unknown'}: only a "
            "waiting approval escalates"
        )
    if p.stage != info.escalations + 1:
        raise refuse(
            f"escalation stage {p.stage} of approval {p.approval_id!r} follows stage "
            f"{info.escalations}"
        )
    if p.action == "approvers":
        need = p.required or 1
        if not p.approvers or len(set(p.approvers)) != len(p.approvers):
            raise refuse("a hand-over names distinct approvers")
        if need > len(p.approvers):
            raise refuse(f"a hand-over requires {need} of {len(p.approvers)} approvers")
        info.approvers, info.required = list(p.approvers), need
    if p.action == "deny":  # the chain's end: denied by it (a later decision is refused)
        info.status, info.approver = "denied", "escalation"
        info.comment = f"no decision by stage {p.stage} of its escalation chain"
    info.escalations = p.stage
