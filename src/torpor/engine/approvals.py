"""Approvals (DESIGN.md G6): a person's decision bound to the exact content decided on.

:func:`request` asks for a decision on a set of content hashes — optionally by named people,
``required`` of them (N-of-M) — and waits durably for it (a ``decision`` step, a wait of kind
``approval``); :func:`covering` and :func:`verify` are what an effect checks before it consumes
an approval (:mod:`.effects`): the approval covers the content the effect acts on, is approved
and unconsumed, and its decisions verify.

A decision is checked where it is delivered (:func:`screen`, as the inbox moves it into the
history), when the decision step completes, and again before an effect relies on it
(:func:`verify`, :func:`still_consumed`): a signed decision against the trusted keyring
(:class:`torpor.keys.Trust`: a key removed since is refused), a policy decision only in a
process started with ``--auto-approve``. A decision that fails is recorded as refused
(``approval_refused``; when it had been counted, it is withdrawn) and the run keeps waiting for a
valid one: a writer of the database can delay a run, never approve for it.
"""

from __future__ import annotations

import getpass
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from .. import faults, serde
from ..errors import (
    ApprovalDeniedError,
    ApprovalInvalidError,
    ApprovalRespondedError,
    ConfigError,
    Suspended,
    TorporError,
    TransitionError,
)
from ..history import (
    ApprovalConsumed,
    ApprovalDecided,
    ApprovalRefused,
    ApprovalRequested,
    ArtifactRef,
    DecisionInfo,
    Event,
    Payload,
    Policy,
    RunState,
    StepCompleted,
    StepStarted,
    WaitCompleted,
    WaitStarted,
    apply,
    type_of,
)
from ..store.base import Completion
from .escalation import Escalation, Perform, check_chain, due_times, escalate, replayed
from .journal import Journal
from .waits import expire

#: Longest claimed approver name kept in a refusal record (a forged message may carry more).
MAX_CLAIM_CHARS = 200


@dataclass(frozen=True)
class Approval:
    """A granted approval: authorizes effects on exactly ``hashes`` — or, approved with an
    edit (issue 39), on exactly ``edited_content`` (UTF-8 text whose sha256 ``edited`` the
    decision signed) instead of the proposed content."""

    approval_id: str
    name: str
    hashes: tuple[str, ...]
    approver: str
    edited: str = ""
    edited_content: str = ""


def given_by() -> str:
    """``user@host`` of this process: who gave an ``--auto-approve`` flag."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown-user"
    return f"{user}@{socket.gethostname()}"


def policy_decision(j: Journal, aid: str, hashes: Sequence[str]) -> ApprovalDecided:
    """The decision of this process's ``--auto-approve`` flag: recorded, not signed."""
    who = given_by()
    return ApprovalDecided(
        approval_id=aid,
        decision="approve",
        approver=j.host.auto_approve or "auto-approve",
        hashes=sorted(hashes),
        signature="",
        scheme="policy",
        given_by=who,
        comment=f"approved by the start flag (--auto-approve) of run {j.run_id}, given by {who}",
        decided_at_ms=j.now_ms(),
    )


def hashes_of(items: Sequence[ArtifactRef | str]) -> list[str]:
    """The sorted, distinct content hashes of artifacts or hashes."""
    return sorted({a.sha256 if isinstance(a, ArtifactRef) else a for a in items})


def approval_id(name: str, hashes: Sequence[str]) -> str:
    """``<name>@<hash of the sorted content hashes>``: different content, another approval."""
    return f"{name}@{serde.sha256_hex(','.join(hashes))[:12]}"


def request(
    j: Journal,
    name: str,
    artifacts: Sequence[ArtifactRef | str],
    *,
    summary: str = "",
    timeout: timedelta | None = None,
    approvers: Sequence[str] = (),
    required: int = 1,
    escalate: Sequence[Escalation] = (),
    perform: Perform | None = None,
) -> Approval:
    """Ask a person to approve exactly this content; wait durably for the decision (see
    :meth:`torpor.Run.approval`). The approval id is ``<name>@<hash of the content hashes>``:
    different content is a different approval. ``escalate``: the chain of stages when nobody
    answers (:mod:`.escalation`); ``perform`` runs a notify stage's effect. A reply instead of a
    decision (``respond``) is ApprovalRespondedError, a denial ApprovalDeniedError."""
    hashes = hashes_of(artifacts)
    if not hashes:
        raise TorporError(f"run {j.run_id!r}: approval {name!r} binds no content")
    people = list(approvers)
    if required < 1 or (people and required > len(people)) or len(set(people)) != len(people):
        raise ConfigError(
            f"run {j.run_id!r}: approval {name!r} requires {required} of "
            f"{len(people) or 'any'} approvers {people or ''}: need 1 <= required <= the "
            "number of distinct approvers named"
        )
    stages = check_chain(escalate)
    aid = approval_id(name, hashes)
    wid = f"approval:{aid}"
    j.asked = wid  # (the id is the content's, not a use count: no next_id)
    j.boundary()
    comp = j.recorded(wid, Policy.DECISION)
    if comp is None:
        ask = ApprovalRequested(
            approval_id=aid,
            name=name,
            hashes=hashes,
            step_id=wid,
            summary=summary,
            approvers=people,
            required=required,
            nonce=uuid.uuid4().hex,
            escalate_at_ms=due_times(j.now_ms(), stages),
            escalation=[
                {"action": x.action, "approvers": list(x.approvers), "required": x.required}
                for x in stages
            ],
        )
        comp = _decide(j, ask, wid, timeout, stages, perform)
    res = comp.result or {}
    info = j.state.approvals.get(aid)
    if res.get("decision") == "timeout":
        raise ApprovalDeniedError(f"approval {aid!r} timed out without a decision")
    if res.get("decision") == "respond":
        reply = next((d for d in info.decisions if d.decision == "respond"), None) if info else None
        raise ApprovalRespondedError(
            f"approval {aid!r} answered with a reply by {res.get('approver')}",
            reply=reply.comment if reply else "",
            by=res.get("approver") or "",
        )
    if res.get("decision") != "approve":
        denied = j.state.approvals.get(aid)
        raise ApprovalDeniedError(
            f"approval {aid!r} denied by {res.get('approver')}"
            + (f": {denied.comment}" if denied and denied.comment else "")
        )
    edit = next((d for d in info.counted() if d.edited), None) if info else None
    return Approval(
        aid,
        name,
        tuple(hashes),
        res.get("approver") or "",
        edit.edited if edit else "",
        edit.edited_content if edit else "",
    )


def _decide(
    j: Journal,
    ask: ApprovalRequested,
    wid: str,
    timeout: timedelta | None,
    stages: Sequence[Escalation] = (),
    perform: Perform | None = None,
) -> Completion:
    """Record the request (once), then the decision when there is a valid one; Suspended
    while there is none."""
    aid, hashes = ask.approval_id, ask.hashes
    j.sync()
    if aid not in j.state.approvals:
        deadline = j.now_ms() + int(timeout.total_seconds() * 1000) if timeout else None
        payloads: list[Payload] = [
            StepStarted(step_id=wid, policy=Policy.DECISION, purpose=ask.summary or ask.name),
            ask,
            WaitStarted(
                wait_id=wid,
                kind="approval",
                name=aid,
                deadline_ms=deadline,
                reason=ask.summary or f"approval {ask.name}",
            ),
        ]
        if j.host.auto_approve:
            payloads.append(policy_decision(j, aid, hashes))
        j.append(*payloads, wake_at_ms=deadline)
    replayed(j, aid, wid, stages)
    check(j, aid)
    info = j.state.approvals[aid]
    if info.status == "requested" and j.host.auto_approve:
        j.append(policy_decision(j, aid, hashes))  # resumed by a process with the flag
        info = j.state.approvals[aid]
    w = j.state.wait
    # A decision satisfies the wait only if it arrived before the deadline (by arrival, not
    # by when this process looked).
    late = (
        w is not None
        and w.deadline_ms is not None
        and info.arrived_at_ms is not None
        and info.arrived_at_ms >= w.deadline_ms
    )
    if info.status == "requested" or late:
        if w is not None and w.deadline_ms is not None and j.now_ms() >= w.deadline_ms:
            result = {"decision": "timeout"}
            if expire(
                j,
                WaitCompleted(wait_id=wid, via="deadline"),
                StepCompleted(step_id=wid, policy=Policy.DECISION, result=result),
            ):
                raise ApprovalDeniedError(f"approval {aid!r} timed out without a decision")
            return _decide(j, ask, wid, timeout, stages, perform)  # a message landed: look again
        if stages and not late and escalate(j, aid, wid, stages, perform) == "cancel":
            j.boundary()  # (raises Cancelled: the chain's last stage cancelled the run)
        info = j.state.approvals[aid]  # (a chain that ended in a denial denied it)
        if info.status == "requested" or late:
            raise Suspended(_waiting_reason(j, aid))
    responded = any(d.decision == "respond" for d in info.counted())
    decision = "respond" if responded else "deny" if info.status == "denied" else "approve"
    result = {"decision": decision, "approver": info.approver or ""}
    j.append(
        WaitCompleted(wait_id=wid, via="decision"),
        StepCompleted(step_id=wid, policy=Policy.DECISION, result=result),
    )
    faults.point("wait.completed")
    return _completion(j, wid)


def _completion(j: Journal, wid: str) -> Completion:
    comp = j.recorded(wid, Policy.DECISION)
    assert comp is not None
    return comp


def _waiting_reason(j: Journal, aid: str) -> str:
    info = j.state.approvals[aid]
    need = (
        f"{info.required - len(info.counted())} more of {', '.join(info.approvers)}"
        if info.approvers
        else "a decision"
    )
    last = f" (refused so far: {info.refused}; latest: {info.refusals[-1]})" if info.refused else ""
    return f"waiting for {need} on approval {aid!r} of {len(info.hashes)} content hash(es){last}"


def refusal(j: Journal, aid: str, d: DecisionInfo | ApprovalDecided) -> str | None:
    """Why decision ``d`` on approval ``aid`` of this run does not hold, or None when it does: a
    signed one verifies against the trusted keyring (or, in the local single-user mode, the
    shared key); a policy one holds only in a process started with ``--auto-approve``."""
    if d.edited and serde.sha256_hex(d.edited_content) != d.edited:
        return (
            f"its edited content does not match the sha256 {d.edited[:16]}… it was signed "
            "for (the edited bytes were changed after signing)"
        )
    if d.scheme == "policy":
        if j.host.auto_approve:
            return None
        return (
            "a policy decision (--auto-approve) holds only in a process started with that "
            "flag; this one was not"
        )
    info = j.state.approvals.get(aid)
    if isinstance(d, ApprovalDecided):
        hashes = list(d.hashes)  # what it claims to decide on (the fold compares them)
    else:
        hashes = list(info.hashes) if info is not None else []
    # A decision is valid for one request in one store (G16): the identity this host pinned,
    # the request's nonce.
    store = j.store_identity or j.store.store_id()
    nonce = info.nonce if info is not None else ""
    return j.host.trust.check(j.run_id, aid, hashes, d, store=store, request=nonce)


def screen(j: Journal, state: RunState, p: Payload) -> Payload:
    """A payload delivered by the inbox, checked where it is delivered (``state``: the run as
    the messages before it leave it): a decision that fails verification, or that the approval
    cannot take (already decided by that person, not one of its named approvers, too late),
    becomes its refusal (:class:`~torpor.history.ApprovalRefused`); a policy decision cannot
    be delivered as a message at all."""
    if not isinstance(p, ApprovalDecided):
        return p
    if p.scheme == "policy":
        why: str | None = (
            "a policy decision cannot be delivered as a message: only a process started "
            "with --auto-approve records one, for the runs it executes"
        )
    else:
        why = refusal(j, p.approval_id, p)
    if why is None:
        probe = state.model_copy(deep=True)
        try:
            apply(probe, Event(run_id=j.run_id, seq=probe.seq + 1, type=type_of(p),
                               payload=p, at_ms=0, epoch=0))  # fmt: skip
        except TransitionError as exc:
            why = exc.rule
    if why is None:
        return p
    return ApprovalRefused(
        approval_id=p.approval_id,
        approver=p.approver[:MAX_CLAIM_CHARS],
        decision=p.decision,
        delegate=p.delegate[:MAX_CLAIM_CHARS],
        reason=why,
    )


def check(j: Journal, aid: str) -> None:
    """Check every counted decision on ``aid`` again; record each one that no longer holds as
    refused and withdrawn (it stops counting: the approval may be requested again)."""
    info = j.state.approvals.get(aid)
    if info is None or info.status == "revoked" or not info.counted():
        return
    refused = [
        ApprovalRefused(
            approval_id=aid,
            approver=d.approver,
            decision=d.decision,
            delegate=d.delegate,
            reason=why,
            withdrawn=True,
        )
        for d in info.counted()
        if (why := refusal(j, aid, d)) is not None
    ]
    if refused:
        j.append(*refused, by_code=False)


def covering(
    j: Journal, approval: Approval, artifacts: Sequence[ArtifactRef | str], sid: str
) -> list[str]:
    """The content hashes an effect acts on (``artifacts``, or all the approval binds), each
    covered by ``approval`` (ApprovalInvalidError naming the first that is not: the content
    changed after approval, a new approval is needed)."""
    hashes = hashes_of(artifacts) or list(approval.hashes)
    missing = [h for h in hashes if h not in approval.hashes]
    if missing:
        raise ApprovalInvalidError(
            f"run {j.run_id!r} step {sid!r}: approval {approval.approval_id!r} does not "
            f"cover content sha256:{missing[0]} (the content changed after approval; "
            "a new approval is needed)"
        )
    return hashes


def renewed(
    j: Journal, approval: Approval, artifacts: Sequence[ArtifactRef | str], sid: str
) -> Approval:
    """``approval`` when it covers the content effect ``sid`` acts on; else (the content
    changed after approval) the approval of the new content, requested now under the same name,
    approvers and quorum — the run waits for it (Suspended, saying the content changed and which
    approval is requested), and once it is decided the effect goes on under it (issue 36, field
    card C24: no dead end after changed content). A denial is ApprovalDeniedError as usual."""
    hashes = hashes_of(artifacts) or list(approval.hashes)
    missing = [h for h in hashes if h not in approval.hashes]
    if not missing:
        return approval
    old = j.state.approvals.get(approval.approval_id)
    new_id = approval_id(approval.name, hashes)
    changed = (
        f"the content changed after approval {approval.approval_id!r} (it does not cover "
        f"sha256:{missing[0][:16]}…): a new approval {new_id!r} bound to the new content is "
        f"requested for step {sid!r}"
    )
    try:
        return request(
            j,
            approval.name,
            hashes,
            summary=changed,
            approvers=old.approvers if old is not None else (),
            required=old.required if old is not None else 1,
        )
    except Suspended as waiting:
        raise Suspended(f"{changed}; {waiting}") from None
    finally:
        j.asked = sid


def consumption(approval_id: str, sid: str, hashes: list[str]) -> ApprovalConsumed:
    """The event by which step ``sid`` consumes an approval for ``hashes`` (recorded with the
    effect's intent, in one append: G6)."""
    return ApprovalConsumed(approval_id=approval_id, step_id=sid, hashes=hashes)


def verify(j: Journal, approval: Approval) -> None:
    """Before an effect consumes ``approval``: apply pending messages (a revocation), check it
    is approved and unconsumed (ApprovalInvalidError otherwise) and that its decisions still
    hold. A decision that no longer holds is withdrawn and the run waits (Suspended) for a
    valid one; once one arrives the wait completes here and the effect goes on."""
    j.sync()
    aid = approval.approval_id
    info = j.state.approvals.get(aid)
    if info is None:
        raise ApprovalInvalidError(f"approval {aid!r} was never requested")
    if info.status == "consumed":
        raise ApprovalInvalidError(f"approval {aid!r} was already consumed by another effect")
    if info.status in ("revoked", "denied"):
        raise ApprovalInvalidError(
            f"approval {aid!r} is {info.status}; the effect is not authorized"
        )
    check(j, aid)
    if j.state.approvals[aid].status == "requested" and j.host.auto_approve:
        j.append(policy_decision(j, aid, approval.hashes))
    info = j.state.approvals[aid]
    w = j.state.wait
    if info.status == "requested":
        if w is None:
            j.append(
                WaitStarted(
                    wait_id=f"approval:{aid}",
                    kind="approval",
                    name=aid,
                    reason=f"approval {info.name}: a valid decision (one was refused)",
                )
            )
        raise Suspended(_waiting_reason(j, aid))
    if info.status != "approved":
        raise ApprovalInvalidError(
            f"approval {aid!r} is {info.status}; the effect is not authorized"
        )
    if w is not None and w.kind == "approval" and w.name == aid:
        j.append(WaitCompleted(wait_id=w.wait_id, via="decision"))
        faults.point("wait.completed")


def still_consumed(j: Journal, approval_id: str, sid: str) -> bool:
    """For an effect tried again under the consumption recorded with its first intent (after
    ``absent``): check the decisions again; whether the approval is still consumed by step
    ``sid`` (False: a decision was withdrawn, the approval must be decided and consumed
    anew)."""
    check(j, approval_id)
    info = j.state.approvals.get(approval_id)
    return info is not None and info.status == "consumed" and info.consumed_by == sid
