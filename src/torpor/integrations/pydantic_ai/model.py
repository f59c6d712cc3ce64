"""A Pydantic AI model whose requests are recorded torpor steps: a resumed run never pays twice.

Each :meth:`TorporModel.request` is a ``read`` step named ``model`` (``model#2``, … in order),
the same shape as torpor's own model calls (:mod:`torpor.agents.models.record`): once the
wrapped model returned, one append records the step with a ``model_called`` event — model
name, prompt hash, input and output tokens, cost when Pydantic AI computed one — which torpor's
budgets are summed from, and the response itself (Pydantic AI's own JSON form,
``ModelMessagesTypeAdapter``). On replay the recorded response is handed back without calling
the model. A request that never returned (a crash, an error) left nothing and is made again.

The prompt hash is taken over the messages sent with what differs between executions of the
same run left out (timestamps, Pydantic AI's per-execution ``run_id`` / ``conversation_id``);
a replay whose messages still differ raises NonDeterminismError (the code building the prompt
changed), as torpor's own model calls do.

Streaming (``request_stream``) is not recorded here: torpor's resumable streams
(``torpor.streams``) are not wired to it yet; this class refuses it with that reason
rather than stream unrecorded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from ... import serde
from ...errors import TorporError
from ...history import ModelCalled
from ...run import Run
from .. import model_calls

#: Keys whose values differ between two executions of one run (left out of the prompt hash).
_VOLATILE = frozenset({"timestamp", "run_id", "conversation_id"})


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def prompt_hash(model_name: str, messages: list[ModelMessage], tools: Any) -> str:
    """sha256 of the canonical JSON of the model name, the messages (volatile keys left out)
    and the tool definitions offered."""
    return serde.hash_value(
        {
            "model": model_name,
            "messages": _stable(ModelMessagesTypeAdapter.dump_python(messages, mode="json")),
            "tools": tools,
        }
    )


class TorporModel(WrapperModel):
    """Wrap ``wrapped`` (a Pydantic AI model) so each request is a recorded step of ``run``.

    ``before_call`` runs only when the model is really about to be called (never on replay):
    :class:`~torpor.integrations.pydantic_ai.TorporAgent` checks the run's budget there.
    """

    def __init__(self, wrapped: Any, run: Run, before_call: Callable[[], None] | None = None):
        super().__init__(wrapped)
        self.run = run
        self.before_call = before_call

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        tools = [t.name for t in model_request_parameters.function_tools] + [
            t.name for t in model_request_parameters.output_tools
        ]
        ph = prompt_hash(self.wrapped.model_name, messages, tools)
        sid, recorded = model_calls.begin(self.run, "model", ph)
        if recorded is not None:
            return _response(recorded)
        if self.before_call is not None:
            self.before_call()
        resp = await self.wrapped.request(messages, model_settings, model_request_parameters)
        usage = resp.usage
        cost = getattr(usage, "cost", None)
        called = ModelCalled(
            step_id=sid,
            model=resp.model_name or self.wrapped.model_name,
            prompt_hash=ph,
            input_tokens=max(0, usage.input_tokens),
            output_tokens=max(0, usage.output_tokens),
            cost_usd=float(cost) if isinstance(cost, int | float) else None,
        )
        dumped = ModelMessagesTypeAdapter.dump_python([resp], mode="json")[0]
        purpose = f"pydantic-ai model request ({self.wrapped.model_name})"
        return _response(model_calls.finish(self.run, sid, ph, dumped, called, purpose))

    @asynccontextmanager
    async def request_stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[StreamedResponse]:
        raise TorporError(
            "a durable Pydantic AI agent does not stream yet: torpor's resumable streams "
            "(torpor.streams) are not wired to it; call run() instead of run_stream()"
        )
        yield  # pragma: no cover (makes this an async generator)


def _response(data: Any) -> ModelResponse:
    msg = ModelMessagesTypeAdapter.validate_python([data])[0]
    assert isinstance(msg, ModelResponse)
    return msg
