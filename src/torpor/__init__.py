"""torpor — durable execution for long-running AI agents.

A workflow is a function ``fn(run, input)``; everything it does through the :class:`Run`
handle is recorded, so the run can stop anywhere and continue later without redoing finished
work or repeating an external effect::

    import torpor

    @torpor.workflow(version="1", criteria=["sent"])
    def notify(run: torpor.Run, to: str) -> str:
        body = run.compute("draft", lambda: f"hello {to}")
        run.effect("send", send_mail, to, body, reconcile=find_sent_mail)
        run.verify("sent", True)
        return "ok"

    torpor.Runtime().run(notify, "ops@example.org")
"""

from .agent import (
    Agent,
    AgentContext,
    CodePlanner,
    ModelJudge,
    Planner,
    PlannerError,
    PlanView,
    Proposal,
    ProposedStep,
    ReActPlanner,
    step,
)
from .artifacts import ArtifactStore
from .client import Client
from .config import Settings
from .errors import (
    ApprovalDeniedError,
    ApprovalError,
    ApprovalInvalidError,
    Cancelled,
    ConfigError,
    CorruptRecordError,
    LeaseHeldError,
    LeaseLostError,
    NonDeterminismError,
    PayloadError,
    RunInterrupt,
    RunNotFoundError,
    SchemaVersionError,
    StoreError,
    Suspended,
    TorporError,
    TransitionError,
    VersionMismatchError,
)
from .history import ArtifactRef, Budget, Event, Outcome, Policy, RunState, RunStatus
from .run import (
    Absent,
    Applied,
    Approval,
    EffectCall,
    EffectNotApplied,
    Run,
    StepError,
    Unknown,
    WaitTimeout,
)
from .runtime import RunResult, Runtime
from .store import open_store
from .tools import ArtifactHash, Retry, Secret, Tool, Tools, TransientError
from .workflows import workflow

__version__ = "0.1.0"

__all__ = [
    "Absent",
    "Agent",
    "AgentContext",
    "Applied",
    "Approval",
    "ApprovalDeniedError",
    "ApprovalError",
    "ApprovalInvalidError",
    "ArtifactHash",
    "ArtifactRef",
    "ArtifactStore",
    "Budget",
    "Cancelled",
    "Client",
    "CodePlanner",
    "ConfigError",
    "CorruptRecordError",
    "EffectCall",
    "EffectNotApplied",
    "Event",
    "LeaseHeldError",
    "LeaseLostError",
    "ModelJudge",
    "NonDeterminismError",
    "Outcome",
    "PayloadError",
    "PlanView",
    "Planner",
    "PlannerError",
    "Policy",
    "Proposal",
    "ProposedStep",
    "ReActPlanner",
    "Retry",
    "Run",
    "RunInterrupt",
    "RunNotFoundError",
    "RunResult",
    "RunState",
    "RunStatus",
    "Runtime",
    "SchemaVersionError",
    "Secret",
    "Settings",
    "StepError",
    "StoreError",
    "Suspended",
    "Tool",
    "Tools",
    "TorporError",
    "TransientError",
    "TransitionError",
    "Unknown",
    "VersionMismatchError",
    "WaitTimeout",
    "open_store",
    "step",
    "workflow",
]
