"""A framework's async model call as a recorded ``read`` step, the shape of torpor's own
(:mod:`torpor.agents.models.record`): the step's result is ``{"prompt_hash", "response"}`` (the
response as the framework's JSON), written in one append with a ``model_called`` event the
budget is summed from, then the ``model.recorded`` fault point. Used by the integrations
(:mod:`.pydantic_ai`, :mod:`.openai_agents`), whose model calls are coroutines the journal's
synchronous :meth:`~torpor.engine.journal.Journal.record` cannot await."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import faults
from ..errors import NonDeterminismError
from ..history import ModelCalled, Policy

if TYPE_CHECKING:
    from ..run import Run


def begin(run: Run, name: str, prompt_hash: str) -> tuple[str, Any | None]:
    """The next step id for ``name`` (after the boundary) and, on replay, the recorded response
    JSON (else ``None``: make the call, then :func:`finish`). Raises NonDeterminismError when
    the recorded call's prompt hash is not ``prompt_hash`` (the code building the prompt
    changed since the call was recorded)."""
    j = run.journal
    sid = j.next_id(name)
    j.boundary()
    comp = j.recorded(sid, Policy.READ)
    if comp is None:
        return sid, None
    data = j.value(sid, comp.result)
    if data.get("prompt_hash") != prompt_hash:
        raise NonDeterminismError(
            f"run {j.run_id!r} step {sid!r}: the recorded model call had prompt hash "
            f"{str(data.get('prompt_hash'))[:12]}, the replay builds {prompt_hash[:12]}; the "
            "code or instructions that build the prompt changed since the call was recorded"
        )
    return sid, data["response"]


def finish(
    run: Run, sid: str, prompt_hash: str, response: Any, called: ModelCalled, purpose: str
) -> Any:
    """Record step ``sid``'s call (``response`` JSON, ``called`` its usage); return the
    response as recorded and read back (what a replay hands back)."""
    j = run.journal
    data = j.jsonable(sid, {"prompt_hash": prompt_hash, "response": response})
    j.append(*j.step_events(sid, Policy.READ, data, [called], purpose))
    faults.point("model.recorded")
    return j.value(sid, data)["response"]
