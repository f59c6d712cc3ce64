"""Approvals (DESIGN.md G6): a person's decision bound to the exact content decided on.

:func:`request` asks for a decision on a set of content hashes and waits durably for it (a
``decision`` step, a wait of kind ``approval``); :func:`covering` and :func:`verify` are what an
effect checks before it consumes an approval (:mod:`.effects`): the approval covers the content
the effect acts on, is approved and unconsumed, and its decision's signature verifies. A
decision is built by :func:`signed_decision`, the one place a decision is signed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from .. import faults, serde, signing
from ..errors import ApprovalDeniedError, ApprovalInvalidError, Suspended, TorporError
from ..history import (
    ApprovalConsumed,
    ApprovalDecided,
    ApprovalRequested,
    ArtifactRef,
    Payload,
    Policy,
    StepCompleted,
    StepStarted,
    WaitCompleted,
    WaitStarted,
)
from ..store.base import Completion
from .journal import Journal
from .waits import expire


@dataclass(frozen=True)
class Approval:
    """A granted approval: authorizes effects on exactly ``hashes``."""

    approval_id: str
    name: str
    hashes: tuple[str, ...]
    approver: str


def signed_decision(
    key: bytes,
    run_id: str,
    approval_id: str,
    decision: str,
    approver: str,
    hashes: Sequence[str],
    at_ms: int,
    comment: str = "",
) -> ApprovalDecided:
    """A decision on ``hashes``, signed over what was decided (:mod:`torpor.signing`)."""
    body = signing.decision_body(run_id, approval_id, decision, approver, list(hashes), at_ms)
    return ApprovalDecided(
        approval_id=approval_id,
        decision=decision,
        approver=approver,
        hashes=sorted(hashes),
        signature=signing.sign(key, body),
        comment=comment,
        decided_at_ms=at_ms,
    )


def hashes_of(items: Sequence[ArtifactRef | str]) -> list[str]:
    """The sorted, distinct content hashes of artifacts or hashes."""
    return sorted({a.sha256 if isinstance(a, ArtifactRef) else a for a in items})


def request(
    j: Journal,
    name: str,
    artifacts: Sequence[ArtifactRef | str],
    *,
    summary: str = "",
    timeout: timedelta | None = None,
) -> Approval:
    """Ask a person to approve exactly this content; wait durably for the decision (see
    :meth:`torpor.Run.approval`). The approval id is ``<name>@<hash of the content hashes>``:
    different content is a different approval."""
    hashes = hashes_of(artifacts)
    if not hashes:
        raise TorporError(f"run {j.run_id!r}: approval {name!r} binds no content")
    aid = f"{name}@{serde.sha256_hex(','.join(hashes))[:12]}"
    wid = f"approval:{aid}"
    j.boundary()
    comp = j.recorded(wid, Policy.DECISION)
    if comp is None:
        comp = _decide(j, name, aid, wid, hashes, summary, timeout)
    res = comp.result or {}
    if res.get("decision") == "timeout":
        raise ApprovalDeniedError(f"approval {aid!r} timed out without a decision")
    if res.get("decision") != "approve":
        denied = j.state.approvals.get(aid)
        raise ApprovalDeniedError(
            f"approval {aid!r} denied by {res.get('approver')}"
            + (f": {denied.comment}" if denied and denied.comment else "")
        )
    return Approval(aid, name, tuple(hashes), res.get("approver") or "")


def _decide(
    j: Journal,
    name: str,
    aid: str,
    wid: str,
    hashes: list[str],
    summary: str,
    timeout: timedelta | None,
) -> Completion:
    """Record the request (once), then the decision when there is one; Suspended while none."""
    j.sync()
    if aid not in j.state.approvals:
        deadline = j.now_ms() + int(timeout.total_seconds() * 1000) if timeout else None
        payloads: list[Payload] = [
            StepStarted(step_id=wid, policy=Policy.DECISION, purpose=summary or name),
            ApprovalRequested(
                approval_id=aid, name=name, hashes=hashes, step_id=wid, summary=summary
            ),
            WaitStarted(
                wait_id=wid,
                kind="approval",
                name=aid,
                deadline_ms=deadline,
                reason=summary or f"approval {name}",
            ),
        ]
        auto = j.host.auto_approve
        if auto:
            payloads.append(
                signed_decision(
                    j.host.signing_key,
                    j.run_id,
                    aid,
                    "approve",
                    auto,
                    hashes,
                    j.now_ms(),
                    "auto-approved",
                )
            )
        j.append(*payloads, wake_at_ms=deadline)
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
            return _decide(j, name, aid, wid, hashes, summary, timeout)  # a message landed
        raise Suspended(f"waiting for approval {aid!r} of {len(hashes)} content hash(es)")
    decision = "deny" if info.status == "denied" else "approve"
    result = {"decision": decision, "approver": info.approver or ""}
    j.append(
        WaitCompleted(wait_id=wid, via="decision"),
        StepCompleted(step_id=wid, policy=Policy.DECISION, result=result),
    )
    faults.point("wait.completed")
    comp = j.recorded(wid, Policy.DECISION)
    assert comp is not None
    return comp


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


def consumption(approval_id: str, sid: str, hashes: list[str]) -> ApprovalConsumed:
    """The event by which step ``sid`` consumes an approval for ``hashes`` (recorded with the
    effect's intent, in one append: G6)."""
    return ApprovalConsumed(approval_id=approval_id, step_id=sid, hashes=hashes)


def verify(j: Journal, approval: Approval) -> None:
    """Before an effect consumes ``approval``: apply pending messages (a revocation), then
    check it is approved, unconsumed, and signed (ApprovalInvalidError otherwise)."""
    j.sync()
    aid = approval.approval_id
    info = j.state.approvals.get(aid)
    if info is None:
        raise ApprovalInvalidError(f"approval {aid!r} was never requested")
    if info.status == "consumed":
        raise ApprovalInvalidError(f"approval {aid!r} was already consumed by another effect")
    if info.status != "approved":
        raise ApprovalInvalidError(
            f"approval {aid!r} is {info.status}; the effect is not authorized"
        )
    body = signing.decision_body(
        j.run_id, aid, "approve", info.approver or "", info.hashes, info.decided_at_ms
    )
    if not signing.verify(j.host.signing_key, body, info.signature or ""):
        raise ApprovalInvalidError(f"approval {aid!r}: the decision's signature does not verify")
