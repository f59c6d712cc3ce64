"""Agents: a planner (a model or plain code) decides the steps at run time; the engine records
the plan and every decision as it happens (:mod:`.loop`). Tools are plain functions with a
schema and a recovery policy (:mod:`.tools`); model adapters and recorded model calls are in
:mod:`.models` (an optional extra: ``pip install 'torpor[models]'`` for the provider SDKs)."""

from .loop import (
    Agent,
    AgentContext,
    CodePlanner,
    ModelJudge,
    Planner,
    PlanView,
    Proposal,
    ProposedStep,
    ReActPlanner,
    step,
)
from .tools import ArtifactHash, Retry, Secret, Tool, Tools

__all__ = [
    "Agent",
    "AgentContext",
    "ArtifactHash",
    "CodePlanner",
    "ModelJudge",
    "PlanView",
    "Planner",
    "Proposal",
    "ProposedStep",
    "ReActPlanner",
    "Retry",
    "Secret",
    "Tool",
    "Tools",
    "step",
]
