"""Event payloads: what a run's append-only history is made of (DESIGN.md §1, event).

Pure data, no I/O. Each event type is a frozen pydantic model (:class:`Payload`) named in
:data:`EVENT_TYPES`; an :class:`Event` is one history entry: ``(run_id, seq, type, payload,
at_ms, epoch)``. The rules that say which event may follow which live in :mod:`.fold`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .kinds import (
    EVENT_SCHEMA_VERSION,
    REOPENABLE,
    SHA256_RE,
    Outcome,
    Policy,
    RunStatus,
    Verdict,
)

# --------------------------------------------------------------------------- payloads


class Payload(BaseModel):
    """Base of every event payload: frozen, and strict about fields (an unknown field in a
    stored row is a corrupt record, not something to drop silently)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class RunStarted(Payload):
    workflow: str
    version: str
    input: Any = None
    criteria: list[str] = Field(default_factory=list)
    goal: str = ""
    #: The module that defines the workflow, imported on resume if the name is not registered.
    module: str = ""
    #: The run whose step started this one (a child run, :mod:`torpor.engine.children`).
    parent: str | None = None


class LeaseAcquired(Payload):
    owner: str
    epoch: int


class VersionAccepted(Payload):
    from_version: str
    to_version: str


class StepStarted(Payload):
    step_id: str
    policy: Policy
    attempt: int = 1
    input_hash: str | None = None
    purpose: str = ""


class StepCompleted(Payload):
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


class StepFailed(Payload):
    step_id: str
    error: str


class EffectIntended(Payload):
    step_id: str
    key: str
    operation: str
    attempt: int = 1
    approval_id: str | None = None
    #: In a fork with ``redo_effects`` (issue 45): the origin's key this effect performs again.
    redoes: str | None = None


class EffectObserved(Payload):
    key: str
    result: Any = None


class EffectReconciled(Payload):
    key: str
    verdict: Verdict
    result: Any = None
    reason: str = ""
    by: str = "engine"


class EffectFailed(Payload):
    """The effect call raised and reconcile confirmed nothing happened."""

    key: str
    error: str


class ArtifactCreated(Payload):
    name: str
    sha256: str
    version: int
    size: int
    media_type: str = "application/octet-stream"
    step_id: str | None = None


class ApprovalRequested(Payload):
    """A request for a decision on exactly ``hashes``. With ``approvers``, only those people
    may decide, and ``required`` distinct ones of them must approve (N-of-M); any one of them
    denying denies."""

    approval_id: str
    name: str
    hashes: list[str]
    step_id: str | None = None
    summary: str = ""
    approvers: list[str] = Field(default_factory=list)
    required: int = 1
    #: This request's nonce (random, made once when it is recorded): signed decisions name it,
    #: so a decision is valid for one request only ("": requested before issue 34).
    nonce: str = ""
    #: When each stage of its escalation chain is due (epoch ms, increasing; issue 39), and
    #: what each does (``{"action", "approvers", "required"}``): a decision is judged against
    #: the stages due before it arrived, whether or not they were recorded yet.
    escalate_at_ms: list[int] = Field(default_factory=list)
    escalation: list[dict[str, Any]] = Field(default_factory=list)


#: How a decision is authenticated: ``ed25519`` — signed by the approver's own key (or a
#: delegate's) listed in the trusted keyring; ``hmac`` — the local single-user mode's shared
#: key (not attributable; decisions recorded before keys per person are of this kind);
#: ``policy`` — no signature: the ``--auto-approve`` flag of the process executing the run.
DecisionScheme = Literal["ed25519", "hmac", "policy"]


class ApprovalDecided(Payload):
    """A decision, as verified where it was delivered (:mod:`torpor.signing` says what is
    signed). ``key``: the signing key's fingerprint; ``delegate``: the delegate key that signed
    for ``approver``; ``given_by``: for a policy decision, ``user@host`` of the process whose
    flag approved."""

    approval_id: str
    decision: Literal["approve", "deny", "respond"]
    approver: str
    hashes: list[str]
    signature: str
    comment: str = ""
    decided_at_ms: int = 0
    scheme: DecisionScheme = "hmac"
    key: str = ""
    delegate: str = ""
    given_by: str = ""
    #: The store's identity and the request's nonce the decision was signed for (version 2 of
    #: the signed bytes, :mod:`torpor.signing`); "" in a decision signed before.
    store: str = ""
    request: str = ""

    #: When the decision arrived in the run's inbox (the store's clock at posting, epoch ms;
    #: None: recorded by the lease holder itself, or by a torpor before event schema 3). A
    #: decision that arrived at or after the approval wait's deadline does not satisfy it.
    arrived_at_ms: int | None = None
    #: Approve with edit (issue 39): ``edited`` is the sha256 of ``edited_content`` (UTF-8) that
    #: the signature binds (version 3 of the signed bytes); ``respond``: ``comment`` is the reply.
    edited: str = ""
    edited_content: str = ""


class ApprovalRefused(Payload):
    """A decision that failed verification: delivered (never applied), or — ``withdrawn`` —
    recorded earlier and refused when checked again (its key was removed from the keyring,
    or it was written into the history without a valid signature); a withdrawn decision no
    longer counts. ``approver``/``decision`` are as claimed; ``reason`` says why."""

    approval_id: str
    approver: str
    reason: str
    decision: str = ""
    delegate: str = ""
    withdrawn: bool = False


class ApprovalRevoked(Payload):
    approval_id: str
    by: str
    reason: str = ""


class ApprovalConsumed(Payload):
    approval_id: str
    step_id: str
    hashes: list[str]


class WaitStarted(Payload):
    """A wait begins. For ``kind`` ``children``: ``children`` are the child run ids waited on
    and ``need`` how many of them must reach a final outcome (all, 1 for the first, n)."""

    wait_id: str
    kind: Literal["signal", "timer", "approval", "resolution", "children"]
    name: str
    deadline_ms: int | None = None
    reason: str = ""
    children: list[str] = Field(default_factory=list)
    need: int = 0


class SignalReceived(Payload):
    """A signal moved from the inbox into the history: buffered until a wait takes it.

    ``arrived_at_ms``: when it arrived (the store's clock at posting, epoch ms; None before
    event schema 3): a wait takes only a signal that arrived before its deadline. ``wait_id``:
    the wait instance it answers (``torpor signal --wait-id``); None for a signal by name,
    which any wait of that name may take.
    """

    signal_id: str
    name: str
    payload: Any = None
    arrived_at_ms: int | None = None
    wait_id: str | None = None


class WaitCompleted(Payload):
    wait_id: str
    via: Literal["signal", "timer", "decision", "deadline", "children"]
    signal_id: str | None = None
    payload: Any = None


class ChildEnded(Payload):
    """A child run reached an outcome (its ``run_finished``), as the store told its parent in
    the same transaction (an inbox message of kind ``child``): the message's disposition.
    ``seq``: the child's ``run_finished`` seq (a reopened child that ends again tells again)."""

    child_run_id: str
    outcome: Outcome
    seq: int
    message_id: str = ""
    arrived_at_ms: int | None = None


class CheckpointSaved(Payload):
    """A user checkpoint: ``run.checkpoint(state)``; resume restarts from it."""

    state: Any = None
    counters: dict[str, int] = Field(default_factory=dict)


class VerificationRecorded(Payload):
    name: str
    passed: bool
    detail: Any = None


class WarningRecorded(Payload):
    message: str
    step_id: str | None = None


class MessageRefused(Payload):
    """A message the run received that had no effect, and why (G11): a signal addressed to a
    wait that is unknown, already answered or past its deadline; a message that reached a run
    after its outcome; a buffered signal no wait took before the run ended. ``kind`` is the
    inbox kind (``signal``, ``decision``, ``cancel`` …); ``name`` the signal's name and
    ``wait_id`` the wait it was addressed to or arrived late for, when there is one;
    ``arrived_at_ms`` when it arrived (epoch ms). A refused signal that was buffered leaves the
    buffer."""

    message_id: str
    kind: str
    reason: str
    name: str | None = None
    wait_id: str | None = None
    arrived_at_ms: int | None = None


class CancelRequested(Payload):
    by: str = "user"
    reason: str = ""


class RunFinished(Payload):
    outcome: Outcome
    reason: str = ""
    result: Any = None


class RunReopened(Payload):
    """A person reopens a blocked or unresolved run. ``step``: the step whose crashed attempts
    are forgiven (``torpor retry RUN --step X`` after a fix); ``retry`` without a step forgives
    every open step's."""

    by: str
    reason: str = ""
    step: str | None = None
    retry: bool = False


class AttentionNeeded(Payload):
    """A run that is not finished cannot proceed on the code or workers running, and why: a
    version no worker can continue, a replay that diverged, … Recorded once by whoever found it
    (``by``: a lease owner); cleared when the run proceeds (its next step, wait or outcome)."""

    detail: str
    by: str = ""


# --- agents (issue 4): plans, tool-call outcomes, model calls, budgets


class PlannedStep(Payload):
    """One step of a plan: a call of ``tool`` with ``args`` (secrets redacted) after
    ``depends_on`` succeeded. ``args_hash`` is the hash of the exact validated arguments."""

    call_id: str = Field(min_length=1)
    tool: str = Field(min_length=1)
    args: Any = None
    args_hash: str = ""
    depends_on: list[str] = Field(default_factory=list)
    why: str = ""


class PlanRecorded(Payload):
    """Plan version ``version`` (1, 2, …): replaces every step not yet settled; steps that
    succeeded under an earlier version stay succeeded and may not be changed."""

    version: int
    planner: str
    steps: list[PlannedStep] = Field(default_factory=list)
    reason: str = ""


#: How a planned tool call ended. ``succeeded``/``failed``: the tool ran; ``invalid``: its
#: arguments were refused before anything ran; ``denied``: a person refused it; ``skipped``:
#: never run (the run ended first).
ToolOutcome = Literal["succeeded", "failed", "invalid", "denied", "responded", "skipped"]


class ToolCallSettled(Payload):
    """The recorded outcome of a planned tool call (never a dangling call)."""

    call_id: str
    outcome: ToolOutcome
    observation: Any = None
    #: The torpor step that executed it, if it ran.
    executed_by: str | None = None


class ModelCalled(Payload):
    """A model call that returned, inside its (read) step: what the budget counts."""

    step_id: str
    model: str
    prompt_hash: str
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cost_usd: float | None = Field(default=None, ge=0)


class BudgetSet(Payload):
    """Limits for the run (``None`` leaves a limit as it is): set by the agent at its start,
    raised (or lowered) by a person."""

    tokens: int | None = Field(default=None, gt=0)
    cost_usd: float | None = Field(default=None, gt=0)
    steps: int | None = Field(default=None, gt=0)
    wall_clock_s: float | None = Field(default=None, gt=0)
    by: str = "agent"
    reason: str = ""


# --- an agent's working memory (issue 17): compaction and what each model call was sent


class ContextCompacted(Payload):
    """The oldest units of an agent's working buffer folded into its running summary: one
    atomic transition (the new summary and the units it replaced are recorded together, or
    nothing is). The raw events of those turns stay in the history; ``refs`` point back to them
    (step ids). ``summarizer``: ``extractive`` or the model id; ``summary_step``: the recorded
    model call that wrote the summary, when a model did."""

    step_id: str
    number: int = Field(ge=1)
    turns: list[int] = Field(default_factory=list)
    call_ids: list[str] = Field(default_factory=list)
    refs: list[str] = Field(default_factory=list)
    summarizer: str = "extractive"
    summary_step: str | None = None
    summary_hash: str
    summary_tokens: int = Field(ge=0)
    buffer_tokens_before: int = Field(ge=0)
    buffer_tokens_after: int = Field(ge=0)
    #: The fact-ledger records this compaction wrote (issue 30; JSON data, see
    #: :class:`torpor.memory.ledger.LedgerRecord`): the store keeps them as rows written in the
    #: transaction that appends this event.
    ledger: list[dict[str, Any]] = Field(default_factory=list)


class ContextBuilt(Payload):
    """The context a model call was sent, recorded in that call's step: the sha256 of the
    messages, the token count of each section (estimated, see :mod:`torpor.memory.tokens`),
    the total and the budget it was built within; ``cut``: sections shortened or left out."""

    step_id: str
    context_hash: str
    sections: dict[str, int] = Field(default_factory=dict)
    total_tokens: int = Field(ge=0)
    budget_tokens: int = Field(ge=0)
    cut: list[str] = Field(default_factory=list)


EVENT_TYPES: dict[str, type[Payload]] = {
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
    "approval_refused": ApprovalRefused,
    "approval_revoked": ApprovalRevoked,
    "approval_consumed": ApprovalConsumed,
    "wait_started": WaitStarted,
    "signal_received": SignalReceived,
    "wait_completed": WaitCompleted,
    "checkpoint_saved": CheckpointSaved,
    "child_ended": ChildEnded,
    "verification_recorded": VerificationRecorded,
    "warning_recorded": WarningRecorded,
    "cancel_requested": CancelRequested,
    "message_refused": MessageRefused,
    "run_finished": RunFinished,
    "run_reopened": RunReopened,
    "attention_needed": AttentionNeeded,
    "plan_recorded": PlanRecorded,
    "tool_call_settled": ToolCallSettled,
    "model_called": ModelCalled,
    "budget_set": BudgetSet,
    "context_compacted": ContextCompacted,
    "context_built": ContextBuilt,
}
_TYPE_OF: dict[type[Payload], str] = {v: k for k, v in EVENT_TYPES.items()}


def register(name: str, payload: type[Payload]) -> None:
    """Add event type ``name`` defined in another module of this package (a family of events
    kept apart: :mod:`.fork_events`), imported with the rest (:func:`torpor.history._load`)."""
    EVENT_TYPES[name] = payload
    _TYPE_OF[payload] = name


def type_of(payload: Payload) -> str:
    """The event type name of a payload instance."""
    return _TYPE_OF[type(payload)]


class Event(BaseModel):
    """One history entry. ``seq`` is dense per run starting at 1; ``at_ms`` is epoch ms."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    seq: int
    type: str
    payload: Payload
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
    p = event.payload
    return p.__class__ is StepStarted or (p.__class__ is StepCompleted and p.attempt > 0)


__all__ = [
    "EVENT_SCHEMA_VERSION",
    "EVENT_TYPES",
    "REOPENABLE",
    "SHA256_RE",
    "ApprovalConsumed",
    "ApprovalDecided",
    "ApprovalRefused",
    "ApprovalRequested",
    "ApprovalRevoked",
    "ArtifactCreated",
    "AttentionNeeded",
    "BudgetSet",
    "CancelRequested",
    "CheckpointSaved",
    "ChildEnded",
    "ContextBuilt",
    "ContextCompacted",
    "DecisionScheme",
    "EffectFailed",
    "EffectIntended",
    "EffectObserved",
    "EffectReconciled",
    "Event",
    "LeaseAcquired",
    "MessageRefused",
    "ModelCalled",
    "Outcome",
    "Payload",
    "PlanRecorded",
    "PlannedStep",
    "Policy",
    "RunFinished",
    "RunReopened",
    "RunStarted",
    "RunStatus",
    "SignalReceived",
    "StepCompleted",
    "StepFailed",
    "StepStarted",
    "ToolCallSettled",
    "Verdict",
    "VerificationRecorded",
    "VersionAccepted",
    "WaitCompleted",
    "WaitStarted",
    "WarningRecorded",
    "register",
    "starts_step",
    "type_of",
]
