"""TorporAgent: a Pydantic AI agent whose run is a torpor run.

The shape of Pydantic AI's own durable wrappers (``TemporalAgent``, ``DBOSAgent`` in
``pydantic_ai.durable_exec``): wrap an existing ``Agent``, leave its definition alone, and route
its two kinds of I/O through the engine — each model request a recorded ``read`` step
(:mod:`.model`), each tool call a ``read`` step or an ``effect`` with reconcile
(:mod:`.toolset`). The agent's run itself is a torpor workflow (:attr:`TorporAgent.workflow`),
so a process killed anywhere resumes from the record: the recorded responses replay, the
recorded tool results come back, an effect in flight is reconciled, never repeated blindly.

Pydantic AI's human-in-the-loop — a tool declared ``requires_approval=True`` (or raising
``ApprovalRequired``), with ``DeferredToolRequests`` among the agent's output types — becomes a
torpor approval: the call's name and arguments are stored as an artifact, a person approves or
denies exactly that content with their own key (``torpor approve RUN --as alice``; README
"Approvals"), and the agent continues with Pydantic AI's own ``DeferredToolResults`` (approved,
or ``ToolDenied`` naming who denied). The effect consumes the approval with its intent. An
external deferred call (``CallDeferred``) waits durably for the signal
``pydantic-ai:<tool_call_id>``, whose payload is the call's result.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolDenied

from ... import serde
from ...engine import budgets
from ...engine.approvals import Approval
from ...engine.effects import Reconcile
from ...errors import ApprovalDeniedError, ConfigError, RunInterrupt, TorporError
from ...history import Budget
from ...run import Run
from ...workflows import workflow
from .model import TorporModel
from .toolset import TorporToolset, approved_content

#: Most rounds of deferred calls one run goes through (each a person's or a system's answer).
MAX_ROUNDS = 50


class TorporAgent:
    """Run ``agent`` (a ``pydantic_ai.Agent``) durably.

    - ``name``: the workflow's name, ``pydantic-ai.<name>`` (default: the agent's ``name``;
      ConfigError without either) — what ``torpor ls`` shows and a worker looks up.
    - ``reads``: tool names safe to call again (``read``); ``effects``: tool name ->
      ``reconcile`` (or None); a tool in neither is an effect without a reconcile unless its
      function is declared with :func:`torpor.effect` (:func:`.toolset.policy_of`).
    - ``budget``: the run's limits (:class:`torpor.history.Budget`: tokens, cost, steps = model
      requests + tool calls, wall-clock), checked before each new model request and tool call
      from the recorded usage; reaching one ends the run ``blocked`` with the reason
      (``torpor budget RUN --tokens N`` raises it).
    - ``approvers`` / ``required``: who may decide a deferred tool approval (N-of-M, as
      :meth:`torpor.Run.approval`); ``deps``: ``deps(input) -> deps`` for the agent's run.

    Use :attr:`workflow` like any torpor workflow (``torpor.Runtime().run(durable.workflow,
    "prompt")``, ``Client.start``, the explorer), or ``await durable.run(run, prompt)`` inside
    an async workflow of your own. The workflow's input is the user prompt; its result is the
    agent's output.
    """

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        name: str | None = None,
        reads: Iterable[str] = (),
        effects: Mapping[str, Reconcile | None] | None = None,
        budget: Budget | None = None,
        approvers: Iterable[str] = (),
        required: int = 1,
        deps: Callable[[Any], Any] | None = None,
        version: str = "1",
    ):
        wname = name or agent.name
        if not wname:
            raise ConfigError(
                "TorporAgent needs a name: pass name= or give the Agent one (Agent(name=...)); "
                "it names the workflow a resumed run is looked up by"
            )
        self.agent = agent
        self.name = wname
        self.reads = frozenset(reads)
        self.effects = dict(effects or {})
        self.budget = budget
        self.approvers = tuple(approvers)
        self.required = required
        self.deps = deps
        frame = inspect.currentframe()
        back = frame.f_back if frame is not None else None
        caller = back.f_globals.get("__name__", __name__) if back is not None else __name__

        async def flow(run: Run, prompt: Any) -> Any:
            return await self.run(run, prompt)

        flow.__module__ = caller  # a resume imports the module that built this agent
        flow.__qualname__ = f"TorporAgent[{wname}]"
        reconcilers = {f"pydantic-ai:{wname}.{tool}": fn for tool, fn in self.effects.items() if fn}
        self.workflow = workflow(f"pydantic-ai.{wname}", version=version, reconcilers=reconcilers)(
            flow
        )

    async def run(self, run: Run, prompt: Any) -> Any:
        """Run the agent on ``prompt`` inside ``run`` (an async workflow's handle) and return its
        output; rounds of deferred tool calls are answered durably (module docstring)."""
        j = run.journal
        if self.budget is not None and self.budget != Budget():
            budgets.set_limits(j, self.budget, by=f"pydantic-ai agent {self.name}")
        parents: list[str] | None = None

        def check_budget() -> None:
            nonlocal parents
            if j.replay.replaying:
                return  # a replayed call was paid for already
            if parents is None:
                parents = budgets.ancestors(j.store, run.run_id)
            reason = budgets.exhausted(j.store, run.state, j.now_ms(), parents)
            if reason:
                run.block(reason)

        toolsets = [
            TorporToolset(
                ts,
                run=run,
                agent_name=self.name,
                reads=self.reads,
                effects=self.effects,
                before_call=check_budget,
            )
            for ts in self.agent.toolsets
        ]
        model = TorporModel(self.agent.model, run, before_call=check_budget)
        deps = self.deps(prompt) if self.deps is not None else None
        history: list[Any] | None = None
        results: DeferredToolResults | None = None
        for _round in range(MAX_ROUNDS):
            with self.agent.override(model=model, toolsets=toolsets, tools=[]):
                try:
                    out = await self.agent.run(
                        prompt if history is None else None,
                        message_history=history,
                        deferred_tool_results=results,
                        deps=deps,
                    )
                except BaseExceptionGroup as group:  # a tool task's interrupt, wrapped
                    raise _interrupt(group) from None
            if not isinstance(out.output, DeferredToolRequests):
                return out.output
            history = out.all_messages()
            results = self._answer(run, out.output, toolsets)
        raise TorporError(
            f"run {run.run_id!r}: the agent {self.name!r} asked for deferred tool calls "
            f"{MAX_ROUNDS} times in a row; stopping"
        )

    def _answer(
        self, run: Run, asked: DeferredToolRequests, toolsets: list[TorporToolset]
    ) -> DeferredToolResults:
        """Each approval asked for as a torpor approval of the call's content (waits durably
        for a person), each external call as a durable wait for its signal."""
        res = DeferredToolResults()
        for part in asked.approvals:
            args = part.args_as_dict()
            ref = run.artifact(
                f"pydantic-ai-call:{part.tool_call_id}",
                approved_content(part.tool_name, args, part.tool_call_id),
                media_type="application/json",
            )
            try:
                granted: Approval = run.approval(
                    f"tool:{part.tool_name}",
                    [ref],
                    summary=f"{part.tool_name}({serde.dumps(args)})",
                    approvers=self.approvers,
                    required=self.required,
                )
            except ApprovalDeniedError as exc:
                res.approvals[part.tool_call_id] = ToolDenied(f"The tool call was denied: {exc}")
                continue
            res.approvals[part.tool_call_id] = True
            res.answered_by[part.tool_call_id] = granted.approver
            for ts in toolsets:
                ts.approved[part.tool_call_id] = (granted, ref)
        for part in asked.calls:
            res.calls[part.tool_call_id] = run.wait_for(f"pydantic-ai:{part.tool_call_id}")
        return res


def _interrupt(group: BaseExceptionGroup[Any]) -> BaseException:
    """The first torpor interrupt (suspension, cancel, block) inside ``group``, else the group."""
    for exc in group.exceptions:
        if isinstance(exc, RunInterrupt):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _interrupt(exc)
            if found is not exc:
                return found
    return group
