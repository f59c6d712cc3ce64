"""The transition rules of approvals (G4, G6): a request binds content and, optionally, the
people who may decide and how many must approve (N-of-M); decisions count once per person;
any deny (or reply, ``respond``) denies; approvers of an edit approve the same edited content;
a refused decision is recorded and, when it had been counted, withdrawn; a revocation stops
an approved approval; a consumption is bound to the step that runs the effect. Registered
into :data:`torpor.history.fold.RULES` like every other rule; signatures are checked outside
this pure layer (:mod:`torpor.engine.approvals`).
"""

from __future__ import annotations

from ..errors import TransitionError
from .events import (
    ApprovalConsumed,
    ApprovalDecided,
    ApprovalRefused,
    ApprovalRequested,
    ApprovalRevoked,
    Event,
)
from .fold import Refuse, fold, rule
from .state import ApprovalInfo, DecisionInfo, RunState


def candidate_refusal(s: RunState, approval_id: str, decision: str, approver: str) -> str | None:
    """The rule that would refuse ``approver``'s ``decision`` (``approve`` / ``deny``) on
    ``approval_id`` if it were the run's next event — the approval already decided or revoked,
    ``approver`` not one of the people it names, ``approver`` already decided on it — or None
    when the fold would take it. A client asks before it signs and sends a decision, so that a
    person is told at once, in the words of the rule itself (the rules live here only, G4);
    ``s`` is not changed. The signature is not checked here (see :mod:`torpor.keys`)."""
    cur = s.approvals.get(approval_id)
    candidate = ApprovalDecided(
        approval_id=approval_id,
        decision="approve" if decision == "approve" else "deny",
        approver=approver,
        hashes=list(cur.hashes) if cur is not None else [],
        signature="",
        scheme="ed25519",
    )
    event = Event(
        run_id=s.run_id,
        seq=s.seq + 1,
        type="approval_decided",
        payload=candidate,
        at_ms=0,
        epoch=s.epoch,
    )
    try:
        fold([event], s)
    except TransitionError as exc:
        return exc.rule
    return None


@rule(ApprovalRequested)
def _approval_requested(s: RunState, p: ApprovalRequested, e: Event, refuse: Refuse) -> None:
    if p.approval_id in s.approvals:
        raise refuse(f"approval {p.approval_id!r} already requested")
    if not p.hashes:
        raise refuse("an approval must bind at least one content hash")
    if p.required < 1:
        raise refuse(f"approval {p.approval_id!r} must require at least one approver")
    if len(set(p.approvers)) != len(p.approvers):
        raise refuse(f"approval {p.approval_id!r} names an approver twice")
    if p.escalate_at_ms != sorted(set(p.escalate_at_ms)):
        raise refuse(f"approval {p.approval_id!r}: escalation stages must be due in order")
    if p.escalation and len(p.escalation) != len(p.escalate_at_ms):
        raise refuse(f"approval {p.approval_id!r}: one due time per escalation stage")
    if p.approvers and p.required > len(p.approvers):
        raise refuse(
            f"approval {p.approval_id!r} requires {p.required} of {len(p.approvers)} approvers"
        )
    s.approvals[p.approval_id] = ApprovalInfo(
        name=p.name,
        hashes=list(p.hashes),
        status="requested",
        approvers=list(p.approvers),
        required=p.required,
        step_id=p.step_id,
        nonce=p.nonce,
        escalate_at_ms=list(p.escalate_at_ms),
        escalation=list(p.escalation),
    )


@rule(ApprovalDecided)
def _approval_decided(s: RunState, p: ApprovalDecided, e: Event, refuse: Refuse) -> None:
    cur = s.approvals.get(p.approval_id)
    if cur is None:
        raise refuse(f"approval {p.approval_id!r} was never requested")
    if cur.status != "requested":
        raise refuse(f"approval {p.approval_id!r} is already {cur.status}")
    if sorted(p.hashes) != sorted(cur.hashes):
        raise refuse(f"decision on approval {p.approval_id!r} names different content hashes")
    approvers, ended = by_arrival(cur, p.arrived_at_ms)
    if ended:
        raise refuse(f"approval {p.approval_id!r}: it arrived after its escalation chain {ended}")
    if p.scheme != "policy" and approvers and p.approver not in approvers:
        raise refuse(
            f"approval {p.approval_id!r} is decided by {', '.join(approvers)}, not "
            f"{p.approver!r}: not one of the approvers"
        )
    if any(d.approver == p.approver for d in cur.decisions):
        raise refuse(f"{p.approver!r} already decided on approval {p.approval_id!r}")
    if p.edited and p.decision != "approve":
        raise refuse("only an approval carries edited content")
    other = next((d for d in cur.decisions if d.decision == "approve"), None)
    if p.decision == "approve" and other is not None and other.edited != p.edited:
        raise refuse(
            f"{p.approver!r} approved other content than {other.approver!r} on approval "
            f"{p.approval_id!r} (approvers of an edit must approve the same edited content)"
        )
    cur.decisions.append(
        DecisionInfo(
            approver=p.approver,
            decision=p.decision,
            scheme=p.scheme,
            signature=p.signature,
            key=p.key,
            delegate=p.delegate,
            given_by=p.given_by,
            decided_at_ms=p.decided_at_ms,
            comment=p.comment,
            store=p.store,
            request=p.request,
            arrived_at_ms=p.arrived_at_ms,
            edited=p.edited,
            edited_content=p.edited_content,
        )
    )
    cur.signature, cur.decided_at_ms, cur.comment = p.signature, p.decided_at_ms, p.comment
    _settle(cur)


def by_arrival(cur: ApprovalInfo, arrived_at_ms: int | None) -> tuple[list[str], str]:
    """Who may decide ``cur`` by a decision that arrived at ``arrived_at_ms``, and how its
    escalation chain ended before then ("" if it did not) — counting the stages due before it
    arrived that are not recorded yet (the run was not executing): decided by arrival, not by
    when a process looked (issue 39)."""
    approvers = list(cur.approvers)
    if arrived_at_ms is None or not cur.escalation:
        return approvers, ""
    for at, st in list(zip(cur.escalate_at_ms, cur.escalation, strict=False))[cur.escalations :]:
        if at > arrived_at_ms:
            break
        if st.get("action") == "approvers":
            approvers = list(st.get("approvers") or [])
        elif st.get("action") in ("deny", "cancel"):
            return approvers, f"ended it ({st['action']})"
    return approvers, ""


def _settle(cur: ApprovalInfo) -> None:
    """The approval's status from its counted decisions: any deny denies; enough distinct
    approvals (or a policy decision) approve; else it is still requested. A consumed approval
    that still holds stays consumed; one that no longer does is requested again."""
    approves = [d for d in cur.decisions if d.decision == "approve"]
    denies = [d for d in cur.decisions if d.decision in ("deny", "respond")]
    if denies:
        cur.status, cur.approver = "denied", denies[0].approver
        cur.arrived_at_ms = denies[0].arrived_at_ms
    elif approves and (
        len(approves) >= cur.required or any(d.scheme == "policy" for d in approves)
    ):
        if cur.status != "consumed":
            cur.status = "approved"
        cur.approver = ", ".join(d.approver for d in approves)
        # Settled by the arrival that completed it (a policy decision: by the holder, None).
        policy = any(d.scheme == "policy" for d in approves)
        deciding = approves[: cur.required]
        known = [d.arrived_at_ms for d in deciding if d.arrived_at_ms is not None]
        cur.arrived_at_ms = None if policy or not known else max(known)
    else:
        cur.status, cur.approver, cur.consumed_by = "requested", None, None
        cur.arrived_at_ms = None


@rule(ApprovalRefused)
def _approval_refused(s: RunState, p: ApprovalRefused, e: Event, refuse: Refuse) -> None:
    cur = s.approvals.get(p.approval_id)
    if cur is None:
        raise refuse(f"approval {p.approval_id!r} was never requested")
    if p.withdrawn:
        counted = cur.counted()
        kept = [d for d in counted if (d.approver, d.delegate) != (p.approver, p.delegate)]
        if len(kept) == len(counted):
            raise refuse(f"approval {p.approval_id!r} has no decision by {p.approver!r}")
        cur.decisions = kept
        if cur.status != "revoked":
            _settle(cur)
    who = p.approver + (f" via {p.delegate}" if p.delegate else "")
    cur.refused += 1
    cur.refusals = [*cur.refusals, f"{who}: {p.reason}"][-5:]


@rule(ApprovalRevoked)
def _approval_revoked(s: RunState, p: ApprovalRevoked, e: Event, refuse: Refuse) -> None:
    cur = s.approvals.get(p.approval_id)
    if cur is None or cur.status != "approved":
        raise refuse(
            f"approval {p.approval_id!r} cannot be revoked: it is "
            f"{cur.status if cur else 'unknown'} (only an approved, unconsumed approval can)"
        )
    cur.status = "revoked"


@rule(ApprovalConsumed)
def _approval_consumed(s: RunState, p: ApprovalConsumed, e: Event, refuse: Refuse) -> None:
    cur = s.approvals.get(p.approval_id)
    if cur is None or cur.status != "approved":
        raise refuse(
            f"approval {p.approval_id!r} cannot be consumed: it is "
            f"{cur.status if cur else 'unknown'}"
        )
    if not p.hashes:
        raise refuse(f"consumption of approval {p.approval_id!r} names no content")
    if not set(p.hashes) <= set(cur.hashes):
        raise refuse(f"approval {p.approval_id!r} does not cover the content being consumed")
    step = s.steps.get(p.step_id)
    if step is None or step.status != "started":
        raise refuse(
            f"approval {p.approval_id!r} consumed by step {p.step_id!r}, which is not running"
        )
    cur.status = "consumed"
    cur.consumed_by = p.step_id
