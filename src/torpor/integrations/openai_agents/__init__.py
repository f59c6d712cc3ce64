"""OpenAI Agents SDK agents, durable on torpor (``pip install 'torpor[openai-agents]'``).

:class:`Runner` is a drop-in for ``agents.Runner`` inside a torpor workflow: the SDK's loop
runs as it is, and its model calls, tool calls, handoffs, guardrails and human-in-the-loop
interruptions are recorded in the run's history (docs: ``docs/openai-agents.md``)::

    @torpor.workflow(name="support")
    async def support(run: torpor.Run, question: str) -> str:
        result = await Runner.run(triage, question, run=run)
        return str(result.final_output)

Tools take torpor's recovery policies with :func:`read_tool` and :func:`effect_tool`
(unmarked: an effect without a reconcile). Importing this module imports ``agents``;
``import torpor`` does not.
"""

try:
    import agents as _sdk  # noqa: F401  (the extra's presence, checked once with its remedy)
except ImportError as missing:  # pragma: no cover - the extra is installed in CI
    from ...errors import ConfigError

    raise ConfigError(
        f"torpor.integrations.openai_agents needs the OpenAI Agents SDK ({missing}): "
        "pip install 'torpor[openai-agents]'"
    ) from None

from .model import DurableModel
from .runner import Runner
from .tools import effect_tool, idempotency_key, read_tool

__all__ = ["DurableModel", "Runner", "effect_tool", "idempotency_key", "read_tool"]
