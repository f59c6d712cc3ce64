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

The names here are the public API (pinned by ``tests/test_public_api.py``); every exception is
in :mod:`torpor.errors`, the history's vocabulary in :mod:`torpor.history`, agents' parts in
:mod:`torpor.agents`, the testing kit in :mod:`torpor.testing`.
"""

from .agents import (
    Agent,
    ArtifactHash,
    CodePlanner,
    ModelJudge,
    PlanView,
    Proposal,
    ReActPlanner,
    Retry,
    Secret,
    Tools,
    step,
)
from .artifacts import ArtifactStore
from .client import Client
from .config import Settings
from .engine.approvals import Approval
from .engine.effects import Absent, Applied, EffectCall, Unknown, effect
from .engine.execution import RunResult
from .errors import (
    EffectNotApplied,
    NonDeterminismError,
    PayloadError,
    StepError,
    TorporError,
    TransientError,
    WaitTimeout,
)
from .history import ArtifactRef, Budget, Event, Outcome, Policy, RunState, RunStatus
from .run import Run
from .runtime import Runtime
from .store import open_store
from .workflows import workflow

__version__ = "0.1.0"

__all__ = [
    "Absent",
    "Agent",
    "Applied",
    "Approval",
    "ArtifactHash",
    "ArtifactRef",
    "ArtifactStore",
    "Budget",
    "Client",
    "CodePlanner",
    "EffectCall",
    "EffectNotApplied",
    "Event",
    "ModelJudge",
    "NonDeterminismError",
    "Outcome",
    "PayloadError",
    "PlanView",
    "Policy",
    "Proposal",
    "ReActPlanner",
    "Retry",
    "Run",
    "RunResult",
    "RunState",
    "RunStatus",
    "Runtime",
    "Secret",
    "Settings",
    "StepError",
    "Tools",
    "TorporError",
    "TransientError",
    "Unknown",
    "WaitTimeout",
    "effect",
    "open_store",
    "step",
    "workflow",
]
