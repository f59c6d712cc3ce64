"""The inbox: messages to a run from outside its lease holder — signals, approval decisions,
revocations, cancels, a person's resolution of an effect, budget changes and reopenings.

Nothing outside the lease holder writes a run's history: a message is posted to the run's inbox
(deduplicated by message id; :meth:`torpor.store.base.Store.post_inbox`) and the holder moves it
into the history at its next boundary (:func:`sync`), each message converted to its events and
validated by the fold like any other. Every message gets a recorded disposition (G11):

- a signal by name is buffered (``signal_received``, with when it arrived) until a wait of its
  name takes it (``wait_completed`` names it: used once, tied to that wait);
- a signal addressed to one wait instance (``wait_id``) goes to that wait or is refused
  (``message_refused``): the wait is unknown, already answered, or its deadline came first;
- a decision whose signature does not verify is recorded as refused
  (:func:`.approvals.screen`, G6); so is one its sender's client refused before sending it
  (a ``refused`` message: stale content, an approval that no longer waits);
- a message that reached a run after its outcome (a reopening that does not apply, a message
  posted before the store refused them) is refused with the outcome;
- an operator's steering message (``steer``) is recorded (``steer_received``) and taken by the
  agent's next boundary (``steer_taken``), or refused when the run ends first; a run of a
  plain workflow function (not ``steerable``) refuses it as it arrives (``not an agent``);
- a child run's outcome (``child``, posted by the store with the child's ``run_finished``) is
  recorded as ``child_ended`` (:mod:`.children`);
- a message the fold refuses, or whose body is malformed, becomes a warning naming it, so a bad
  message never blocks the run.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable

from ..errors import InboxError, PayloadError, TorporError, TransitionError
from ..history import (
    REOPENABLE,
    ApprovalDecided,
    ApprovalRefused,
    ApprovalRevoked,
    BudgetSet,
    CancelRequested,
    ChildEnded,
    Event,
    MessageRefused,
    Outcome,
    Payload,
    RunReopened,
    RunState,
    RunStatus,
    SignalReceived,
    SteerReceived,
    WarningRecorded,
    apply,
    type_of,
)
from ..store import codec
from ..store.base import REOPENING_KINDS, Completion, InboxMessage, Store
from . import approvals
from .effects import resolution_payloads
from .journal import Journal


def sync(j: Journal) -> None:
    """Move the run's pending inbox messages into the history, in arrival order, in one
    append that also marks them consumed."""
    msgs = j.store.pending_inbox(j.run_id)
    if not msgs:
        return
    payloads: list[Payload] = []
    consumes: list[tuple[str, int]] = []
    trial = j.state.model_copy(deep=True)
    for m in msgs:
        snapshot = trial.model_copy(deep=True)
        try:
            converted = _trial(j, trial, m)
        except TransitionError as exc:
            trial = snapshot
            if trial.status is RunStatus.FINISHED:
                # A finished run takes only a resolution that reopens it; anything else that
                # got in is refused, on the record (never left unread).
                why = f"run already finished: {trial.outcome}"
                converted = [
                    MessageRefused(
                        message_id=m.message_id,
                        kind=m.kind,
                        reason=f"{why} ({exc.rule})" if m.kind in REOPENING_KINDS else why,
                        name=_name(m),
                        arrived_at_ms=m.at_ms,
                    )
                ]
            else:
                converted = [
                    WarningRecorded(message=f"ignored {m.kind} message {m.message_id}: {exc.rule}")
                ]
            _apply(trial, converted[0], j.lease.epoch)
        payloads.extend(converted)
        consumes.append((m.message_id, trial.seq))
    if payloads:
        j.append(*payloads, consumes=consumes, by_code=False)


def _trial(j: Journal, trial: RunState, m: InboxMessage) -> list[Payload]:
    """``m``'s events, folded into ``trial`` (TransitionError when refused or malformed)."""
    try:
        if m.kind == "steer" and not j.steerable:
            converted: list[Payload] = [not_steerable(m, trial.workflow)]
        else:
            converted = convert(m, trial, lambda wid: j.store.step_completion(j.run_id, wid))
    except (InboxError, KeyError, TypeError, ValueError) as bad:
        # A malformed body (missing fields, unknown kind, wrong types) is refused like an
        # impossible transition: a warning, never an error that blocks the run for good.
        detail = f"malformed: {type(bad).__name__}: {bad}".splitlines()[0]
        raise TransitionError(trial.run_id, trial.seq + 1, m.kind, detail) from bad
    # A decision is verified where it is delivered: one that fails is recorded as refused.
    converted = [approvals.screen(j, trial, p) for p in converted]
    for p in converted:
        ev = _apply(trial, p, j.lease.epoch)
        try:
            codec.encode(ev)  # a record that cannot be stored would block the run
        except PayloadError as big:
            raise TransitionError(trial.run_id, ev.seq, ev.type, str(big)) from big
    return converted


def not_steerable(m: InboxMessage, workflow: str) -> MessageRefused:
    """The refusal of steering message ``m`` to a run of ``workflow``, a plain workflow
    function: it has no boundary before a model call to take it (G11: refused as it arrives,
    not left pending)."""
    return MessageRefused(
        message_id=m.message_id,
        kind="steer",
        reason=f"rejected: not an agent (workflow {workflow!r} takes no steering message; "
        "signal it instead)",
        arrived_at_ms=m.at_ms,
    )


def _apply(state: RunState, p: Payload, epoch: int) -> Event:
    ev = Event(
        run_id=state.run_id, seq=state.seq + 1, type=type_of(p), payload=p, at_ms=0, epoch=epoch
    )
    apply(state, ev)
    return ev


def convert(
    m: InboxMessage, state: RunState, closed: Callable[[str], Completion | None]
) -> list[Payload]:
    """The events that record message ``m`` in ``state`` (InboxError for an unknown kind;
    KeyError, TypeError or ValueError for a malformed body). ``closed(wait_id)``: the recorded
    completion of a wait that is no longer open (to say why an answer to it is refused)."""
    b = m.body
    if m.kind == "signal":
        name, wait_id = b["name"], b.get("wait_id")
        if not isinstance(name, str) or not (wait_id is None or isinstance(wait_id, str)):
            raise TypeError("a signal's name and wait_id are strings")
        if wait_id is not None:
            why = _unanswerable(state, name, wait_id, m.at_ms, closed)
            if why:
                return [
                    MessageRefused(
                        message_id=m.message_id,
                        kind=m.kind,
                        reason=why,
                        name=name,
                        wait_id=wait_id,
                        arrived_at_ms=m.at_ms,
                    )
                ]
        return [
            SignalReceived(
                signal_id=m.message_id,
                name=name,
                payload=b.get("payload"),
                arrived_at_ms=m.at_ms,
                wait_id=wait_id,
            )
        ]
    if m.kind == "decision":
        return [ApprovalDecided(**{**b, "arrived_at_ms": m.at_ms})]
    if m.kind == "refused":
        # A decision its sender's client refused before sending it (stale content, an
        # approval that no longer waits, a key the keyring refuses): recorded, never applied.
        return [
            ApprovalRefused(
                approval_id=b["approval_id"],
                approver=str(b["approver"]),
                decision=str(b.get("decision", "")),
                delegate=str(b.get("delegate", "")),
                reason=str(b["reason"]),
            )
        ]
    if m.kind == "steer":
        # An operator's message to a running agent (issue 39): pending until its next boundary.
        return [
            SteerReceived(
                message_id=m.message_id,
                text=str(b["text"]),
                by=str(b.get("by", "")),
                interrupt=bool(b.get("interrupt")),
                arrived_at_ms=m.at_ms,
            )
        ]
    if m.kind == "revoke":
        return [ApprovalRevoked(**b)]
    if m.kind == "cancel":
        return [CancelRequested(**b)]
    if m.kind == "child":
        # A child's outcome, posted by the store with the child's run_finished (issue 37).
        return [
            ChildEnded(
                child_run_id=b["child"],
                outcome=b["outcome"],
                seq=int(b["seq"]),
                message_id=m.message_id,
                arrived_at_ms=m.at_ms,
            )
        ]
    if m.kind == "resolve":
        return resolution_payloads(state, b)
    if m.kind == "reopen":
        # A person reopens a blocked run, optionally with new budget limits (which a running
        # run also takes, without reopening).
        reopen: list[Payload] = []
        if state.status is RunStatus.FINISHED or not b.get("budget"):
            reopen.append(
                RunReopened(
                    by=b["by"],
                    reason=b.get("reason", ""),
                    step=b.get("step"),
                    retry=bool(b.get("retry")),
                )
            )
        if b.get("budget"):
            reopen.append(BudgetSet(**b["budget"], by=b["by"], reason=b.get("reason", "")))
        return reopen
    raise InboxError(f"unknown inbox message kind {m.kind!r}")


def post_refusal(
    store: Store,
    run_id: str,
    approval_id: str,
    decision: str,
    approver: str,
    delegate: str | None,
    why: str,
) -> None:
    """Post a decision refused before it was sent as a ``refused`` message, which the run
    records as an ``approval_refused`` event — who, what and why (issue 34: a refusal leaves
    a trace, G11; ``torpor show`` lists it). Best effort: for a run that finished, or a store
    that cannot take it, the caller's refusal is all there is."""
    body = {
        "approval_id": approval_id,
        "approver": approver,
        "decision": decision,
        "delegate": delegate or "",
        "reason": f"refused before it was sent: {why}",
    }
    with contextlib.suppress(TorporError):
        store.post_inbox(
            run_id, "refused", body, message_id=f"refused:{run_id}:{uuid.uuid4().hex[:16]}"
        )


def _unanswerable(
    state: RunState,
    name: str,
    wait_id: str,
    at_ms: int,
    closed: Callable[[str], Completion | None],
) -> str:
    """Why an answer to wait ``wait_id`` (signal ``name``, arrived at ``at_ms``) cannot be
    taken by it, or "" when that wait is open and will take it."""
    w = state.wait
    if w is None or w.wait_id != wait_id:
        done = closed(wait_id)
        if done is not None:
            res = done.result if isinstance(done.result, dict) else {}
            if res.get("timeout"):
                return f"wait {wait_id} timed out before it arrived"
            by = res.get("signal_id")
            return f"wait {wait_id} was already answered" + (f" (by message {by})" if by else "")
        return f"the run has no open wait {wait_id}"
    if w.kind != "signal":
        return f"wait {wait_id} waits for {w.kind} {w.name!r}, not for a signal"
    if w.name != name:
        return f"wait {wait_id} waits for signal {w.name!r}, not {name!r}"
    if w.deadline_ms is not None and at_ms >= w.deadline_ms:
        return f"arrived after the deadline of wait {wait_id}"
    taken = state.answer()
    if taken is not None:
        return f"wait {wait_id} was already answered (by message {taken.signal_id})"
    return ""


def _name(m: InboxMessage) -> str | None:
    """The signal name of ``m`` when it is a well-formed signal."""
    name = m.body.get("name") if m.kind == "signal" else None
    return name if isinstance(name, str) else None


def unused_at_outcome(state: RunState, outcome: Outcome) -> list[Payload]:
    """The refusal of every signal still buffered when the run ends with ``outcome``: no wait
    took it, and none will (G11: a finished run holds no unread message). A run that may be
    reopened (``unresolved``, ``blocked``) keeps them for the waits it may still reach."""
    if outcome in REOPENABLE:
        return []
    out: list[Payload] = [
        MessageRefused(
            message_id=x.message_id,
            kind="steer",
            reason=f"unused: the run ended {outcome.value} before a boundary took it",
            arrived_at_ms=x.arrived_at_ms,
        )
        for x in state.steering
        if x.status == "pending"
    ]
    for name, sigs in state.signals.items():
        for sig in sigs:
            why = f"unused: the run ended {outcome.value} before a wait for {name!r} took it"
            if sig.late_for:
                why += f" (it arrived after the deadline of wait {sig.late_for})"
            out.append(
                MessageRefused(
                    message_id=sig.signal_id,
                    kind="signal",
                    reason=why,
                    name=name,
                    wait_id=sig.wait_id or sig.late_for,
                    arrived_at_ms=sig.arrived_at_ms,
                )
            )
    return out
