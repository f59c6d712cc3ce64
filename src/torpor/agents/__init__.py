"""Agents: a planner (a model or plain code) decides the steps at run time; the engine records
the plan and every decision as it happens (:mod:`.loop`). Tools are plain functions with a
schema and a recovery policy (:mod:`.tools`); model adapters and recorded model calls are in
:mod:`.models` (an optional extra: ``pip install 'torpor[models]'`` for the provider SDKs)."""

from .loop import Agent, AgentContext
from .planners import CodePlanner, Planner, ReActPlanner
from .proposals import PlanView, Proposal, ProposedStep, step
from .tools import ArtifactHash, Retry, Secret, Tool, Tools
from .verifiers import ModelJudge

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
