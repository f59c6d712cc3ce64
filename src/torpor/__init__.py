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

The names here are the public API (``__all__``, pinned by ``tests/test_public_api.py``); every
exception is in :mod:`torpor.errors`, the history's vocabulary in :mod:`torpor.history`, agents'
parts in :mod:`torpor.agents`, the testing kit in :mod:`torpor.testing`. Names that earlier
versions exported here stay importable (:data:`_KEPT`); the modules that are torpor's own
workings rather than an API are listed once, in :data:`_INTERNAL`.
"""

from typing import TYPE_CHECKING, Any

# The names of _LAZY and _KEPT for type checkers, each exported explicitly (``X as X``, as strict
# checkers want of a package whose __all__ is computed); tests/test_public_api.py keeps the two
# lists equal. isort would split every aliased import onto its own statement.
# isort: off
if TYPE_CHECKING:
    from .agents import (
        Agent as Agent,
        AgentContext as AgentContext,
        ArtifactHash as ArtifactHash,
        CodePlanner as CodePlanner,
        ModelJudge as ModelJudge,
        PlanView as PlanView,
        Planner as Planner,
        Proposal as Proposal,
        ProposedStep as ProposedStep,
        ReActPlanner as ReActPlanner,
        Secret as Secret,
        Tool as Tool,
        Tools as Tools,
        step as step,
    )
    from .artifacts import ArtifactStore as ArtifactStore
    from .client import Client as Client
    from .config import Settings as Settings
    from .engine.approvals import Approval as Approval
    from .engine.children import Child as Child, ChildResult as ChildResult
    from .engine.attempts import (
        Retry as Retry,
        Timeout as Timeout,
    )
    from .engine.effects import (
        Absent as Absent,
        Applied as Applied,
        EffectCall as EffectCall,
        Unknown as Unknown,
        effect as effect,
    )
    from .engine.execution import RunResult as RunResult
    from .errors import (
        ApprovalDeniedError as ApprovalDeniedError,
        ApprovalError as ApprovalError,
        ApprovalInvalidError as ApprovalInvalidError,
        Cancelled as Cancelled,
        ConfigError as ConfigError,
        CorruptRecordError as CorruptRecordError,
        EffectNotApplied as EffectNotApplied,
        LeaseHeldError as LeaseHeldError,
        LeaseLostError as LeaseLostError,
        NonDeterminismError as NonDeterminismError,
        PayloadError as PayloadError,
        PlannerError as PlannerError,
        RunInterrupt as RunInterrupt,
        RunNotFoundError as RunNotFoundError,
        SchemaVersionError as SchemaVersionError,
        StepError as StepError,
        StoreError as StoreError,
        Suspended as Suspended,
        TorporError as TorporError,
        TransientError as TransientError,
        TransitionError as TransitionError,
        VersionMismatchError as VersionMismatchError,
        WaitTimeout as WaitTimeout,
    )
    from .history import (
        ArtifactRef as ArtifactRef,
        Budget as Budget,
        Event as Event,
        Outcome as Outcome,
        Policy as Policy,
        RunState as RunState,
        RunStatus as RunStatus,
    )
    from .run import Run as Run
    from .runtime import Runtime as Runtime
    from .serde import register_type as register_type
    from .store import open_store as open_store
    from .workflows import workflow as workflow

# isort: on

__version__ = "0.1.0"

#: The public API: each name and the module it lives in. ``__all__`` is these names (pinned by
#: ``tests/test_public_api.py``). ``import torpor`` imports none of them: a name's module is
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
    "Child": ".engine.children",
    "ChildResult": ".engine.children",
    "Client": ".client",
    "CodePlanner": ".agents",
    "ConfigError": ".errors",
    "EffectCall": ".engine.effects",
    "EffectNotApplied": ".errors",
    "Event": ".history",
    "LeaseHeldError": ".errors",
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

#: Names earlier versions exported here and the public API no longer lists: still importable
#: (``except torpor.LeaseLostError:`` keeps working), loaded the same lazy way, but not in
#: ``__all__``; new code reaches them through their modules (``torpor.errors``,
#: ``torpor.agents``). ``tests/test_public_api.py`` pins every name any earlier version exported.
_KEPT = {
    "AgentContext": ".agents",
    "ApprovalDeniedError": ".errors",
    "ApprovalError": ".errors",
    "ApprovalInvalidError": ".errors",
    "Cancelled": ".errors",
    "CorruptRecordError": ".errors",
    "LeaseLostError": ".errors",
    "Planner": ".agents",
    "PlannerError": ".errors",
    "ProposedStep": ".agents",
    "RunInterrupt": ".errors",
    "RunNotFoundError": ".errors",
    "SchemaVersionError": ".errors",
    "StoreError": ".errors",
    "Suspended": ".errors",
    "Tool": ".agents",
    "TransitionError": ".errors",
    "VersionMismatchError": ".errors",
}

#: The modules (and packages, with everything under them) that are torpor's own workings, not
#: an API: importable, documented for the people who work on torpor (``docs/architecture.md``),
#: but changed in any release without a CHANGELOG line. What they do is reached through the
#: public names above and the public packages (``torpor.errors``, ``torpor.history``,
#: ``torpor.store``, ``torpor.agents``, ``torpor.memory``, ``torpor.episodes``,
#: ``torpor.testing``, ``torpor.telemetry``). A public name may be *defined* in an internal
#: module (``torpor.Absent`` lives in ``torpor.engine.effects``): the name is the promise, not
#: its address. This is the one place they are marked.
_INTERNAL = (
    "torpor.cli",
    "torpor.console",
    "torpor.engine",
    "torpor.faults",
    "torpor.filemodes",
    "torpor.owners",
    "torpor.report",
    "torpor.scrub",
    "torpor.store.appends",
    "torpor.store.chunkio",
    "torpor.store.chunks",
    "torpor.store.claims",
    "torpor.store.codec",
    "torpor.store.migrations",
    "torpor.store.reads",
    "torpor.store.sqlstore",
    "torpor.telemetry.attempt",
    "torpor.telemetry.quiet",
    "torpor.telemetry.tracer",
    "torpor.testing._lane",
    "torpor.urls",
)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name) or _KEPT.get(name)
    if module is None:
        raise AttributeError(f"module 'torpor' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_KEPT})


#: The public names: classes and constants first, then functions, each group sorted.
__all__ = sorted(_LAZY, key=lambda n: (n[0].islower(), n))
