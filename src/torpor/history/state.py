"""The run state: what folding a run's events yields (:func:`torpor.history.fold`).

The state is deliberately *compact* so that a checkpoint stays small however long the run has
been going (guarantee G8): ``RunState.steps`` holds only open and failed steps — a completed
step leaves it at once (its result stays in the event history, read back by an indexed lookup,
and the store refuses to start it again); failed steps stay (replay raises their failure).
``RunState.effects`` holds the effects still in doubt (intended, unknown) and those that
certainly did not happen (absent, failed: a retry's attempt number follows them; they are
dropped at every user checkpoint); a performed effect (observed, or reconciled applied) leaves
it at once and is counted in ``effects_applied`` — its key stays in the store's effect index,
which refuses to perform it again (G2). Per-name maps (artifacts, verifications) keep the latest
entry only.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .events import Outcome, Policy, RunStatus, VerificationRecorded
from .fork_events import ForkedEffect


class StepInfo(BaseModel):
    status: Literal["started", "completed", "failed"]
    policy: Policy
    attempt: int
    input_hash: str | None = None
    purpose: str = ""
    #: When its latest attempt started (epoch ms): "last seen" of a step that crashes.
    started_at_ms: int = 0


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


class DecisionInfo(BaseModel):
    """One counted decision on an approval, as recorded (see
    :class:`~torpor.history.events.ApprovalDecided`); checked again before it is relied on."""

    approver: str
    decision: Literal["approve", "deny", "respond"]
    scheme: str = "hmac"
    signature: str = ""
    key: str = ""
    delegate: str = ""
    given_by: str = ""
    decided_at_ms: int = 0
    comment: str = ""
    #: The store identity and request nonce it was signed for ("": signed before).
    store: str = ""
    request: str = ""
    #: When it arrived in the run's inbox (epoch ms; None: recorded by the lease holder, or
    #: before event schema 3).
    arrived_at_ms: int | None = None
    #: Approve with edit (issue 39): the sha256 of the edited content the signature binds, and
    #: that content (UTF-8 text) as delivered; "" for a decision on the content as proposed.
    edited: str = ""
    edited_content: str = ""


class ApprovalInfo(BaseModel):
    name: str
    hashes: list[str]
    status: Literal["requested", "approved", "denied", "revoked", "consumed"]
    #: Who decided (for N-of-M: the approvers, comma-separated), the latest decision's
    #: signature, time and comment (``decisions`` has each one).
    approver: str | None = None
    signature: str | None = None
    decided_at_ms: int = 0
    comment: str = ""
    #: The step that consumed the approval: only that step's effects may cite it (G6).
    consumed_by: str | None = None
    #: The people who may decide (empty: anyone with a key in the keyring) and how many
    #: distinct ones of them must approve.
    approvers: list[str] = Field(default_factory=list)
    required: int = 1
    #: The decisions that count (a refused one never enters; a withdrawn one leaves).
    decisions: list[DecisionInfo] = Field(default_factory=list)
    #: Decisions refused so far, and the latest refusals (``approver: reason``; at most 5).
    refused: int = 0
    refusals: list[str] = Field(default_factory=list)
    #: When the decision that settled it arrived (for N-of-M, the one that made N; epoch ms;
    #: None: recorded by the lease holder or unknown). One that arrived at or after the
    #: approval wait's deadline does not satisfy it.
    arrived_at_ms: int | None = None
    #: The decision step that waits for it (None: folded before this was kept). Once that
    #: step has ended — decided, or timed out — the approval takes no decision any more.
    step_id: str | None = None
    #: The request's nonce (``approval_requested.nonce``), which signed decisions name ("": a
    #: request made before issue 34).
    nonce: str = ""
    #: When each stage of its escalation chain is due (epoch ms), and how many stages were
    #: recorded so far (``wait_escalated``, issue 39).
    escalate_at_ms: list[int] = Field(default_factory=list)
    escalation: list[dict[str, Any]] = Field(default_factory=list)
    escalations: int = 0

    def counted(self) -> list[DecisionInfo]:
        """The decisions that count: ``decisions``, or, in a state folded before decisions
        were kept one by one, the single recorded one (an HMAC decision)."""
        if self.decisions or self.approver is None or self.status == "requested":
            return list(self.decisions)
        return [
            DecisionInfo(
                approver=self.approver,
                decision="deny" if self.status == "denied" else "approve",
                scheme="hmac",
                signature=self.signature or "",
                decided_at_ms=self.decided_at_ms,
                comment=self.comment,
            )
        ]


class WaitInfo(BaseModel):
    wait_id: str
    kind: str
    name: str
    deadline_ms: int | None = None
    reason: str = ""
    #: A wait on child runs: the children waited on, and how many must reach a final outcome.
    children: list[str] = Field(default_factory=list)
    need: int = 0


class PendingSignal(BaseModel):
    """A signal received and buffered until a wait takes it. ``arrived_at_ms``: when it
    arrived (epoch ms; None for one recorded before event schema 3, taken as in time);
    ``wait_id``: the one wait it answers (None: any wait of its name); ``late_for``: the wait
    of its name that was open when it arrived after that wait's deadline."""

    signal_id: str
    payload: Any = None
    arrived_at_ms: int | None = None
    wait_id: str | None = None
    late_for: str | None = None

    def answers(self, wait: WaitInfo) -> bool:
        """Whether this signal may complete ``wait`` (a signal wait of its name): addressed to
        it or to none, and arrived before its deadline (decided by arrival, not by when a
        process looked)."""
        if self.wait_id is not None and self.wait_id != wait.wait_id:
            return False
        if wait.deadline_ms is None or self.arrived_at_ms is None:
            return True
        return self.arrived_at_ms < wait.deadline_ms


class SteerInfo(BaseModel):
    """An operator's steering message (``steer_received``, issue 39), ``pending`` until the
    agent takes it at its next boundary (``steer_taken`` names it: seen once), or ``refused``
    (no boundary took it before the run ended)."""

    message_id: str
    text: str
    by: str = ""
    interrupt: bool = False
    arrived_at_ms: int | None = None
    status: Literal["pending", "taken", "refused"] = "pending"
    #: The step that took it (the boundary before a model call).
    taken_by: str | None = None


class PlanStepInfo(BaseModel):
    """A step of the current plan (or one settled under an earlier version)."""

    tool: str
    args_hash: str = ""
    depends_on: list[str] = Field(default_factory=list)
    status: Literal[
        "pending", "succeeded", "failed", "invalid", "denied", "responded", "skipped", "superseded"
    ]
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


class ForkInfo(BaseModel):
    """Where a fork came from (:class:`~.events.RunForked`, issue 45): the origin run and the
    seq its history was copied to, the seq of the ``run_forked`` event, whether it redoes the
    origin's effects, and those effects (the origin's after the fork point, by operation
    identity: what the fork refuses to perform again without ``redo_effects``)."""

    origin: str
    at_seq: int
    seq: int
    redo_effects: bool = False
    performed: list[ForkedEffect] = Field(default_factory=list)

    def repeats(
        self, step_id: str, operation: str, key: str | None, identity: str = ""
    ) -> ForkedEffect | None:
        """The origin's effect that an effect of step ``step_id`` performing ``operation``
        (asked under the explicit idempotency ``key``, None for the default one; ``identity``:
        a planned tool call's, see :func:`call_identity`) would perform again: the same
        operation, and — when both are planned tool calls — the same arguments (whatever the
        call ids), else the same step or the same explicit key."""

        def same(x: ForkedEffect) -> bool:
            if x.operation != operation:
                return False
            if identity and x.identity:
                return x.identity == identity
            return x.step_id == step_id or x.key == key

        return next((x for x in self.performed if same(x)), None)


def call_identity(plan: dict[str, PlanStepInfo], step_id: str, operation: str) -> str:
    """The operation identity of the planned tool call that step ``step_id`` executes
    (``tool:<call id>@v<version>``, :mod:`torpor.agents.calls`): ``<tool>:<args hash>`` when
    ``plan`` lists that call with the tool ``operation`` and a hash of its arguments; else ""."""
    if not step_id.startswith("tool:"):
        return ""
    call = plan.get(step_id[5:].rpartition("@v")[0])
    if call is None or call.tool != operation or not call.args_hash:
        return ""
    return f"{operation}:{call.args_hash}"


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
    #: An agent's working memory: how many compactions were recorded, and the estimated
    #: tokens of the context its latest model call was sent (``context_built``).
    context_compactions: int = 0
    context_tokens: int = 0
    usage: Usage = Field(default_factory=Usage)
    budget: Budget = Field(default_factory=Budget)
    #: Why the run cannot proceed (:class:`~.events.AttentionNeeded`), until it proceeds.
    attention: str = ""
    #: The latest outcome each child run reported (:class:`~.events.ChildEnded`), by child
    #: run id: a child that never reported is not here.
    children: dict[str, Outcome] = Field(default_factory=dict)
    #: Crashed attempts forgiven per step id by ``torpor retry`` (the crash limit counts the
    #: attempts after them).
    forgiven: dict[str, int] = Field(default_factory=dict)
    #: Operators' steering messages, in arrival order (issue 39; :class:`SteerInfo`).
    steering: list[SteerInfo] = Field(default_factory=list)
    #: Set in a fork (issue 45): its origin, fork point and the origin's effects after it.
    fork: ForkInfo | None = None

    def unmet_criteria(self) -> tuple[list[str], list[str]]:
        """Completion criteria not yet met (G5): ``(never verified, failing)``."""
        missing = [c for c in self.criteria if c not in self.verifications]
        failing = [c for c in self.criteria if c in self.verifications]
        return missing, [c for c in failing if not self.verifications[c].passed]

    def answer(self) -> PendingSignal | None:
        """The buffered signal the open signal wait takes (the earliest that
        :meth:`PendingSignal.answers` it), or None."""
        w = self.wait
        if w is None or w.kind != "signal":
            return None
        return next((s for s in self.signals.get(w.name, ()) if s.answers(w)), None)

    def open_approvals(self) -> dict[str, ApprovalInfo]:
        """Approvals a person can still decide: requested, and either their decision step has
        not ended or the run waits for them again (a decision was withdrawn before an effect
        relied on it). A request whose wait timed out stays ``requested`` but takes no
        decision."""
        w = self.wait

        def open_(aid: str, v: ApprovalInfo) -> bool:
            if v.step_id is None or (w is not None and w.kind == "approval" and w.name == aid):
                return True
            step = self.steps.get(v.step_id)
            return step is not None and step.status == "started"

        return {k: v for k, v in self.approvals.items() if v.status == "requested" and open_(k, v)}

    def wake_due(self) -> int | None:
        """When the run's wait must be looked at again (epoch ms): its deadline, or sooner the
        next stage of the escalation chain of the approval it waits for; None: only a message
        wakes it."""
        w = self.wait
        if w is None:
            return None
        times = [w.deadline_ms] if w.deadline_ms is not None else []
        a = self.approvals.get(w.name) if w.kind == "approval" else None
        if a is not None and a.status == "requested" and a.escalations < len(a.escalate_at_ms):
            times.append(a.escalate_at_ms[a.escalations])
        return min(times) if times else None

    def effects_in_doubt(self) -> list[str]:
        """Keys of effects that may have happened without a recorded observation."""
        return [k for k, e in self.effects.items() if e.status in ("intended", "unknown")]


__all__ = [
    "ApprovalInfo",
    "ArtifactRef",
    "Budget",
    "DecisionInfo",
    "EffectInfo",
    "ForkInfo",
    "PendingSignal",
    "PlanStepInfo",
    "RunState",
    "SteerInfo",
    "StepInfo",
    "Usage",
    "WaitInfo",
]
