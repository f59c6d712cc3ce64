"""The fold: ``events -> RunState``, and the only home of the transition rules (guarantee G4).

No I/O happens here. :func:`apply` checks that an event is a possible transition *before*
changing anything, and raises :class:`~torpor.errors.TransitionError` naming the run, the seq and
the rule broken otherwise. The engine folds every event before it asks the store to append it,
so impossible histories are never written; the store adds the two rules this compact state
cannot see (a completed step never reruns, a performed effect key is never intended again),
checked against its indexes at append time.

Each rule is a function of ``(state, payload, event, refuse)`` registered for its payload type
with ``@rule(PayloadType)``; it validates first and mutates only once nothing can be refused.
The rules of approvals live in :mod:`.decisions` and those of an agent's plans in :mod:`.plans`,
registered into the same table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import TransitionError
from .events import (
    EVENT_TYPES,
    REOPENABLE,
    SHA256_RE,
    ApprovalDecided,
    ApprovalRefused,
    ApprovalRevoked,
    ArtifactCreated,
    AttentionNeeded,
    BudgetSet,
    CancelRequested,
    CheckpointSaved,
    ChildEnded,
    EffectFailed,
    EffectIntended,
    EffectObserved,
    EffectReconciled,
    Event,
    LeaseAcquired,
    MessageRefused,
    Outcome,
    Payload,
    Policy,
    RunFinished,
    RunReopened,
    RunStarted,
    RunStatus,
    SignalReceived,
    StepCompleted,
    StepFailed,
    StepStarted,
    Verdict,
    VerificationRecorded,
    VersionAccepted,
    WarningRecorded,
)
from .state import (
    ArtifactRef,
    EffectInfo,
    RunState,
    StepInfo,
)
from .steer_events import SteerReceived

#: ``refuse(rule)``: the TransitionError naming the run, the seq, the event type and ``rule``.
Refuse = Callable[[str], TransitionError]
#: Events that do not mean the run proceeded (a message arrived, an execution began, someone
#: noted a problem): they leave a needs-attention detail in place; every other event clears it.
_NOT_PROGRESS: frozenset[type[Payload]] = frozenset(
    {
        AttentionNeeded,
        LeaseAcquired,
        SignalReceived,
        ApprovalDecided,
        ApprovalRefused,
        ApprovalRevoked,
        CancelRequested,
        BudgetSet,
        ChildEnded,
        MessageRefused,
        WarningRecorded,
        SteerReceived,
    }
)
Rule = Callable[[RunState, Any, Event, Refuse], None]
#: The rule of each payload type (see :func:`rule`); every type has one.
RULES: dict[type[Payload], Rule] = {}
#: The only events a finished run takes: its reopening, and the refusal of a message that
#: reached it after its outcome (G11: every message gets a recorded disposition).
AFTER_OUTCOME = frozenset({"run_reopened", "message_refused"})


def rule(payload_type: type[Payload]) -> Callable[[Rule], Rule]:
    """Register the rule of one payload type: ``fn(state, payload, event, refuse)`` validates
    first (``raise refuse("why")``), then mutates the state."""

    def deco(fn: Rule) -> Rule:
        RULES[payload_type] = fn
        return fn

    return deco


def _refuse(state: RunState, seq: int, etype: str, rule: str) -> TransitionError:
    return TransitionError(state.run_id, seq, etype, rule)


def apply(state: RunState, event: Event) -> RunState:
    """Apply one event to ``state`` in place and return it.

    Raises :class:`TransitionError` — leaving ``state`` untouched — when the event is not the
    next dense ``seq``, belongs to another run, or is an impossible transition.
    """
    p = event.payload
    et = event.type
    seq = event.seq

    def refuse(rule: str) -> TransitionError:
        return _refuse(state, seq, et, rule)

    if event.run_id != state.run_id:
        raise refuse(f"event belongs to run {event.run_id!r}")
    if seq != state.seq + 1:
        raise refuse(f"seq must be {state.seq + 1} (dense, append-only)")
    if EVENT_TYPES.get(et) is not type(p):
        raise refuse("payload does not match the event type")
    if state.seq == 0 and et != "run_started":
        raise refuse("the first event of a run must be run_started")
    if state.seq > 0 and et == "run_started":
        raise refuse("run already started")
    if state.status is RunStatus.FINISHED and et not in AFTER_OUTCOME:
        raise refuse(f"run already finished with outcome {state.outcome}")

    RULES[p.__class__](state, p, event, refuse)  # validates first, then mutates
    if state.attention and p.__class__ not in _NOT_PROGRESS:
        state.attention = ""  # the run proceeds: whatever held it is behind it
    state.seq = seq
    return state


def fold(events: list[Event] | tuple[Event, ...], state: RunState | None = None) -> RunState:
    """Fold events onto a copy of ``state`` (or a fresh state for the first event's run)."""
    if state is None:
        if not events:
            raise ValueError("fold() of no events needs an initial state")
        state = RunState(run_id=events[0].run_id)
    else:
        state = state.model_copy(deep=True)
    for ev in events:
        apply(state, ev)
    return state


@rule(RunStarted)
def _run_started(s: RunState, p: RunStarted, e: Event, refuse: Refuse) -> None:
    s.workflow, s.version, s.input = p.workflow, p.version, p.input
    s.criteria, s.goal = list(p.criteria), p.goal
    s.module = p.module
    s.status = RunStatus.PENDING
    s.started_at_ms = e.at_ms


@rule(LeaseAcquired)
def _lease_acquired(s: RunState, p: LeaseAcquired, e: Event, refuse: Refuse) -> None:
    if p.epoch <= s.epoch:
        raise refuse(f"lease epoch {p.epoch} is not above the current epoch {s.epoch}")
    s.epoch, s.owner = p.epoch, p.owner
    if s.status is RunStatus.PENDING:
        s.status = RunStatus.RUNNING


@rule(VersionAccepted)
def _version_accepted(s: RunState, p: VersionAccepted, e: Event, refuse: Refuse) -> None:
    if p.from_version != s.version:
        raise refuse(f"run is at version {s.version!r}, not {p.from_version!r}")
    s.version = p.to_version


@rule(StepStarted)
def _step_started(s: RunState, p: StepStarted, e: Event, refuse: Refuse) -> None:
    cur = s.steps.get(p.step_id)
    if cur is not None:
        if p.policy is not cur.policy:
            raise refuse(
                f"step {p.step_id!r} was started with policy {cur.policy}, not {p.policy}; "
                "a step id keeps its recovery policy"
            )
        # A crash may leave a step open; a new attempt supersedes it, except for an effect.
        if cur.status == "started" and p.policy is Policy.EFFECT:
            raise refuse(f"effect step {p.step_id!r} is open; reconcile it, never restart it")
        if p.attempt <= cur.attempt:
            raise refuse(f"attempt {p.attempt} of step {p.step_id!r} is not above {cur.attempt}")
    if s.wait is not None and not p.step_id.startswith(f"{s.wait.wait_id}/"):
        # (A wait's own step, ``<wait id>/…``: a stage of its escalation chain, issue 39.)
        raise refuse(f"run is waiting on {s.wait.kind} {s.wait.name!r}")
    s.steps[p.step_id] = StepInfo(
        status="started",
        policy=p.policy,
        attempt=p.attempt,
        input_hash=p.input_hash,
        purpose=p.purpose,
        started_at_ms=e.at_ms,
    )
    s.last_step = p.step_id
    s.last_purpose = p.purpose
    if s.wait is None:
        s.status = RunStatus.RUNNING


def open_step(s: RunState, step_id: str, refuse: Refuse) -> StepInfo:
    cur = s.steps.get(step_id)
    if cur is None:
        raise refuse(f"step {step_id!r} was never started")
    if cur.status != "started":
        raise refuse(f"step {step_id!r} is not open (it is {cur.status})")
    return cur


_DOUBT = ("intended", "unknown")


def _refuse_if_in_doubt(s: RunState, step_id: str, verb: str, refuse: Refuse) -> None:
    """A step whose effect may have happened is neither done nor failed until it is settled."""
    doubt = [k for k, x in s.effects.items() if x.step_id == step_id and x.status in _DOUBT]
    if doubt:
        raise refuse(f"step {step_id!r} {verb} while its effect(s) {doubt} are in doubt")


@rule(StepCompleted)
def _step_completed(s: RunState, p: StepCompleted, e: Event, refuse: Refuse) -> None:
    if p.attempt:
        _whole_step(s, p, refuse)
        return
    open_step(s, p.step_id, refuse)
    _refuse_if_in_doubt(s, p.step_id, "completed", refuse)
    # A completed step leaves the state at once, so the state (and every checkpoint) stays
    # the size of what is *open*, however long the history. Its result stays in the history,
    # read back by an indexed lookup; the store refuses to start it again (SQLStore checks the
    # indexed history at append time), which is the rule this compact fold cannot see.
    del s.steps[p.step_id]
    s.steps_completed += 1


def _whole_step(s: RunState, p: StepCompleted, refuse: Refuse) -> None:
    """A whole read/compute attempt in one ``step_completed`` (see :class:`StepCompleted`):
    the rules of ``step_started`` and of a completion, checked together."""
    if p.policy is not Policy.READ and p.policy is not Policy.COMPUTE:
        raise refuse(
            f"step {p.step_id!r}: a whole-step record (attempt {p.attempt}) is for read or "
            f"compute steps, not {p.policy}"
        )
    if p.attempt < 0:
        raise refuse(f"attempt {p.attempt} of step {p.step_id!r} is negative")
    cur = s.steps.get(p.step_id)
    if cur is not None:
        if cur.status == "started":
            raise refuse(
                f"step {p.step_id!r} is open: its completion closes the open attempt "
                "(attempt 0), it does not record another"
            )
        if p.policy is not cur.policy:
            raise refuse(
                f"step {p.step_id!r} was started with policy {cur.policy}, not {p.policy}; "
                "a step id keeps its recovery policy"
            )
        if p.attempt <= cur.attempt:
            raise refuse(f"attempt {p.attempt} of step {p.step_id!r} is not above {cur.attempt}")
    if s.wait is not None:
        raise refuse(f"run is waiting on {s.wait.kind} {s.wait.name!r}")
    if cur is not None:
        del s.steps[p.step_id]
    s.last_step = p.step_id
    # (Per step: each assignment to a pydantic model costs; skip the ones that change nothing.)
    if s.last_purpose != p.purpose:
        s.last_purpose = p.purpose
    if s.status is not RunStatus.RUNNING:
        s.status = RunStatus.RUNNING
    s.steps_completed += 1


@rule(StepFailed)
def _step_failed(s: RunState, p: StepFailed, e: Event, refuse: Refuse) -> None:
    cur = open_step(s, p.step_id, refuse)
    _refuse_if_in_doubt(s, p.step_id, "failed", refuse)
    cur.status = "failed"


@rule(EffectIntended)
def _effect_intended(s: RunState, p: EffectIntended, e: Event, refuse: Refuse) -> None:
    step = open_step(s, p.step_id, refuse)
    if step.policy is not Policy.EFFECT:
        raise refuse(f"step {p.step_id!r} has policy {step.policy}, not effect")
    cur = s.effects.get(p.key)
    if cur is not None and cur.status not in ("absent", "failed"):
        raise refuse(f"effect {p.key!r} is already {cur.status}; it is never performed blindly")
    if cur is not None and p.attempt <= cur.attempt:
        raise refuse(f"effect {p.key!r} attempt {p.attempt} is not above {cur.attempt}")
    if p.approval_id is not None:
        appr = s.approvals.get(p.approval_id)
        if appr is None or appr.status != "consumed" or appr.consumed_by != p.step_id:
            raise refuse(
                f"effect {p.key!r} cites approval {p.approval_id!r} that step {p.step_id!r} "
                "has not consumed"
            )
    s.effects[p.key] = EffectInfo(
        step_id=p.step_id,
        operation=p.operation,
        attempt=p.attempt,
        status="intended",
        approval_id=p.approval_id,
    )


@rule(EffectObserved)
def _effect_observed(s: RunState, p: EffectObserved, e: Event, refuse: Refuse) -> None:
    cur = s.effects.get(p.key)
    if cur is None or cur.status != "intended":
        status = cur.status if cur else "never intended"
        raise refuse(f"effect {p.key!r} cannot be observed: it is {status}")
    # A performed effect leaves the state (like a completed step): the state stays the size of
    # what is in doubt, however many effects the run performed. Its key stays known to the
    # store's effect index, which refuses to intend it again (G2).
    del s.effects[p.key]
    s.effects_applied += 1


@rule(EffectReconciled)
def _effect_reconciled(s: RunState, p: EffectReconciled, e: Event, refuse: Refuse) -> None:
    cur = s.effects.get(p.key)
    if cur is None or cur.status not in ("intended", "unknown"):
        status = cur.status if cur else "never intended"
        raise refuse(f"effect {p.key!r} is not in doubt (it is {status})")
    if p.by == "engine" and cur.status == "unknown":
        raise refuse(f"effect {p.key!r} was found unknown; only a person can settle it now")
    if p.verdict is Verdict.APPLIED:
        del s.effects[p.key]  # performed: it leaves the state, as an observed effect does
        s.effects_applied += 1
        return
    cur.status = "absent" if p.verdict is Verdict.ABSENT else "unknown"
    cur.reason = p.reason


@rule(EffectFailed)
def _effect_failed(s: RunState, p: EffectFailed, e: Event, refuse: Refuse) -> None:
    cur = s.effects.get(p.key)
    # Only an intended effect fails (the call raised and nothing happened). An absent one is
    # performed again or left alone; allowing absent -> failed also made the rule depend on
    # whether a user checkpoint had pruned the absent effect in between.
    if cur is None or cur.status != "intended":
        status = cur.status if cur else "never intended"
        raise refuse(f"effect {p.key!r} cannot fail: it is {status}, not intended")
    cur.status = "failed"
    cur.reason = p.error


@rule(ArtifactCreated)
def _artifact_created(s: RunState, p: ArtifactCreated, e: Event, refuse: Refuse) -> None:
    prev = s.artifacts.get(p.name)
    want = (prev.version + 1) if prev else 1
    if p.version != want:
        raise refuse(f"artifact {p.name!r} version must be {want}")
    if not SHA256_RE.fullmatch(p.sha256):
        raise refuse("artifact sha256 must be 64 lowercase hex digits")
    s.artifacts[p.name] = ArtifactRef(**p.model_dump())


@rule(CheckpointSaved)
def _checkpoint_saved(s: RunState, p: CheckpointSaved, e: Event, refuse: Refuse) -> None:
    s.user_state = p.state
    s.user_checkpoint_seq = e.seq
    s.counters = dict(p.counters)
    # Steps need no pruning: a completed one left the state when it completed, and a failed
    # one stays, so that replay raises its recorded failure instead of running it again (G1).
    # Effects are kept unless they certainly did not happen (absent, failed): the checkpoint
    # must answer "what effects may have occurred", and an observed key must stay known so it
    # is never performed again (G2).
    s.effects = {k: v for k, v in s.effects.items() if v.status not in ("absent", "failed")}


@rule(VerificationRecorded)
def _verification_recorded(s: RunState, p: VerificationRecorded, e: Event, refuse: Refuse) -> None:
    s.verifications[p.name] = p


@rule(WarningRecorded)
def _warning_recorded(s: RunState, p: WarningRecorded, e: Event, refuse: Refuse) -> None:
    s.warnings.append(p.message)


@rule(RunFinished)
def _run_finished(s: RunState, p: RunFinished, e: Event, refuse: Refuse) -> None:
    doubt = s.effects_in_doubt()
    if doubt and p.outcome is not Outcome.UNRESOLVED:
        # Whatever else happened, an effect that may have happened makes the run unresolved
        # (G2): it is neither failed nor stopped, cancelled or blocked "before any effect".
        raise refuse(f"effects {doubt} are in doubt: the only honest outcome is unresolved")
    if p.outcome in (Outcome.SUCCEEDED, Outcome.SUCCEEDED_WITH_WARNINGS):
        missing, failing = s.unmet_criteria()
        if missing or failing:
            raise refuse(
                "success needs a passing verification of every criterion "
                f"(missing {missing}, failing {failing})"
            )
        if p.outcome is Outcome.SUCCEEDED and s.warnings:
            raise refuse("run recorded warnings: the outcome is succeeded_with_warnings")
        held = [c for c, o in s.children.items() if o in REOPENABLE]
        if held:
            # G14: no parent succeeds over a child that is unresolved or blocked.
            raise refuse(f"child run(s) {held} are unresolved or blocked: no success over them")
    if p.outcome is Outcome.STOPPED_SAFE and s.effects_applied:
        raise refuse("stopped_safe means no effect happened, but effects were applied")
    s.status = RunStatus.FINISHED
    s.outcome = p.outcome
    s.outcome_reason = p.reason
    s.result = p.result
    s.wait = None
    if p.outcome not in REOPENABLE:
        # Planned tool calls never run get their outcome with the run's (never dangling);
        # a blocked or unresolved run may be reopened, and its calls then continue.
        for call in s.plan.values():
            if call.status == "pending":
                call.status = "skipped"


@rule(RunReopened)
def _run_reopened(s: RunState, p: RunReopened, e: Event, refuse: Refuse) -> None:
    if s.status is not RunStatus.FINISHED or s.outcome not in REOPENABLE:
        raise refuse(f"only an unresolved or blocked run can be reopened (it is {s.outcome})")
    s.status = RunStatus.PENDING
    s.outcome = None
    s.outcome_reason = ""
    if p.retry or p.step is not None:
        # The crashed attempts so far are forgiven: the crash limit counts from here.
        for sid, info in s.steps.items():
            if info.status == "started" and p.step in (None, sid):
                s.forgiven[sid] = _attempts(s, sid)


def _attempts(s: RunState, sid: str) -> int:
    """How many attempts step ``sid`` started: its own, or its effect's when it is an effect
    re-intended after each crash."""
    n = s.steps[sid].attempt if sid in s.steps else 0
    return max([n, *(x.attempt for x in s.effects.values() if x.step_id == sid)])


def crashed_attempts(s: RunState, sid: str) -> int:
    """Attempts of step ``sid`` that started and neither completed nor failed (their process
    died), minus those a person forgave with ``torpor retry``."""
    info = s.steps.get(sid)
    if info is None or info.status != "started":
        return 0
    return _attempts(s, sid) - s.forgiven.get(sid, 0)


@rule(AttentionNeeded)
def _attention_needed(s: RunState, p: AttentionNeeded, e: Event, refuse: Refuse) -> None:
    if s.status is RunStatus.FINISHED:
        raise refuse("a finished run needs no attention")
    if not p.detail.strip():
        raise refuse("an attention record names why")
    s.attention = p.detail
