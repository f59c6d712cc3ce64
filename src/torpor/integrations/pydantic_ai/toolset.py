"""A Pydantic AI toolset whose tool calls are recorded torpor steps, each by its recovery policy.

:class:`TorporToolset` wraps any toolset (the agent's function tools, a ``FunctionToolset``, an
MCP server's) and routes :meth:`call_tool` through the run:

- a ``read`` tool is a :meth:`torpor.Run.astep` (``tool:<name>:<tool_call_id>``): its recorded
  result comes back on replay; one that never completed is called again;
- an ``effect`` tool is a :meth:`torpor.Run.aeffect`: the intent (idempotency key, operation
  ``pydantic-ai:<agent>.<tool>``) is recorded before the call and the result after; after a
  crash in between, the tool's ``reconcile(call)`` asks the outside world — applied, absent
  (called again) or unknown — and without one the run ends ``unresolved`` (DESIGN.md G2). The
  tool reads its key with :func:`idempotency_key` (Pydantic AI hands the model's arguments to
  the function; the key is not one of them).

Tool call ids are stable across executions: they come from the model's recorded response (a
second call of one id, as Pydantic AI makes after a ``ModelRetry``, is ``…~2``).
Pydantic AI's control exceptions raised by a tool — ``ModelRetry``, ``ToolFailed``,
``CallDeferred``, ``ApprovalRequired`` — are recorded as the step's result and raised again,
on the first execution and on every replay, so the agent takes the same path both times.

Not recorded: what a toolset lists (``get_tools``; an MCP server's tool list is asked again on
each execution — durable MCP tools are issue 41's ``torpor.mcp``), and any state a tool keeps
in memory (it is rebuilt by the code, not restored).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, ToolFailed
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_ai.toolsets.wrapper import WrapperToolset

from ... import serde
from ...engine.approvals import Approval
from ...engine.effects import Reconcile
from ...errors import TorporError
from ...history import ArtifactRef, Policy
from ...run import Run

_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("torpor_pyai_key", default=None)


def idempotency_key() -> str:
    """The idempotency key of the effect tool call running now (``<run_id>/<step_id>``):
    give it to the outside world (an API's idempotency header, a ledger's key) so the tool's
    ``reconcile`` can find the call by it. Raises TorporError outside an effect tool call."""
    key = _KEY.get()
    if key is None:
        raise TorporError(
            "idempotency_key() is only known inside an effect tool call of a TorporAgent run"
        )
    return key


@dataclass(frozen=True)
class ToolPolicy:
    """How one tool is recovered: ``policy`` ``"read"`` or ``"effect"``, and for an effect its
    ``reconcile(call) -> Applied | Absent | Unknown`` (:class:`torpor.EffectCall`)."""

    policy: Policy
    reconcile: Reconcile | None = None


def policy_of(
    name: str,
    tool: ToolsetTool[Any],
    reads: frozenset[str],
    effects: Mapping[str, Reconcile | None],
) -> ToolPolicy:
    """A tool's policy: named in ``effects`` (with its reconcile), named in ``reads``, or its
    function declared with :func:`torpor.effect` (its reconcile); otherwise an effect without
    a reconcile — a tool torpor knows nothing of may change the world, and a crash during its
    call leaves the run ``unresolved`` rather than calling it again."""
    if name in effects:
        return ToolPolicy(Policy.EFFECT, effects[name])
    if name in reads:
        return ToolPolicy(Policy.READ)
    fn = getattr(getattr(tool, "toolset", None), "tools", {}).get(name)
    spec = getattr(getattr(fn, "function", None), "__torpor_effect__", None)
    return ToolPolicy(Policy.EFFECT, spec.reconcile if spec is not None else None)


def approved_content(tool: str, args: dict[str, Any], tool_call_id: str | None) -> bytes:
    """The bytes a person approves for one deferred tool call (stored as its artifact): the
    canonical JSON of the tool's name, its arguments and the call id."""
    return serde.dumps({"tool": tool, "args": args, "id": tool_call_id}).encode()


def _control(exc: Exception) -> dict[str, Any]:
    """A Pydantic AI control exception as a recordable value (raised again by :func:`_raise`)."""
    if isinstance(exc, ModelRetry | ToolFailed):
        return {"$pydantic_ai": type(exc).__name__, "message": exc.message}
    if isinstance(exc, CallDeferred):
        return {"$pydantic_ai": "CallDeferred", "metadata": exc.metadata, "kind": exc.kind}
    assert isinstance(exc, ApprovalRequired)
    return {"$pydantic_ai": "ApprovalRequired", "metadata": exc.metadata}


def _raise(value: Any) -> Any:
    kind = value.get("$pydantic_ai") if isinstance(value, dict) else None
    if kind is None:
        return value
    if kind == "ModelRetry":
        raise ModelRetry(value["message"])
    if kind == "ToolFailed":
        raise ToolFailed(value["message"])
    if kind == "CallDeferred":
        raise CallDeferred(value["metadata"], kind=value["kind"])
    raise ApprovalRequired(value["metadata"])


_CONTROL = (ModelRetry, ToolFailed, CallDeferred, ApprovalRequired)


@dataclass
class TorporToolset(WrapperToolset[Any]):
    """``wrapped`` with each tool call recorded in ``run`` by its policy (module docstring).

    ``approved``: tool call id -> (the granted approval, the artifact it was given on), filled
    by the agent once a person approved a deferred call; the effect consumes it with its
    intent (G6: the approval authorizes exactly that call's arguments)."""

    run: Run | None = None
    agent_name: str = "agent"
    reads: frozenset[str] = frozenset()
    effects: Mapping[str, Reconcile | None] = field(default_factory=dict)
    approved: dict[str, tuple[Approval, ArtifactRef]] = field(default_factory=dict)
    before_call: Callable[[], None] | None = None
    calls: dict[str, int] = field(default_factory=dict)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        run = self.run
        assert run is not None
        pol = policy_of(name, tool, self.reads, self.effects)
        # One step id per call of this tool call id: Pydantic AI may call one id again (after
        # a ModelRetry, say) from another task, and torpor's own numbering of repeated ids is
        # refused across tasks. The calls of one id come one after another: the count is the
        # same on every replay.
        base = f"tool:{name}:{ctx.tool_call_id}"
        n = self.calls[base] = self.calls.get(base, 0) + 1
        sid = base if n == 1 else f"{base}~{n}"
        wrapped = self.wrapped

        async def call(idempotency_key: str | None = None) -> Any:
            token = _KEY.set(idempotency_key)
            try:
                return await wrapped.call_tool(name, tool_args, ctx, tool)
            except _CONTROL as exc:
                return _control(exc)
            finally:
                _KEY.reset(token)

        if self.before_call is not None:
            self.before_call()  # (the budget: a no-op while the run replays)
        if pol.policy is Policy.READ:
            return _raise(await run.astep(sid, call, purpose=f"pydantic-ai tool {name} (read)"))
        approval, ref = self.approved.pop(ctx.tool_call_id or "", (None, None))
        # (Used once: Pydantic AI runs exactly the approved call — that tool call id, its
        # arguments from the recorded response — and a later call reusing the id is asked anew.)
        return _raise(
            await run.aeffect(
                sid,
                call,
                reconcile=pol.reconcile,
                operation=f"pydantic-ai:{self.agent_name}.{name}",
                approval=approval,
                artifacts=[ref] if ref is not None else [],
                purpose=f"pydantic-ai tool {name} (effect)",
            )
        )
