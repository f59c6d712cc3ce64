"""Workflows of the stream tests (tests/test_streams*.py, the console's browser test), in a
module of their own so a writer in another process registers the same ones."""

from __future__ import annotations

from typing import Any

import torpor
from torpor.agents.models import AnthropicModel, Message, OpenAIChatModel, call_model


def model(flavour: str, url: str, **kw: Any) -> Any:
    """A streaming adapter against a loopback server (tests/agent_kit.py)."""
    if flavour == "openai":
        return OpenAIChatModel("loop-1", base_url=url, api_key="k", max_retries=0, **kw)
    return AnthropicModel("claude-loop", base_url=url, api_key="k", max_retries=0, **kw)


@torpor.workflow(name="streams.kit.ask")
def ask(run: torpor.Run, spec: dict[str, Any]) -> str:
    """One streamed model call (``spec``: ``flavour``, ``url``), between two progress items."""
    run.stream("progress").write({"step": "asking"})
    m = model(spec.get("flavour", "openai"), spec["url"], stream="reply", timeout=120.0)
    text = call_model(run, m, [Message.user(spec.get("question", "what is torpor?"))])
    run.stream("progress").write({"step": "answered"})
    return text.message.content


@torpor.workflow(name="streams.kit.count")
def count(run: torpor.Run, n: int) -> int:
    """``n`` progress items, a step between each two."""
    for i in range(n):
        run.stream("progress").write({"i": i})
        run.step("tick", lambda: None)
    return n


@torpor.workflow(name="streams.kit.deltas")
def deltas(run: torpor.Run, n: int) -> int:
    """``n`` parts of the ``reply`` stream, one delta each, a step between each two."""
    for k in range(n):
        with run.stream("reply").part(f"p{k}") as p:
            p.write(f"delta {k} ")
        run.step("tick", lambda: None)
    return n


@torpor.workflow(name="streams.kit.gated")
def gated(run: torpor.Run, _: Any) -> str:
    """A part, a wait for the signal ``more``, another part."""
    with run.stream("reply").part("first") as p:
        p.write("before the signal")
    run.wait_for("more")
    with run.stream("reply").part("second") as p:
        p.write("after the signal")
    return "done"
