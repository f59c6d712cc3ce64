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
from .events import ArtifactRef, Event, Outcome, Policy, RunState, RunStatus
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
from .workflows import workflow

__version__ = "0.1.0"

__all__ = [
    "Absent",
    "Applied",
    "Approval",
    "ApprovalDeniedError",
    "ApprovalError",
    "ApprovalInvalidError",
    "ArtifactRef",
    "ArtifactStore",
    "Cancelled",
    "Client",
    "ConfigError",
    "CorruptRecordError",
    "EffectCall",
    "EffectNotApplied",
    "Event",
    "LeaseHeldError",
    "LeaseLostError",
    "NonDeterminismError",
    "Outcome",
    "PayloadError",
    "Policy",
    "Run",
    "RunInterrupt",
    "RunNotFoundError",
    "RunResult",
    "RunState",
    "RunStatus",
    "Runtime",
    "SchemaVersionError",
    "Settings",
    "StepError",
    "StoreError",
    "Suspended",
    "TorporError",
    "TransitionError",
    "Unknown",
    "VersionMismatchError",
    "WaitTimeout",
    "open_store",
    "workflow",
]
