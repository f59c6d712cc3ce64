"""``Runner.run(agent, input, run=run)``: the SDK's own agent loop, every decision recorded.

The shape follows the SDK's durable integrations (Temporal's OpenAI Agents plugin wraps model
calls and tools as activities; DBOS's ``DBOSRunner`` wraps them as steps of the workflow it is
called from): the SDK still runs its loop, and what it reaches outside the process goes through
torpor's journal. Before the run, the agent graph (the agent, its handoffs' agents, theirs …)
is copied once per call with:

- its model wrapped in :class:`~.model.DurableModel` (a recorded ``read`` step per call);
- its function tools wrapped by :func:`~.tools.durable_tool` (``read`` steps or effects);
- its input and output guardrails recorded as ``read`` steps ``oa.guardrail:<kind>:<name>``
  (their verdict and ``output_info``; a guardrail that calls a model is paid once);
- its handoffs recorded as ``read`` steps ``oa.handoff:<from>-><to>`` (the arguments).

Because each recorded model response is replayed exactly, the SDK's loop takes the same path
on resume and reaches the same step ids. A tool declared ``needs_approval`` interrupts the SDK
run (``result.interruptions``); each interruption becomes a torpor approval bound to the hash
of the exact call (agent, tool, arguments) and signed by a person (:meth:`torpor.Run.approval`;
the run waits durably, holding nothing); approved, the SDK's ``RunState`` is approved and the
run continues; denied, the call is rejected and the model is told so.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from agents import (
    Agent,
    Handoff,
    InputGuardrail,
    Model,
    OutputGuardrail,
    RunConfig,
    RunResult,
    handoff,
)
from agents import GuardrailFunctionOutput as GuardrailOutput
from agents import Runner as SDKRunner

from ...errors import ApprovalDeniedError, ConfigError
from .model import DurableModel
from .tools import durable_tool

if TYPE_CHECKING:
    from ...run import Run


class _Graph:
    """The durable copies of one call's agents, made once per agent (cycles included)."""

    def __init__(self, run: Run, config: RunConfig):
        self.run = run
        self.config = config
        self.copies: dict[int, Agent[Any]] = {}

    def model_of(self, agent: Agent[Any]) -> Model | None:
        if self.config.model is not None:
            return None  # the run's model overrides every agent's (wrapped once, in Runner.run)
        if isinstance(agent.model, Model):
            inner, model_id = agent.model, type(agent.model).__name__
        else:
            inner = self.config.model_provider.get_model(agent.model)
            model_id = agent.model or getattr(inner, "model", None) or type(inner).__name__
        return DurableModel(inner, self.run, agent=agent.name, model_id=str(model_id))

    def copy(self, agent: Agent[Any]) -> Agent[Any]:
        found = self.copies.get(id(agent))
        if found is not None:
            return found
        if agent.mcp_servers:
            raise ConfigError(
                f"agent {agent.name!r}: MCP servers are not recorded by this runner yet "
                "(torpor.mcp's durable MCP tools, issue 41, are not wired to it); give the "
                "agent function tools instead"
            )
        clone = agent.clone()
        self.copies[id(agent)] = clone  # before the handoffs: a cycle finds it
        model = self.model_of(agent)
        if model is not None:
            clone.model = model
        clone.tools = [durable_tool(t, self.run) for t in agent.tools]
        clone.handoffs = [self.durable_handoff(agent, h) for h in agent.handoffs]
        clone.input_guardrails = [self.guardrail(g, "input") for g in agent.input_guardrails]
        clone.output_guardrails = [self.guardrail(g, "output") for g in agent.output_guardrails]
        return clone

    def durable_handoff(self, source: Agent[Any], h: Agent[Any] | Handoff[Any, Any]) -> Handoff:
        spec = handoff(h) if isinstance(h, Agent) else h
        original = spec.on_invoke_handoff
        run = self.run

        async def invoke(ctx: Any, arguments: str) -> Any:
            # The SDK picks the target by calling the handoff: deterministic once the model's
            # response is replayed, so it runs on replay too (an on_handoff callback with it).
            target = await original(ctx, arguments)
            await run.astep(
                f"oa.handoff:{source.name}->{target.name}",
                lambda: {"from": source.name, "to": target.name, "arguments": arguments},
                purpose=f"handoff from {source.name} to {target.name}",
            )
            return self.copy(target)

        return dataclasses.replace(spec, on_invoke_handoff=invoke)

    def guardrail(self, g: Any, kind: str) -> Any:
        fn = g.guardrail_function
        name = g.get_name()
        run = self.run

        async def check(ctx: Any, agent: Agent[Any], data: Any) -> GuardrailOutput:
            async def verdict() -> dict[str, Any]:
                out = fn(ctx, agent, data)
                if hasattr(out, "__await__"):
                    out = await out
                return {
                    "tripwire_triggered": out.tripwire_triggered,
                    "output_info": out.output_info,
                }

            rec = await run.astep(
                f"oa.guardrail:{kind}:{name}", verdict, purpose=f"{kind} guardrail {name}"
            )
            return GuardrailOutput(
                output_info=rec["output_info"], tripwire_triggered=rec["tripwire_triggered"]
            )

        cls = InputGuardrail if kind == "input" else OutputGuardrail
        return dataclasses.replace(g, guardrail_function=check) if isinstance(g, cls) else g


class Runner:
    """A drop-in for ``agents.Runner`` inside a torpor workflow (``async def flow(run, ...)``)."""

    @classmethod
    async def run(
        cls,
        starting_agent: Agent[Any],
        input: Any,
        *,
        run: Run,
        run_config: RunConfig | None = None,
        approvers: tuple[str, ...] = (),
        **kwargs: Any,
    ) -> RunResult:
        """Run ``starting_agent`` on ``input`` as ``agents.Runner.run`` does, recorded in
        ``run`` (the torpor :class:`~torpor.Run` of the calling workflow); returns the SDK's
        ``RunResult`` (``final_output`` is the same on every replay).

        ``kwargs`` go to the SDK (``context``, ``max_turns``, ``hooks``, ``previous_response_id``
        …). ``approvers``: who may sign the approvals of interrupted tool calls (keyring names;
        any trusted person when empty). Raises ConfigError for what this runner does not record
        yet — a ``session`` (the SDK's sessions write outside the record), MCP servers, tool
        kinds other than function and hosted tools; the SDK's own errors (guardrail tripwires,
        ``MaxTurnsExceeded``) as the SDK raises them, the same on every replay.
        """
        if kwargs.get("session") is not None:
            raise ConfigError(
                "Runner.run(session=...): the SDK's sessions are not backed by torpor's store "
                "yet; the run's own record replays the conversation, so pass no session"
            )
        config = dataclasses.replace(run_config) if run_config is not None else RunConfig()
        if config.model is not None:
            inner = (
                config.model
                if isinstance(config.model, Model)
                else config.model_provider.get_model(config.model)
            )
            mid = config.model if isinstance(config.model, str) else type(inner).__name__
            config.model = DurableModel(inner, run, agent="run", model_id=mid)
        start = _Graph(run, config).copy(starting_agent)
        result = await SDKRunner.run(start, input, run_config=config, **kwargs)
        while result.interruptions:
            state = result.to_state()
            for item in result.interruptions:
                _decide(run, state, item, approvers)
            result = await SDKRunner.run(start, state, run_config=config, **kwargs)
        return result

    @classmethod
    def run_streamed(cls, *args: Any, **kwargs: Any) -> Any:
        """Refused: not wired to torpor's resumable streams (``torpor.streams``, issue 40) yet."""
        raise ConfigError(
            "Runner.run_streamed: streamed runs are not recorded yet (not wired to "
            "torpor.streams, issue 40); use Runner.run"
        )


def _decide(run: Run, state: Any, item: Any, approvers: tuple[str, ...]) -> None:
    """One interrupted tool call as a torpor approval bound to its exact content."""
    raw = item.raw_item
    get = raw.get if isinstance(raw, dict) else lambda k, d=None: getattr(raw, k, d)
    tool = str(item.tool_name or get("name", "tool"))
    call_id = str(get("call_id", "") or get("id", ""))
    content = {
        "agent": item.agent.name,
        "tool": tool,
        "call_id": call_id,
        "arguments": get("arguments", ""),
    }
    ref = run.artifact(
        f"oa.call.{tool}.{call_id}.json",
        json.dumps(content, sort_keys=True),
        media_type="application/json",
    )
    try:
        run.approval(
            f"oa.tool.{tool}",
            [ref],
            summary=f"{item.agent.name} calls {tool}({content['arguments']})",
            approvers=approvers,
        )
    except ApprovalDeniedError as denied:
        state.reject(item, rejection_message=f"denied by a person: {denied}")
    else:
        state.approve(item)
