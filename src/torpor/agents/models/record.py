"""Model calls as recorded steps: a resumed run never pays twice for a call that returned.

:func:`call_model` is a ``read`` step named ``model`` (``model#2``, … in order). Once the call
returned, its step records the model id, the prompt hash, the response, the token usage and
the cost (a ``model_called`` event the budget is summed from). On replay the recorded response
is returned without calling the model; a prompt that differs from the recorded one is
non-determinism (the code building the prompt changed), reported instead of guessed at. A call
that never returned (a crash, an error) left nothing and is made again.

An adapter made with ``stream="<name>"`` (and a ``complete_stream`` method) streams the call's
reply to that stream of the run as it arrives (:mod:`torpor.streams`): one part per attempt,
ended when the call returns, retracted when it raises or its process died.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ... import faults, serde
from ...errors import NonDeterminismError
from ...history import ModelCalled, Payload
from ...run import Run
from ...scrub import Scrubber
from ...streams import open_part
from .base import Message, Model, ModelResponse, ToolSpec


def prompt_hash(model_id: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> str:
    """sha256 of the canonical JSON of the model id, the messages and the tool definitions."""
    return serde.hash_value(
        {
            "model": model_id,
            "messages": [m.model_dump(mode="json") for m in messages],
            "tools": [t.model_dump(mode="json") for t in tools],
        }
    )


def context_hash(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> str:
    """sha256 of the messages and tool definitions without the model id: a recorded call whose
    prompt differs only by the model is replayed (the run resumed under another model)."""
    return serde.hash_value(
        {
            "messages": [m.model_dump(mode="json") for m in messages],
            "tools": [t.model_dump(mode="json") for t in tools],
        }
    )


def call_model(
    run: Run,
    model: Model,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] = (),
    *,
    name: str = "model",
    purpose: str = "",
    before_call: Callable[[], None] | None = None,
    redact: Callable[[ModelResponse], ModelResponse] | None = None,
) -> ModelResponse:
    """Call ``model`` as a recorded step and return its (recorded) response.

    ``before_call`` runs only when the model is really about to be called (the budget check);
    ``redact`` rewrites the response before it is recorded (secrets out) — the caller gets the
    redacted response too, so what it acts on is exactly what a replay will see. Raises
    NonDeterminismError when a replayed call's prompt differs from the recorded one.
    """
    return call_model_step(
        run,
        model,
        messages,
        tools,
        name=name,
        purpose=purpose,
        before_call=before_call,
        redact=redact,
    )[0]


def call_model_step(
    run: Run,
    model: Model,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] = (),
    *,
    name: str = "model",
    purpose: str = "",
    before_call: Callable[[], None] | None = None,
    redact: Callable[[ModelResponse], ModelResponse] | None = None,
    facts: Callable[[str], list[Payload]] | None = None,
    scrubber: Scrubber | None = None,
) -> tuple[ModelResponse, str]:
    """:func:`call_model`, giving back the step id too; ``facts(step_id)``: more events
    recorded in the same step as the call (what context was sent: ``context_built``);
    ``scrubber``: secrets taken out of the streamed deltas besides those the process knows
    (the agent's vault)."""
    ph = prompt_hash(model.model_id, messages, tools)
    ch = context_hash(messages, tools)

    def work(sid: str) -> tuple[Any, list[Payload]]:
        if before_call is not None:
            before_call()
        resp = _complete(run, model, messages, tools, sid, scrubber)
        if redact is not None:
            resp = redact(resp)
        called = ModelCalled(
            step_id=sid,
            model=resp.model or model.model_id,
            prompt_hash=ph,
            input_tokens=max(0, resp.usage.input_tokens),
            output_tokens=max(0, resp.usage.output_tokens),
            cost_usd=resp.cost_usd,
        )
        more = facts(sid) if facts is not None else []
        result = {"prompt_hash": ph, "context_hash": ch, "response": resp.model_dump(mode="json")}
        return result, [called, *more]

    rec = run.journal.record(name, work, purpose=purpose or f"model call ({model.model_id})")
    result = rec.result or {}
    if rec.new:
        faults.point("model.recorded")
    elif result.get("prompt_hash") != ph and result.get("context_hash") != ch:
        raise NonDeterminismError(
            f"run {run.run_id!r} step {rec.step_id!r}: the recorded model call had prompt hash "
            f"{str(result.get('prompt_hash'))[:12]}, the replay builds {ph[:12]}; the code "
            "that builds the prompt changed since the call was recorded"
        )
    return ModelResponse.model_validate(result["response"]), rec.step_id


def _complete(
    run: Run,
    model: Model,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
    sid: str,
    scrubber: Scrubber | None,
) -> ModelResponse:
    """The call itself: streamed to the run's stream ``model.stream`` when the adapter names
    one and can stream (``complete_stream``), as one part of it (``<step>@<epoch>``: ended
    when the call returns, retracted when it raises, retracted by the next writer when the
    process dies in it: :mod:`torpor.streams`); else ``complete``."""
    stream = getattr(model, "stream", None)
    complete_stream = getattr(model, "complete_stream", None)
    if not isinstance(stream, str) or not stream or complete_stream is None:
        return model.complete(list(messages), list(tools))
    with open_part(run.journal, stream, sid, scrubber) as part:
        resp: ModelResponse = complete_stream(list(messages), list(tools), part.write)
    return resp
