"""What a planner proposes (:class:`Proposal` of :class:`ProposedStep`) and what it is shown
(:class:`PlanView`): JSON data, so a code planner's recorded input hash is stable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

#: Observations shown to a model are cut to this many characters.
OBSERVATION_CHARS = 20_000


# ------------------------------------------------------------------ proposals


class ProposedStep(BaseModel):
    """One step a planner proposes: call ``tool`` with ``args`` after ``depends_on``."""

    call_id: str = Field(min_length=1)
    tool: str
    args: Any = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)
    why: str = ""


class Proposal(BaseModel):
    """A planner's answer: the next plan (``steps``), or ``done`` with a ``final`` answer."""

    steps: list[ProposedStep] = Field(default_factory=list)
    done: bool = False
    final: str = ""
    reason: str = ""

    @classmethod
    def finish(cls, final: str = "", reason: str = "") -> Proposal:
        return cls(done=True, final=final, reason=reason)


def step(
    call_id: str, tool: str, after: Sequence[str] = (), why: str = "", **args: Any
) -> ProposedStep:
    """Shorthand for a code planner: ``step("b", "transform", after=["a"], rows=10)``."""
    return ProposedStep(call_id=call_id, tool=tool, args=args, depends_on=list(after), why=why)


class StepView(BaseModel):
    """A planned call as a planner sees it."""

    call_id: str
    tool: str
    args: Any = None
    depends_on: list[str] = Field(default_factory=list)
    why: str = ""
    status: str = "pending"
    observation: Any = None
    version: int = 0


class PlanView(BaseModel):
    """What a code planner is given (JSON data, so its recorded input hash is stable)."""

    goal: str
    input: Any = None
    version: int = 0
    tools: list[str] = Field(default_factory=list)
    steps: list[StepView] = Field(default_factory=list)
    #: Lessons of earlier runs of this agent and task type in the run's scope (the episodes
    #: section, :mod:`torpor.episodes`); ``""`` when there are none.
    episodes: str = ""

    def get(self, call_id: str) -> StepView | None:
        return next((s for s in self.steps if s.call_id == call_id), None)

    def status(self, call_id: str) -> str | None:
        s = self.get(call_id)
        return s.status if s else None

    def failed(self) -> list[StepView]:
        return [s for s in self.steps if s.status in ("failed", "invalid", "denied")]

    def succeeded(self) -> list[StepView]:
        return [s for s in self.steps if s.status == "succeeded"]


def clip(text: str, limit: int = OBSERVATION_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
