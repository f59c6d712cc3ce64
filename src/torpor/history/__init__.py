"""The pure bottom layer: event payloads, the run state, the fold and the views derived from
them. Nothing here does I/O; every layer above records through these types.

- :mod:`.events` — what a history is made of (payload models, :class:`Event`);
- :mod:`.state` — what folding it yields (:class:`RunState` and its parts);
- :mod:`.fold` — :func:`apply` / :func:`fold` and the transition rules (G4) of runs, steps,
  effects and approvals; :mod:`.waits` — the rules of waits and messages (decided by arrival,
  G11); :mod:`.plans` — the rules of an agent's plans, tool calls, model calls and budgets
  (both registered into the same table); :mod:`.forks` — the rule of a fork's beginning;
- :mod:`.views` — the checkpoint's four answers, step and effect views for people.
"""

import sys
import types
from typing import TYPE_CHECKING, Any

from .kinds import (
    EVENT_SCHEMA_VERSION,
    REOPENABLE,
    SHA256_RE,
    Outcome,
    Policy,
    RunStatus,
    Verdict,
)

if TYPE_CHECKING:
    from .decisions import candidate_refusal
    from .events import (
        EVENT_SCHEMA_VERSION,
        EVENT_TYPES,
        REOPENABLE,
        SHA256_RE,
        ApprovalConsumed,
        ApprovalDecided,
        ApprovalRefused,
        ApprovalRequested,
        ApprovalRevoked,
        ArtifactCreated,
        AttentionNeeded,
        BudgetSet,
        CancelRequested,
        CheckpointSaved,
        ChildEnded,
        ContextBuilt,
        ContextCompacted,
        DecisionScheme,
        EffectFailed,
        EffectIntended,
        EffectObserved,
        EffectReconciled,
        Event,
        LeaseAcquired,
        MessageRefused,
        ModelCalled,
        Outcome,
        Payload,
        PlannedStep,
        PlanRecorded,
        Policy,
        RunFinished,
        RunReopened,
        RunStarted,
        RunStatus,
        SignalReceived,
        StepCompleted,
        StepFailed,
        StepStarted,
        ToolCallSettled,
        Verdict,
        VerificationRecorded,
        VersionAccepted,
        WaitCompleted,
        WaitStarted,
        WarningRecorded,
        starts_step,
        type_of,
    )
    from .fold import RULES as RULES
    from .fold import apply, crashed_attempts, fold
    from .fork_events import ForkedEffect, RunForked
    from .forks import fork_point_problem
    from .plans import plan_problem
    from .state import (
        ApprovalInfo,
        ArtifactRef,
        Budget,
        DecisionInfo,
        EffectInfo,
        ForkInfo,
        PendingSignal,
        PlanStepInfo,
        RunState,
        SteerInfo,
        StepInfo,
        Usage,
        WaitInfo,
    )
    from .steer_events import ReplyRetracted, SteerReceived, SteerTaken, WaitEscalated
    from .views import (
        EffectView,
        MessageView,
        StepView,
        checkpoint_answers,
        effect_views,
        message_views,
        step_views,
        utc_text,
    )


__all__ = [
    "EVENT_SCHEMA_VERSION",
    "EVENT_TYPES",
    "REOPENABLE",
    "SHA256_RE",
    "ApprovalConsumed",
    "ApprovalDecided",
    "ApprovalInfo",
    "ApprovalRefused",
    "ApprovalRequested",
    "ApprovalRevoked",
    "ArtifactCreated",
    "ArtifactRef",
    "AttentionNeeded",
    "Budget",
    "BudgetSet",
    "CancelRequested",
    "CheckpointSaved",
    "ChildEnded",
    "ContextBuilt",
    "ContextCompacted",
    "DecisionInfo",
    "DecisionScheme",
    "EffectFailed",
    "EffectInfo",
    "EffectIntended",
    "EffectObserved",
    "EffectReconciled",
    "EffectView",
    "Event",
    "ForkInfo",
    "ForkedEffect",
    "LeaseAcquired",
    "MessageRefused",
    "MessageView",
    "ModelCalled",
    "Outcome",
    "Payload",
    "PendingSignal",
    "PlanRecorded",
    "PlanStepInfo",
    "PlannedStep",
    "Policy",
    "ReplyRetracted",
    "RunFinished",
    "RunForked",
    "RunReopened",
    "RunStarted",
    "RunState",
    "RunStatus",
    "SignalReceived",
    "SteerInfo",
    "SteerReceived",
    "SteerTaken",
    "StepCompleted",
    "StepFailed",
    "StepInfo",
    "StepStarted",
    "StepView",
    "ToolCallSettled",
    "Usage",
    "Verdict",
    "VerificationRecorded",
    "VersionAccepted",
    "WaitCompleted",
    "WaitEscalated",
    "WaitInfo",
    "WaitStarted",
    "WarningRecorded",
    "apply",
    "candidate_refusal",
    "checkpoint_answers",
    "crashed_attempts",
    "effect_views",
    "fold",
    "fork_point_problem",
    "message_views",
    "plan_problem",
    "starts_step",
    "step_views",
    "type_of",
    "utc_text",
]


_MODULES = (
    "events", "fork_events", "state", "fold", "decisions", "waits", "plans", "forks", "views",
    "steer_events", "steering",
)  # fmt: skip


def _load() -> None:
    """Import the payload models, the state, the fold and its rules, and bind every public
    name here. Deferred to the first use of one of them, so that importing the package for
    its enums (:mod:`.kinds`) does not import pydantic (issue 48)."""
    import importlib

    modules = [importlib.import_module(f"{__name__}.{m}") for m in _MODULES]
    # Every name bound afresh: importing the submodule ``fold`` set the attribute ``fold`` to
    # the module, which the function of that name replaces here (as the eager imports did).
    for name in (*__all__, "RULES"):
        globals()[name] = next(getattr(m, name) for m in modules if hasattr(m, name))
    rules, types = globals()["RULES"], globals()["EVENT_TYPES"]
    assert set(rules) == set(types.values()), "every event type has its rule"


def __getattr__(name: str) -> Any:
    """A name of the package's models or rules, loaded on first use (see :func:`_load`)."""
    if name in __all__ or name == "RULES":
        _load()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """This package's module type. The package's ``fold`` is the function: importing the
    submodule of that name first (``import torpor.history.fold``) would otherwise make it the
    module, before :func:`_load` binds the function."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "fold" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
