"""The SDK's model calls as recorded steps: a resumed run never pays twice for a call that
returned (DESIGN §3, "model calls are steps").

:class:`DurableModel` wraps any ``agents.Model`` (the SDK's provider-neutral interface). Each
``get_response`` is one ``read`` step named ``oa.model:<agent>`` (``#2``, … in call order),
written through the engine's journal like :func:`torpor.agents.models.record.call_model`: the
step records the prompt hash, the response (its output items as the Responses API's JSON) and
the token usage, with a ``model_called`` event the budget is summed from, then crosses the
``model.recorded`` fault point. On replay the recorded response is rebuilt without calling the
model; a replayed call whose prompt hash differs from the recorded one is non-determinism (the
code or instructions that build the prompt changed) and raises NonDeterminismError.

What is not recorded: the request's ``ModelSettings``, the tool and handoff definitions beyond
their names (they are part of the prompt hash) and the SDK's tracing spans. ``stream_response``
is refused: this runner is not wired to torpor's resumable streams (``torpor.streams``, issue 40)
yet; the seam is here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

from agents import Model, ModelResponse, Usage
from openai.types.responses import ResponseOutputItem
from pydantic import BaseModel, TypeAdapter

from ... import faults
from ...engine.journal import step_work
from ...errors import ConfigError
from ...history import ModelCalled
from .. import model_calls

if TYPE_CHECKING:
    from ...run import Run

#: (cast: the union's static type differs between openai releases; pydantic takes it either way)
_OUTPUT_ITEM: TypeAdapter[Any] = TypeAdapter(cast(Any, ResponseOutputItem))


def plain(value: Any) -> Any:
    """JSON data for ``value``: pydantic models dumped (JSON mode), containers walked, anything
    else by its ``repr`` (the hash only has to be stable between executions of one code)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def prompt_hash(model_id: str, system: str | None, input: Any, tools: list[Any]) -> str:
    """sha256 of the canonical JSON of the model id, instructions, input items and tool names."""
    doc = {
        "model": model_id,
        "system": system,
        "input": plain(input),
        "tools": sorted(_tool_name(t) for t in tools),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _tool_name(tool: Any) -> str:
    """A tool's name, a handoff's tool name (never a repr: it holds addresses)."""
    return str(
        getattr(tool, "tool_name", None) or getattr(tool, "name", None) or type(tool).__name__
    )


def dump_response(resp: ModelResponse) -> dict[str, Any]:
    """A ``ModelResponse`` as JSON data (output items, usage, ids)."""
    u = resp.usage
    return {
        "output": [item.model_dump(mode="json") for item in resp.output],
        "usage": {
            "requests": u.requests,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "total_tokens": u.total_tokens,
        },
        "response_id": resp.response_id,
        "request_id": resp.request_id,
    }


def load_response(data: dict[str, Any]) -> ModelResponse:
    """The ``ModelResponse`` that :func:`dump_response` recorded."""
    return ModelResponse(
        output=[_OUTPUT_ITEM.validate_python(item) for item in data["output"]],
        usage=Usage(**data["usage"]),
        response_id=data.get("response_id"),
        request_id=data.get("request_id"),
    )


class DurableModel(Model):
    """``inner`` (an ``agents.Model``) with every ``get_response`` a recorded step of ``run``.

    ``model_id`` names the model in the record (``model_called.model``); ``agent`` names the
    step (``oa.model:<agent>``).
    """

    def __init__(self, inner: Model, run: Run, *, agent: str, model_id: str) -> None:
        self.inner = inner
        self.run = run
        self.agent = agent
        self.model_id = model_id

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> Any:
        tools = args[1] if len(args) > 1 else kw.get("tools", [])
        handoffs = args[3] if len(args) > 3 else kw.get("handoffs", [])
        ph = prompt_hash(self.model_id, system_instructions, input, [*tools, *handoffs])
        sid, recorded = model_calls.begin(self.run, f"oa.model:{self.agent}", ph)
        if recorded is not None:
            return load_response(recorded)
        j = self.run.journal
        faults.note("step", sid, j.run_id)  # (the explorer's check: a recorded call never again)
        with step_work(j, sid):
            resp = await self.inner.get_response(system_instructions, input, *args, **kw)
        called = ModelCalled(
            step_id=sid,
            model=self.model_id,
            prompt_hash=ph,
            input_tokens=max(0, resp.usage.input_tokens),
            output_tokens=max(0, resp.usage.output_tokens),
            cost_usd=None,
        )
        purpose = f"model call ({self.model_id}) for agent {self.agent}"
        return load_response(
            model_calls.finish(self.run, sid, ph, dump_response(resp), called, purpose)
        )

    def stream_response(self, *args: Any, **kw: Any) -> AsyncIterator[Any]:
        raise ConfigError(
            "torpor.integrations.openai_agents: streamed model calls are not recorded yet "
            "(not wired to torpor.streams, issue 40, yet); use Runner.run, not Runner.run_streamed"
        )

    async def close(self) -> None:
        await self.inner.close()
