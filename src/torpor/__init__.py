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

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agents import (
        Agent,
        ArtifactHash,
        CodePlanner,
        ModelJudge,
        PlanView,
        Proposal,
        ReActPlanner,
        Secret,
        Tools,
        step,
    )
    from .artifacts import ArtifactStore
    from .client import Client
    from .config import Settings
    from .engine.approvals import Approval
    from .engine.attempts import Retry, Timeout
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
    from .serde import register_type
    from .store import open_store
    from .workflows import workflow

__version__ = "0.1.0"

#: Where each public name lives. ``import torpor`` imports none of them: a name's module is
#: imported when the name is first used (PEP 562), so ``torpor --version`` and a process that
#: only resumes workflows never pay for the agents, the model adapters or the CLI, and the
#: parts a cold resume needs load once, on first use.
_LAZY = {
    "Absent": ".engine.effects",
    "Agent": ".agents",
    "Applied": ".engine.effects",
    "Approval": ".engine.approvals",
    "ArtifactHash": ".agents",
    "ArtifactRef": ".history",
    "ArtifactStore": ".artifacts",
    "Budget": ".history",
    "Client": ".client",
    "CodePlanner": ".agents",
    "EffectCall": ".engine.effects",
    "EffectNotApplied": ".errors",
    "Event": ".history",
    "ModelJudge": ".agents",
    "NonDeterminismError": ".errors",
    "Outcome": ".history",
    "PayloadError": ".errors",
    "PlanView": ".agents",
    "Policy": ".history",
    "Proposal": ".agents",
    "ReActPlanner": ".agents",
    "Retry": ".engine.attempts",
    "Run": ".run",
    "RunResult": ".engine.execution",
    "RunState": ".history",
    "RunStatus": ".history",
    "Runtime": ".runtime",
    "Secret": ".agents",
    "Settings": ".config",
    "StepError": ".errors",
    "Timeout": ".engine.attempts",
    "Tools": ".agents",
    "TorporError": ".errors",
    "TransientError": ".errors",
    "Unknown": ".engine.effects",
    "WaitTimeout": ".errors",
    "effect": ".engine.effects",
    "open_store": ".store",
    "register_type": ".serde",
    "step": ".agents",
    "workflow": ".workflows",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'torpor' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
    "Timeout",
    "Tools",
    "TorporError",
    "TransientError",
    "Unknown",
    "WaitTimeout",
    "effect",
    "open_store",
    "register_type",
    "step",
    "workflow",
]
