"""What an agent's planners, verifiers and tool calls are given: the context of one execution
of an agent's run (implemented by :class:`torpor.agents.loop.AgentContext`), as a protocol, so
that those parts depend on what they use and not on the loop that drives them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..memory.config import Memory
from ..run import Run
from .models.base import Message, Model, ModelResponse, ToolSpec
from .proposals import PlanView
from .tools import Tools, Vault


class AgentSpec(Protocol):
    """The parts of an :class:`~torpor.Agent` its context reads."""

    @property
    def goal(self) -> str: ...

    @property
    def tools(self) -> Tools: ...

    @property
    def instructions(self) -> str: ...

    @property
    def criteria(self) -> Mapping[str, Any]: ...

    @property
    def memory(self) -> Memory:
        """The working memory's sizing (:class:`~torpor.memory.Memory`)."""
        ...

    @property
    def on_denied(self) -> str:
        """``block`` or ``replan`` when a person denies a tool call."""
        ...

    @property
    def max_plan_versions(self) -> int:
        """The most plan versions a run may make (one per model turn for ReAct)."""
        ...


class Context(Protocol):
    """One execution of an agent's run, as planners, verifiers and tool calls see it."""

    @property
    def agent(self) -> AgentSpec: ...

    @property
    def run(self) -> Run: ...

    @property
    def vault(self) -> Vault:
        """Secrets this process knows, for redaction (see :class:`~.tools.Vault`)."""
        ...

    @property
    def final(self) -> str:
        """The planner's final answer, once it said it is done."""
        ...

    def view(self) -> PlanView:
        """The plan and every call's status and observation, as JSON data."""
        ...

    def tool_specs(self) -> list[ToolSpec]: ...

    def results(self) -> dict[str, Any]:
        """Observations of the calls that succeeded, by call id."""
        ...

    def call_model(
        self,
        model: Model,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        name: str = "model",
    ) -> ModelResponse:
        """A recorded model call (budget checked first, secrets redacted before recording)."""
        ...

    def conversation(self, instructions: str = "") -> list[Message]:
        """The messages for the next model turn."""
        ...

    def call_id_for(self, model_call_id: str) -> str:
        """A fresh call id for a model's tool call id."""
        ...

    def add_turn(self, message: Message, call_ids: list[str]) -> None:
        """Remember a model turn and the call ids its tool calls became."""
        ...

    def redact_args(self, tool_name: str, args: Any) -> Any:
        """``args`` as they may be recorded: the tool's ``Secret`` fields replaced by their
        keyed hash, known secret values scrubbed (G12)."""
        ...

    def check_budget(self) -> None:
        """Block the run (durably, with the reason) when a budget limit is reached."""
        ...

    def budget_exhausted(self, pending_steps: int = 0) -> str:
        """Why no further call may start (``pending_steps`` more counted), or ""."""
        ...

    def settle(
        self,
        c: Any,
        outcome: str,
        observation: Any,
        executed_by: str | None,
        *,
        boundary: bool = True,
    ) -> None:
        """Record a planned call's outcome (``tool_call_settled``)."""
        ...
