"""Events and the pure fold: ``events -> RunState``, with the transition rules (guarantee G4).

No I/O happens here. A run's history is an append-only list of :class:`Event`; its state is
``fold(events)``. :func:`apply` checks that an event is a possible transition *before* changing
anything, and raises :class:`~torpor.errors.TransitionError` naming the run, the seq and the rule
broken otherwise — the store calls it at append time, so impossible histories are never written.

The state is deliberately *compact* so that a checkpoint stays small however long the run has
been going (guarantee G8): ``RunState.steps`` holds only open and failed steps — a completed
step leaves it at once (its result stays in the event history, read back by an indexed lookup,
and the store refuses to start it again); failed steps stay (replay raises their failure);
effects that certainly did not happen (absent, failed) are dropped at every user checkpoint,
and per-name maps (artifacts, verifications) keep the latest entry only. Effects that did or may
have happened are kept: they are what a checkpoint must answer about, and what prevents a key
from being performed twice.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import TransitionError

_SHA256_RE = re.compile(r"[0-9a-f]{64}")

#: Version of the event payload schema. A stored event with a higher version is refused.
#: 2: ``step_completed`` may record a whole read/compute step attempt (``attempt`` >= 1).
EVENT_SCHEMA_VERSION = 2


class Policy(StrEnum):
    """Recovery policy of a step (DESIGN.md §1)."""

    #: Safe to repeat: re-executed on resume if it did not complete.
    READ = "read"
    #: Deterministic: the recorded result is reused while its input hash is unchanged.
    COMPUTE = "compute"
    #: Changes the outside world: idempotency key, intent before the call, reconcile on recovery.
    EFFECT = "effect"
    #: A person's decision, bound to the content decided on.
    DECISION = "decision"


class Outcome(StrEnum):
    """Terminal state of a run (DESIGN.md §1)."""

    SUCCEEDED = "succeeded"
    SUCCEEDED_WITH_WARNINGS = "succeeded_with_warnings"
    STOPPED_SAFE = "stopped_safe"
    BLOCKED = "blocked"
    UNRESOLVED = "unresolved"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: Outcomes a person can reopen (resolve the effect in doubt, raise the limit, re-approve).
REOPENABLE = frozenset({Outcome.UNRESOLVED, Outcome.BLOCKED})


class RunStatus(StrEnum):
    """Where a run is in its life. ``finished`` runs carry an :class:`Outcome`."""

    PENDING = "pending"  # created or woken, runnable
    RUNNING = "running"  # has executed under a lease (may have crashed since)
    WAITING = "waiting"  # durable wait: holds no lease, no process
    FINISHED = "finished"


class Verdict(StrEnum):
    """What reconciling an intended-but-unobserved effect found (DESIGN.md §1, effect)."""

    APPLIED = "applied"
    ABSENT = "absent"
    UNKNOWN = "unknown"


# --------------------------------------------------------------------------- payloads


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunStarted(_Payload):
    workflow: str
    version: str
    input: Any = None
    criteria: list[str] = Field(default_factory=list)
    goal: str = ""
    #: The module that defines the workflow, imported on resume if the name is not registered.
    module: str = ""


class LeaseAcquired(_Payload):
    owner: str
    epoch: int


class VersionAccepted(_Payload):
    from_version: str
    to_version: str


class StepStarted(_Payload):
    step_id: str
    policy: Policy
    attempt: int = 1
    input_hash: str | None = None
    purpose: str = ""


class StepCompleted(_Payload):
    """A step's result.

    ``attempt`` 0 closes the step's open attempt (recorded by ``step_started``). ``attempt``
    N >= 1 records a whole attempt N of a ``read`` or ``compute`` step, started and completed
    in this one event (then ``purpose`` is the step's purpose): such a step does nothing outside
    the process that a record of its start could help recover, so the engine writes its start
    and end together, and one event halves what each plain step costs to fold, encode, store
    and index. Effects, decisions and waits keep their ``step_started``: their start is itself a
    fact recovery needs.
    """

    step_id: str
    result: Any = None
    policy: Policy | None = None
    input_hash: str | None = None
    attempt: int = 0
    purpose: str = ""


class StepFailed(_Payload):
    step_id: str
    error: str
    retryable: bool = False


class EffectIntended(_Payload):
    step_id: str
    key: str
    operation: str
    attempt: int = 1
    approval_id: str | None = None


class EffectObserved(_Payload):
    key: str
    result: Any = None


class EffectReconciled(_Payload):
    key: str
    verdict: Verdict
    result: Any = None
    reason: str = ""
    by: str = "engine"


class EffectFailed(_Payload):
    """The effect call raised and reconcile confirmed nothing happened."""

    key: str
    error: str


class ArtifactCreated(_Payload):
    name: str
    sha256: str
    version: int
    size: int
    media_type: str = "application/octet-stream"
    step_id: str | None = None


class ApprovalRequested(_Payload):
    approval_id: str
    name: str
    hashes: list[str]
    step_id: str | None = None
    summary: str = ""


class ApprovalDecided(_Payload):
    approval_id: str
    decision: Literal["approve", "deny"]
    approver: str
    hashes: list[str]
    signature: str
    comment: str = ""
    decided_at_ms: int = 0


class ApprovalRevoked(_Payload):
    approval_id: str
    by: str
    reason: str = ""


class ApprovalConsumed(_Payload):
    approval_id: str
    step_id: str
    hashes: list[str]


class WaitStarted(_Payload):
    wait_id: str
    kind: Literal["signal", "timer", "approval", "resolution"]
    name: str
    deadline_ms: int | None = None
    reason: str = ""


class SignalReceived(_Payload):
    signal_id: str
    name: str
    payload: Any = None


class WaitCompleted(_Payload):
    wait_id: str
    via: Literal["signal", "timer", "decision", "deadline"]
    signal_id: str | None = None
    payload: Any = None


class CheckpointSaved(_Payload):
    """A user checkpoint: ``run.checkpoint(state)``; resume restarts from it."""

    state: Any = None
    counters: dict[str, int] = Field(default_factory=dict)


class VerificationRecorded(_Payload):
    name: str
    passed: bool
    detail: Any = None


class WarningRecorded(_Payload):
    message: str
    step_id: str | None = None


class CancelRequested(_Payload):
    by: str = "user"
    reason: str = ""


class RunFinished(_Payload):
    outcome: Outcome
    reason: str = ""
    result: Any = None


class RunReopened(_Payload):
    by: str
    reason: str = ""


# --- agents (issue 4): plans, tool-call outcomes, model calls, budgets


class PlannedStep(_Payload):
    """One step of a plan: a call of ``tool`` with ``args`` (secrets redacted) after
    ``depends_on`` succeeded. ``args_hash`` is the hash of the exact validated arguments."""

    call_id: str = Field(min_length=1)
    tool: str = Field(min_length=1)
    args: Any = None
    args_hash: str = ""
    depends_on: list[str] = Field(default_factory=list)
    why: str = ""


class PlanRecorded(_Payload):
    """Plan version ``version`` (1, 2, …): replaces every step not yet settled; steps that
    succeeded under an earlier version stay succeeded and may not be changed."""

    version: int
    planner: str
    steps: list[PlannedStep] = Field(default_factory=list)
    reason: str = ""


#: How a planned tool call ended. ``succeeded``/``failed``: the tool ran; ``invalid``: its
#: arguments were refused before anything ran; ``denied``: a person refused it; ``skipped``:
#: never run (the run ended first).
ToolOutcome = Literal["succeeded", "failed", "invalid", "denied", "skipped"]


class ToolCallSettled(_Payload):
    """The recorded outcome of a planned tool call (never a dangling call)."""

    call_id: str
    outcome: ToolOutcome
    observation: Any = None
    #: The torpor step that executed it, if it ran.
    executed_by: str | None = None


class ModelCalled(_Payload):
    """A model call that returned, inside its (read) step: what the budget counts."""

    step_id: str
    model: str
    prompt_hash: str
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cost_usd: float | None = Field(default=None, ge=0)


class BudgetSet(_Payload):
    """Limits for the run (``None`` leaves a limit as it is): set by the agent at its start,
    raised (or lowered) by a person."""

    tokens: int | None = Field(default=None, gt=0)
    cost_usd: float | None = Field(default=None, gt=0)
    steps: int | None = Field(default=None, gt=0)
    wall_clock_s: float | None = Field(default=None, gt=0)
    by: str = "agent"
    reason: str = ""


EVENT_TYPES: dict[str, type[_Payload]] = {
    "run_started": RunStarted,
    "lease_acquired": LeaseAcquired,
    "version_accepted": VersionAccepted,
    "step_started": StepStarted,
    "step_completed": StepCompleted,
    "step_failed": StepFailed,
    "effect_intended": EffectIntended,
    "effect_observed": EffectObserved,
    "effect_reconciled": EffectReconciled,
    "effect_failed": EffectFailed,
    "artifact_created": ArtifactCreated,
    "approval_requested": ApprovalRequested,
    "approval_decided": ApprovalDecided,
    "approval_revoked": ApprovalRevoked,
    "approval_consumed": ApprovalConsumed,
    "wait_started": WaitStarted,
    "signal_received": SignalReceived,
    "wait_completed": WaitCompleted,
    "checkpoint_saved": CheckpointSaved,
    "verification_recorded": VerificationRecorded,
    "warning_recorded": WarningRecorded,
    "cancel_requested": CancelRequested,
    "run_finished": RunFinished,
    "run_reopened": RunReopened,
    "plan_recorded": PlanRecorded,
    "tool_call_settled": ToolCallSettled,
    "model_called": ModelCalled,
    "budget_set": BudgetSet,
}
_TYPE_OF: dict[type[_Payload], str] = {v: k for k, v in EVENT_TYPES.items()}


def type_of(payload: _Payload) -> str:
    """The event type name of a payload instance."""
    return _TYPE_OF[type(payload)]


class Event(BaseModel):
    """One history entry. ``seq`` is dense per run starting at 1; ``at_ms`` is epoch ms."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    seq: int
    type: str
    payload: _Payload
    at_ms: int
    epoch: int

    @property
    def step_id(self) -> str | None:
        """The step this event belongs to, when it belongs to one (indexed in the store)."""
        return getattr(self.payload, "step_id", None)


def starts_step(event: Event) -> bool:
    """Whether ``event`` starts an attempt of a step: a ``step_started``, or a whole read/compute
    attempt recorded by one ``step_completed`` (see :class:`StepCompleted`). The store refuses
    such an event for a step that already completed (a completed step never reruns)."""
    et = event.type
    return et == "step_started" or (
        et == "step_completed" and event.payload.attempt > 0  # type: ignore[attr-defined]
    )


# --------------------------------------------------------------------------- state


class StepInfo(BaseModel):
    status: Literal["started", "completed", "failed"]
    policy: Policy
    attempt: int
    input_hash: str | None = None
    purpose: str = ""


class EffectInfo(BaseModel):
    step_id: str
    operation: str
    attempt: int
    status: Literal["intended", "observed", "applied", "absent", "unknown", "failed"]
    approval_id: str | None = None
    reason: str = ""


class ArtifactRef(BaseModel):
    """A reference to an artifact by content: checkpoints never hold temp paths."""

    model_config = ConfigDict(frozen=True)

    name: str
    sha256: str
    version: int
    size: int
    media_type: str = "application/octet-stream"
    step_id: str | None = None


class ApprovalInfo(BaseModel):
    name: str
    hashes: list[str]
    status: Literal["requested", "approved", "denied", "revoked", "consumed"]
    approver: str | None = None
    signature: str | None = None
    decided_at_ms: int = 0
    comment: str = ""
    #: The step that consumed the approval: only that step's effects may cite it (G6).
    consumed_by: str | None = None


class WaitInfo(BaseModel):
    wait_id: str
    kind: str
    name: str
    deadline_ms: int | None = None
    reason: str = ""
    started_seq: int = 0


class PendingSignal(BaseModel):
    signal_id: str
    payload: Any = None


class PlanStepInfo(BaseModel):
    """A step of the current plan (or one settled under an earlier version)."""

    tool: str
    args_hash: str = ""
    depends_on: list[str] = Field(default_factory=list)
    status: Literal["pending", "succeeded", "failed", "invalid", "denied", "skipped", "superseded"]
    #: The plan version that last listed it.
    version: int


class Usage(BaseModel):
    """What the run has consumed, summed from ``model_called`` and ``tool_call_settled``."""

    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    #: Model calls whose cost is unknown (not in ``cost_usd``).
    cost_unknown: int = 0
    #: Tool calls that ran (settled succeeded or failed).
    tool_calls: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def steps(self) -> int:
        """Agent steps: model calls plus tool calls that ran."""
        return self.model_calls + self.tool_calls


class Budget(BaseModel):
    """Limits of a run; ``None`` is no limit."""

    tokens: int | None = None
    cost_usd: float | None = None
    steps: int | None = None
    wall_clock_s: float | None = None


class RunState(BaseModel):
    """The fold of a run's events. Compact by construction; see the module docstring."""

    run_id: str
    seq: int = 0
    workflow: str = ""
    version: str = ""
    input: Any = None
    goal: str = ""
    module: str = ""
    criteria: list[str] = Field(default_factory=list)
    status: RunStatus = RunStatus.PENDING
    outcome: Outcome | None = None
    outcome_reason: str = ""
    result: Any = None
    epoch: int = 0
    owner: str | None = None
    steps: dict[str, StepInfo] = Field(default_factory=dict)
    steps_completed: int = 0
    last_step: str | None = None
    last_purpose: str = ""
    pruned_seq: int = 0  # steps completed at or before this seq may be absent from ``steps``
    effects: dict[str, EffectInfo] = Field(default_factory=dict)
    effects_applied: int = 0
    artifacts: dict[str, ArtifactRef] = Field(default_factory=dict)
    approvals: dict[str, ApprovalInfo] = Field(default_factory=dict)
    wait: WaitInfo | None = None
    signals: dict[str, list[PendingSignal]] = Field(default_factory=dict)
    user_state: Any = None
    user_checkpoint_seq: int = 0
    counters: dict[str, int] = Field(default_factory=dict)
    verifications: dict[str, VerificationRecorded] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    cancel_requested: bool = False
    cancel_reason: str = ""
    #: When run_started was recorded (epoch ms): the wall-clock budget counts from it.
    started_at_ms: int = 0
    plan_version: int = 0
    plan: dict[str, PlanStepInfo] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)
    budget: Budget = Field(default_factory=Budget)

    def effects_in_doubt(self) -> list[str]:
        """Keys of effects that may have happened without a recorded observation."""
        return [k for k, e in self.effects.items() if e.status in ("intended", "unknown")]


# --------------------------------------------------------------------------- the fold


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
    if state.status is RunStatus.FINISHED and et != "run_reopened":
        raise refuse(f"run already finished with outcome {state.outcome}")

    handler = _HANDLERS[et]
    handler(state, event, refuse)  # validates first, then mutates
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


Refuse = Any  # callable(rule: str) -> TransitionError


def _run_started(s: RunState, e: Event, refuse: Refuse) -> None:
    p: RunStarted = e.payload  # type: ignore[assignment]
    s.workflow, s.version, s.input = p.workflow, p.version, p.input
    s.criteria, s.goal = list(p.criteria), p.goal
    s.module = p.module
    s.status = RunStatus.PENDING
    s.started_at_ms = e.at_ms


def _lease_acquired(s: RunState, e: Event, refuse: Refuse) -> None:
    p: LeaseAcquired = e.payload  # type: ignore[assignment]
    if p.epoch <= s.epoch:
        raise refuse(f"lease epoch {p.epoch} is not above the current epoch {s.epoch}")
    s.epoch, s.owner = p.epoch, p.owner
    if s.status is RunStatus.PENDING:
        s.status = RunStatus.RUNNING


def _version_accepted(s: RunState, e: Event, refuse: Refuse) -> None:
    p: VersionAccepted = e.payload  # type: ignore[assignment]
    if p.from_version != s.version:
        raise refuse(f"run is at version {s.version!r}, not {p.from_version!r}")
    s.version = p.to_version


def _step_started(s: RunState, e: Event, refuse: Refuse) -> None:
    p: StepStarted = e.payload  # type: ignore[assignment]
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
    if s.wait is not None:
        raise refuse(f"run is waiting on {s.wait.kind} {s.wait.name!r}")
    s.steps[p.step_id] = StepInfo(
        status="started",
        policy=p.policy,
        attempt=p.attempt,
        input_hash=p.input_hash,
        purpose=p.purpose,
    )
    s.last_step = p.step_id
    s.last_purpose = p.purpose
    s.status = RunStatus.RUNNING


def _open_step(s: RunState, step_id: str, refuse: Refuse) -> StepInfo:
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


def _step_completed(s: RunState, e: Event, refuse: Refuse) -> None:
    p: StepCompleted = e.payload  # type: ignore[assignment]
    if p.attempt:
        _whole_step(s, p, refuse)
        return
    _open_step(s, p.step_id, refuse)
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


def _step_failed(s: RunState, e: Event, refuse: Refuse) -> None:
    p: StepFailed = e.payload  # type: ignore[assignment]
    cur = _open_step(s, p.step_id, refuse)
    _refuse_if_in_doubt(s, p.step_id, "failed", refuse)
    cur.status = "failed"


def _effect_intended(s: RunState, e: Event, refuse: Refuse) -> None:
    p: EffectIntended = e.payload  # type: ignore[assignment]
    step = _open_step(s, p.step_id, refuse)
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


def _effect_observed(s: RunState, e: Event, refuse: Refuse) -> None:
    p: EffectObserved = e.payload  # type: ignore[assignment]
    cur = s.effects.get(p.key)
    if cur is None or cur.status != "intended":
        status = cur.status if cur else "never intended"
        raise refuse(f"effect {p.key!r} cannot be observed: it is {status}")
    cur.status = "observed"
    s.effects_applied += 1


def _effect_reconciled(s: RunState, e: Event, refuse: Refuse) -> None:
    p: EffectReconciled = e.payload  # type: ignore[assignment]
    cur = s.effects.get(p.key)
    if cur is None or cur.status not in ("intended", "unknown"):
        status = cur.status if cur else "never intended"
        raise refuse(f"effect {p.key!r} is not in doubt (it is {status})")
    if p.by == "engine" and cur.status == "unknown":
        raise refuse(f"effect {p.key!r} was found unknown; only a person can settle it now")
    cur.status = p.verdict.value
    cur.reason = p.reason
    if p.verdict is Verdict.APPLIED:
        s.effects_applied += 1


def _effect_failed(s: RunState, e: Event, refuse: Refuse) -> None:
    p: EffectFailed = e.payload  # type: ignore[assignment]
    cur = s.effects.get(p.key)
    # Only an intended effect fails (the call raised and nothing happened). An absent one is
    # performed again or left alone; allowing absent -> failed also made the rule depend on
    # whether a user checkpoint had pruned the absent effect in between.
    if cur is None or cur.status != "intended":
        status = cur.status if cur else "never intended"
        raise refuse(f"effect {p.key!r} cannot fail: it is {status}, not intended")
    cur.status = "failed"
    cur.reason = p.error


def _artifact_created(s: RunState, e: Event, refuse: Refuse) -> None:
    p: ArtifactCreated = e.payload  # type: ignore[assignment]
    prev = s.artifacts.get(p.name)
    want = (prev.version + 1) if prev else 1
    if p.version != want:
        raise refuse(f"artifact {p.name!r} version must be {want}")
    if not _SHA256_RE.fullmatch(p.sha256):
        raise refuse("artifact sha256 must be 64 lowercase hex digits")
    s.artifacts[p.name] = ArtifactRef(**p.model_dump())


def _approval_requested(s: RunState, e: Event, refuse: Refuse) -> None:
    p: ApprovalRequested = e.payload  # type: ignore[assignment]
    if p.approval_id in s.approvals:
        raise refuse(f"approval {p.approval_id!r} already requested")
    if not p.hashes:
        raise refuse("an approval must bind at least one content hash")
    s.approvals[p.approval_id] = ApprovalInfo(
        name=p.name, hashes=list(p.hashes), status="requested"
    )


def _approval_decided(s: RunState, e: Event, refuse: Refuse) -> None:
    p: ApprovalDecided = e.payload  # type: ignore[assignment]
    cur = s.approvals.get(p.approval_id)
    if cur is None:
        raise refuse(f"approval {p.approval_id!r} was never requested")
    if cur.status != "requested":
        raise refuse(f"approval {p.approval_id!r} is already {cur.status}")
    if sorted(p.hashes) != sorted(cur.hashes):
        raise refuse(f"decision on approval {p.approval_id!r} names different content hashes")
    cur.status = "approved" if p.decision == "approve" else "denied"
    cur.approver, cur.signature = p.approver, p.signature
    cur.decided_at_ms, cur.comment = p.decided_at_ms, p.comment


def _approval_revoked(s: RunState, e: Event, refuse: Refuse) -> None:
    p: ApprovalRevoked = e.payload  # type: ignore[assignment]
    cur = s.approvals.get(p.approval_id)
    if cur is None or cur.status != "approved":
        raise refuse(
            f"approval {p.approval_id!r} cannot be revoked: it is "
            f"{cur.status if cur else 'unknown'} (only an approved, unconsumed approval can)"
        )
    cur.status = "revoked"


def _approval_consumed(s: RunState, e: Event, refuse: Refuse) -> None:
    p: ApprovalConsumed = e.payload  # type: ignore[assignment]
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


def _wait_started(s: RunState, e: Event, refuse: Refuse) -> None:
    p: WaitStarted = e.payload  # type: ignore[assignment]
    if s.wait is not None:
        raise refuse(f"run already waits on {s.wait.kind} {s.wait.name!r}")
    if p.kind == "timer" and p.deadline_ms is None:
        raise refuse("a timer wait needs a deadline")
    s.wait = WaitInfo(
        wait_id=p.wait_id,
        kind=p.kind,
        name=p.name,
        deadline_ms=p.deadline_ms,
        reason=p.reason,
        started_seq=e.seq,
    )
    s.status = RunStatus.WAITING


def _signal_received(s: RunState, e: Event, refuse: Refuse) -> None:
    p: SignalReceived = e.payload  # type: ignore[assignment]
    pending = s.signals.setdefault(p.name, [])
    if any(x.signal_id == p.signal_id for x in pending):
        raise refuse(f"signal {p.signal_id!r} already received")
    pending.append(PendingSignal(signal_id=p.signal_id, payload=p.payload))


def _wait_completed(s: RunState, e: Event, refuse: Refuse) -> None:
    p: WaitCompleted = e.payload  # type: ignore[assignment]
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
    if p.via == "signal":
        pending = s.signals.get(s.wait.name, [])
        idx = next((i for i, x in enumerate(pending) if x.signal_id == p.signal_id), None)
        if idx is None:
            raise refuse(f"signal {p.signal_id!r} for {s.wait.name!r} was not received")
        pending.pop(idx)
        if not pending:
            s.signals.pop(s.wait.name, None)
    if p.via == "decision":
        appr = s.approvals.get(s.wait.name)
        if appr is None or appr.status == "requested":
            raise refuse(f"approval {s.wait.name!r} has no decision yet")
    s.wait = None
    s.status = RunStatus.RUNNING


def _checkpoint_saved(s: RunState, e: Event, refuse: Refuse) -> None:
    p: CheckpointSaved = e.payload  # type: ignore[assignment]
    s.user_state = p.state
    s.user_checkpoint_seq = e.seq
    s.counters = dict(p.counters)
    # Steps need no pruning: a completed one left the state when it completed, and a failed
    # one stays, so that replay raises its recorded failure instead of running it again (G1).
    # Effects are kept unless they certainly did not happen (absent, failed): the checkpoint
    # must answer "what effects may have occurred", and an observed key must stay known so it
    # is never performed again (G2).
    s.effects = {k: v for k, v in s.effects.items() if v.status not in ("absent", "failed")}
    s.pruned_seq = e.seq


def _verification_recorded(s: RunState, e: Event, refuse: Refuse) -> None:
    p: VerificationRecorded = e.payload  # type: ignore[assignment]
    s.verifications[p.name] = p


def _warning_recorded(s: RunState, e: Event, refuse: Refuse) -> None:
    p: WarningRecorded = e.payload  # type: ignore[assignment]
    s.warnings.append(p.message)


def _cancel_requested(s: RunState, e: Event, refuse: Refuse) -> None:
    p: CancelRequested = e.payload  # type: ignore[assignment]
    s.cancel_requested = True
    s.cancel_reason = f"cancelled by {p.by}" + (f": {p.reason}" if p.reason else "")


def _run_finished(s: RunState, e: Event, refuse: Refuse) -> None:
    p: RunFinished = e.payload  # type: ignore[assignment]
    doubt = s.effects_in_doubt()
    if doubt and p.outcome is not Outcome.UNRESOLVED:
        # Whatever else happened, an effect that may have happened makes the run unresolved
        # (G2): it is neither failed nor stopped, cancelled or blocked "before any effect".
        raise refuse(f"effects {doubt} are in doubt: the only honest outcome is unresolved")
    if p.outcome in (Outcome.SUCCEEDED, Outcome.SUCCEEDED_WITH_WARNINGS):
        missing = [c for c in s.criteria if c not in s.verifications]
        failing = [c for c in s.criteria if c in s.verifications and not s.verifications[c].passed]
        if missing or failing:
            raise refuse(
                "success needs a passing verification of every criterion "
                f"(missing {missing}, failing {failing})"
            )
        if p.outcome is Outcome.SUCCEEDED and s.warnings:
            raise refuse("run recorded warnings: the outcome is succeeded_with_warnings")
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


def _run_reopened(s: RunState, e: Event, refuse: Refuse) -> None:
    if s.status is not RunStatus.FINISHED or s.outcome not in REOPENABLE:
        raise refuse(f"only an unresolved or blocked run can be reopened (it is {s.outcome})")
    s.status = RunStatus.PENDING
    s.outcome = None
    s.outcome_reason = ""


def _plan_recorded(s: RunState, e: Event, refuse: Refuse) -> None:
    p: PlanRecorded = e.payload  # type: ignore[assignment]
    if p.version != s.plan_version + 1:
        raise refuse(f"plan version must be {s.plan_version + 1}, not {p.version}")
    seen: set[str] = set()
    for st in p.steps:
        if st.call_id in seen:
            raise refuse(f"plan v{p.version} lists step {st.call_id!r} twice")
        cur = s.plan.get(st.call_id)
        if (
            cur is not None
            and cur.status == "succeeded"
            and (cur.tool, cur.args_hash) != (st.tool, st.args_hash)
        ):
            raise refuse(
                f"step {st.call_id!r} succeeded under plan v{cur.version}; a revised plan "
                "cannot change it (finished steps stay finished)"
            )
        for dep in st.depends_on:
            done = s.plan.get(dep)
            if dep not in seen and (done is None or done.status != "succeeded"):
                raise refuse(
                    f"step {st.call_id!r} depends on {dep!r}, which is neither an earlier step "
                    f"of plan v{p.version} nor a succeeded one"
                )
        seen.add(st.call_id)
    for info in s.plan.values():  # what the new version does not keep is superseded
        if info.status == "pending":
            info.status = "superseded"
    for st in p.steps:
        cur = s.plan.get(st.call_id)
        if cur is not None and cur.status == "succeeded":
            cur.version = p.version
            continue
        s.plan[st.call_id] = PlanStepInfo(
            tool=st.tool,
            args_hash=st.args_hash,
            depends_on=list(st.depends_on),
            status="pending",
            version=p.version,
        )
    s.plan_version = p.version


def _tool_call_settled(s: RunState, e: Event, refuse: Refuse) -> None:
    p: ToolCallSettled = e.payload  # type: ignore[assignment]
    cur = s.plan.get(p.call_id)
    if cur is None:
        raise refuse(f"tool call {p.call_id!r} is in no plan")
    if cur.status != "pending":
        raise refuse(f"tool call {p.call_id!r} is {cur.status}, not pending")
    if p.outcome == "succeeded":
        unmet = [d for d in cur.depends_on if s.plan[d].status != "succeeded"]
        if unmet:
            raise refuse(f"tool call {p.call_id!r} succeeded before its dependencies {unmet}")
    if p.outcome in ("succeeded", "failed"):
        if p.executed_by is None:
            raise refuse(f"tool call {p.call_id!r} {p.outcome} without naming the step that ran")
        s.usage.tool_calls += 1
    cur.status = p.outcome


def _model_called(s: RunState, e: Event, refuse: Refuse) -> None:
    p: ModelCalled = e.payload  # type: ignore[assignment]
    step = _open_step(s, p.step_id, refuse)
    if step.policy is not Policy.READ:
        raise refuse(f"a model call is a read step, not {step.policy}")
    if not _SHA256_RE.fullmatch(p.prompt_hash):
        raise refuse("prompt_hash must be 64 lowercase hex digits")
    u = s.usage
    u.model_calls += 1
    u.input_tokens += p.input_tokens
    u.output_tokens += p.output_tokens
    if p.cost_usd is None:
        u.cost_unknown += 1
    else:
        u.cost_usd += p.cost_usd


def _budget_set(s: RunState, e: Event, refuse: Refuse) -> None:
    p: BudgetSet = e.payload  # type: ignore[assignment]
    limits = {k: getattr(p, k) for k in Budget.model_fields if getattr(p, k) is not None}
    if not limits:
        raise refuse("a budget_set names no limit")
    for k, v in limits.items():
        setattr(s.budget, k, v)


_HANDLERS: dict[str, Any] = {
    "run_started": _run_started,
    "lease_acquired": _lease_acquired,
    "version_accepted": _version_accepted,
    "step_started": _step_started,
    "step_completed": _step_completed,
    "step_failed": _step_failed,
    "effect_intended": _effect_intended,
    "effect_observed": _effect_observed,
    "effect_reconciled": _effect_reconciled,
    "effect_failed": _effect_failed,
    "artifact_created": _artifact_created,
    "approval_requested": _approval_requested,
    "approval_decided": _approval_decided,
    "approval_revoked": _approval_revoked,
    "approval_consumed": _approval_consumed,
    "wait_started": _wait_started,
    "signal_received": _signal_received,
    "wait_completed": _wait_completed,
    "checkpoint_saved": _checkpoint_saved,
    "verification_recorded": _verification_recorded,
    "warning_recorded": _warning_recorded,
    "cancel_requested": _cancel_requested,
    "run_finished": _run_finished,
    "run_reopened": _run_reopened,
    "plan_recorded": _plan_recorded,
    "tool_call_settled": _tool_call_settled,
    "model_called": _model_called,
    "budget_set": _budget_set,
}
assert set(_HANDLERS) == set(EVENT_TYPES)


def _utc(ms: int) -> str:
    """Epoch milliseconds as an ISO 8601 UTC time (``2026-11-30T14:05:00.000Z``)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def checkpoint_answers(s: RunState) -> dict[str, Any]:
    """The four questions a checkpoint answers (DESIGN.md §1), derived from the state.

    Returns a dict with keys ``establishing``, ``evidence``, ``effects``, ``next``.
    """
    establishing = f"{s.last_step}: {s.last_purpose}" if s.last_purpose else (s.last_step or s.goal)
    evidence = {
        "verifications": {k: {"passed": v.passed} for k, v in s.verifications.items()},
        "artifacts": {k: f"sha256:{v.sha256} v{v.version}" for k, v in s.artifacts.items()},
    }
    effects = {k: v.status for k, v in s.effects.items() if v.status not in ("absent", "failed")}
    if s.status is RunStatus.FINISHED:
        nxt = f"finished: {s.outcome}" + (f" ({s.outcome_reason})" if s.outcome_reason else "")
    elif s.wait is not None:
        nxt = f"waiting for {s.wait.kind} {s.wait.name!r}"
        if s.wait.deadline_ms is not None:
            nxt += f" (deadline {_utc(s.wait.deadline_ms)})"
    elif s.effects_in_doubt():
        nxt = f"reconcile effects in doubt: {', '.join(s.effects_in_doubt())}"
    else:
        nxt = "runnable: the next step may start"
    return {"establishing": establishing, "evidence": evidence, "effects": effects, "next": nxt}
