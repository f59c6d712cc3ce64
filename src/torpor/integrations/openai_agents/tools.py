"""The SDK's function tools under torpor's recovery policies (as :mod:`torpor.agents.tools`).

Mark a tool with :func:`read_tool` (safe to repeat: a ``read`` step, run again only if it never
completed) or :func:`effect_tool` (changes the outside world: intent recorded before the call,
observation after, at most once per idempotency key; after a crash mid-call the tool's
``reconcile(call)`` is asked — :class:`~torpor.Applied` / :class:`~torpor.Absent` /
:class:`~torpor.Unknown` — and without one the run ends ``unresolved``, never retried blindly;
G2). A tool left unmarked is an effect without a reconcile: the safe default for a callable
torpor knows nothing about.

Each call is a step named ``oa.tool:<tool name>:<call id>`` (the call id comes from the recorded
model response, so a replay names it the same). Inside an effect tool,
:func:`idempotency_key` gives the key to carry to the outside world (an API's idempotency
header, a ledger row), the one ``reconcile`` looks for as ``call.idempotency_key``.
"""

from __future__ import annotations

import dataclasses
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from agents import FunctionTool, Tool
from agents.tool_context import ToolContext

from ...engine.reconcile import Reconcile
from ...errors import ConfigError
from ...history import Policy

if TYPE_CHECKING:
    from ...run import Run

_POLICY_ATTR = "__torpor_policy__"
_KEY: ContextVar[str | None] = ContextVar("torpor_openai_agents_key", default=None)


@dataclasses.dataclass(frozen=True)
class ToolPolicy:
    """A tool's recovery policy: ``read`` or ``effect`` (with its optional ``reconcile``)."""

    policy: Policy
    reconcile: Reconcile | None = None


def read_tool(tool: FunctionTool) -> FunctionTool:
    """Mark ``tool`` safe to repeat (a ``read`` step); returns the same tool."""
    return _mark(tool, ToolPolicy(Policy.READ))


def effect_tool(tool: FunctionTool, *, reconcile: Reconcile | None = None) -> FunctionTool:
    """Mark ``tool`` an external effect, settled after a crash by ``reconcile(call)`` (a
    :class:`~torpor.EffectCall`: ``idempotency_key``, ``args == (arguments_json,)``); returns
    the same tool."""
    return _mark(tool, ToolPolicy(Policy.EFFECT, reconcile))


def idempotency_key(default: str | None = None) -> str:
    """The idempotency key of the effect tool call running now (``<run_id>/<step id>``);
    outside one (the same tool run by the plain SDK) ``default``, or ConfigError without one."""
    key = _KEY.get() or default
    if key is None:
        raise ConfigError("idempotency_key() is only known inside an effect tool's call")
    return key


def policy_of(tool: FunctionTool) -> ToolPolicy:
    """The policy :func:`read_tool`/:func:`effect_tool` set (default: an effect, no reconcile)."""
    found: ToolPolicy | None = getattr(tool, _POLICY_ATTR, None)
    return found if found is not None else ToolPolicy(Policy.EFFECT)


def _mark(tool: FunctionTool, pol: ToolPolicy) -> FunctionTool:
    if not isinstance(tool, FunctionTool):
        raise ConfigError(
            f"{type(tool).__name__} is not an agents.FunctionTool: only function tools take "
            "a torpor recovery policy"
        )
    setattr(tool, _POLICY_ATTR, pol)
    return tool


def durable_tool(tool: Tool, run: Run) -> Tool:
    """A copy of ``tool`` whose calls are recorded steps of ``run`` (function tools only; a
    hosted tool runs on the provider's side inside the recorded model call, so it passes as
    it is). ConfigError for a tool kind torpor cannot record (local shell, computer, MCP)."""
    if not isinstance(tool, FunctionTool):
        if type(tool).__name__ in ("WebSearchTool", "FileSearchTool", "CodeInterpreterTool"):
            return tool
        raise ConfigError(
            f"tool {getattr(tool, 'name', tool)!r} ({type(tool).__name__}): torpor records only "
            "function tools and hosted tools; wrap it in a function tool"
        )
    pol = policy_of(tool)
    original = tool.on_invoke_tool
    name = tool.name

    async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
        sid = f"oa.tool:{name}:{ctx.tool_call_id}"
        if pol.policy is Policy.EFFECT:

            async def call(arguments: str, idempotency_key: str) -> Any:
                token = _KEY.set(idempotency_key)
                try:
                    return await original(ctx, arguments)
                finally:
                    _KEY.reset(token)

            return await run.aeffect(
                sid, call, arguments, reconcile=pol.reconcile, operation=f"openai-agents:{name}"
            )
        return await run.astep(sid, original, ctx, arguments, purpose=f"tool {name}")

    return dataclasses.replace(tool, on_invoke_tool=invoke)
