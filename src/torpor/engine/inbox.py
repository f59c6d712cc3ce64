"""The inbox: messages to a run from outside its lease holder — signals, approval decisions,
revocations, cancels, a person's resolution of an effect, budget changes and reopenings.

Nothing outside the lease holder writes a run's history: a message is posted to the run's inbox
(deduplicated by message id; :meth:`torpor.store.base.Store.post_inbox`) and the holder moves it
into the history at its next boundary (:func:`sync`), each message converted to its events and
validated by the fold like any other. A message the fold refuses, or whose body is malformed,
becomes a warning naming it, so a bad message never blocks the run (G11). A decision whose
signature does not verify is recorded as refused (:func:`.approvals.screen`, G6).
"""

from __future__ import annotations

from ..errors import InboxError, PayloadError, TransitionError
from ..history import (
    ApprovalDecided,
    ApprovalRevoked,
    BudgetSet,
    CancelRequested,
    Event,
    Payload,
    RunReopened,
    RunState,
    RunStatus,
    SignalReceived,
    WarningRecorded,
    apply,
    type_of,
)
from ..store import codec
from ..store.base import InboxMessage
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
                continue  # stays pending; a finished run takes only resolutions
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
        converted = convert(m, trial)
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


def _apply(state: RunState, p: Payload, epoch: int) -> Event:
    ev = Event(
        run_id=state.run_id, seq=state.seq + 1, type=type_of(p), payload=p, at_ms=0, epoch=epoch
    )
    apply(state, ev)
    return ev


def convert(m: InboxMessage, state: RunState) -> list[Payload]:
    """The events that record message ``m`` (InboxError for an unknown kind; KeyError,
    TypeError or ValueError for a malformed body)."""
    b = m.body
    if m.kind == "signal":
        return [SignalReceived(signal_id=m.message_id, name=b["name"], payload=b.get("payload"))]
    if m.kind == "decision":
        return [ApprovalDecided(**b)]
    if m.kind == "revoke":
        return [ApprovalRevoked(**b)]
    if m.kind == "cancel":
        return [CancelRequested(**b)]
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
