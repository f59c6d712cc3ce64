"""Context overflow is recoverable (issue 29): a provider that refuses a context as too long —
OpenAI's 400 ``context_length_exceeded``, Anthropic's 400 ``prompt is too long`` — gets one
retry after a harder compaction, recorded as one step (``overflow:<model step>``: a
``context_compacted`` and a warning); its error text never becomes a message or a summary; a
run killed after that step resumes to the uninterrupted run's record. The provider is a
loopback server speaking each wire format (tests/agent_kit.py), the model the official SDK."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest

import torpor
from agent_kit import Err, anthropic_reply, loopback, openai_reply
from conftest import run_python
from torpor.agents.models import AnthropicModel, OpenAIChatModel
from torpor.errors import ModelContextTooLongError
from torpor.memory import Memory

#: The window of the loopback "model", in characters of the request's messages.
WINDOW_CHARS = 9000
TURNS = 8
OPENAI_TOO_LONG = (
    "This model's maximum context length is 3000 tokens. However, your messages resulted in "
    "{n} tokens. Please reduce the length of the messages."
)
ANTHROPIC_TOO_LONG = "prompt is too long: {n} tokens > 3000 maximum"


def _size(body: dict[str, Any]) -> int:
    return len(json.dumps(body["messages"])) + len(json.dumps(body.get("system", "")))


def responder(flavour: str, fail_retry: list[int] | None = None) -> Any:
    """Tool calls ``read_log(i)`` for TURNS turns, then an answer; a request over the window
    is refused the way the provider refuses it."""

    def respond(body: dict[str, Any]) -> Any:
        n = _size(body)
        if n > WINDOW_CHARS:
            if flavour == "openai":
                msg = OPENAI_TOO_LONG.format(n=n // 3)
                return Err(400, msg, code="context_length_exceeded")
            return Err(400, ANTHROPIC_TOO_LONG.format(n=n // 3))
        system = body.get("system") or body["messages"][0]["content"]
        turn = int(re.search(r"Model turns so far: (\d+)", system).group(1))
        if turn >= TURNS:
            return (openai_reply if flavour == "openai" else anthropic_reply)("all logs read")
        args = {"day": turn + 1}
        if flavour == "openai":
            return openai_reply(f"Reading day {turn + 1}.", [(f"t{turn}", "read_log", args)])
        return anthropic_reply(f"Reading day {turn + 1}.", [(f"t{turn}", "read_log", args)])

    return respond


tools = torpor.Tools()


@tools.tool
def read_log(day: int) -> dict[str, Any]:
    lines = [
        f"2026-03-{day:02d}T10:{i:02d}:00Z INFO sync: batch {day}{i:03d} ok" for i in range(40)
    ]
    return {"day": day, "log": "\n".join(lines)}


def make_agent(name: str, flavour: str, url: str) -> torpor.Agent:
    if flavour == "openai":
        model: Any = OpenAIChatModel("loop-1", base_url=url, api_key="k", max_retries=0)
    else:
        model = AnthropicModel("claude-loop", base_url=url, api_key="k", max_retries=0)
    return torpor.Agent(
        name,
        goal="read the daily sync logs",
        tools=tools,
        planner=torpor.ReActPlanner(model),
        memory=Memory(budget_tokens=12_000),  # more than the provider's window: it overflows
    )


def _overflow_steps(client: torpor.Client, rid: str) -> list[str]:
    return [
        e.payload.step_id
        for e in client.events(rid)
        if e.type == "context_compacted" and e.payload.step_id.startswith("overflow:")
    ]


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_a_context_too_long_compacts_harder_and_retries_once(
    flavour: str, store_url: str, tmp_path: Path
) -> None:
    with loopback(flavour, responder(flavour)) as api:
        agent = make_agent(f"test.overflow.{flavour}", flavour, api.url)
        with torpor.Runtime(store_url) as rt:
            res = rt.run(agent, {}, run_id="o1")
        refused = [r for r in api.requests if _size(r.body) > WINDOW_CHARS]
        sent = [r for r in api.requests if _size(r.body) <= WINDOW_CHARS]
    assert res.outcome == "succeeded_with_warnings", res
    client = torpor.Client(store_url)
    steps = _overflow_steps(client, "o1")
    assert refused and len(steps) == len(refused)  # one recorded compaction per refusal
    # Each refusal was followed by exactly one retry, which the provider accepted.
    assert len(sent) == TURNS + 1
    warnings = [e.payload.message for e in client.events("o1") if e.type == "warning_recorded"]
    assert len(warnings) == len(refused) and all("too long" in w for w in warnings)
    # The provider's words reach no message, no summary, no warning.
    for r in api.requests:
        assert "maximum" not in json.dumps(r.body), "the error text became a message"
    assert not any("maximum" in w for w in warnings)
    state = client.state("o1")
    from torpor.memory.view import context_view

    view = context_view(state)
    assert view is not None
    assert all("maximum" not in s.text for s in view.sections)
    assert view.total_tokens < 12_000  # the context's budget was lowered below the window


def test_the_adapters_name_a_context_too_long() -> None:
    for flavour, reply in (
        ("openai", Err(400, OPENAI_TOO_LONG.format(n=4100), code="context_length_exceeded")),
        ("anthropic", Err(400, ANTHROPIC_TOO_LONG.format(n=4100))),
        ("anthropic", Err(413, "Request exceeds the maximum size", code="request_too_large")),
    ):
        with loopback(flavour, lambda body, reply=reply: reply) as api:
            if flavour == "openai":
                model: Any = OpenAIChatModel("m", base_url=api.url, api_key="k", max_retries=0)
            else:
                model = AnthropicModel("m", base_url=api.url, api_key="k", max_retries=0)
            with pytest.raises(ModelContextTooLongError) as info:
                model.complete([torpor.agents.models.Message.user("hi")])
        if reply.status == 400:
            assert (info.value.limit, info.value.sent) == (3000, 4100)
    # Another 400 stays a plain request error.
    with loopback("openai", lambda body: Err(400, "invalid tool schema")) as api:
        model = OpenAIChatModel("m", base_url=api.url, api_key="k", max_retries=0)
        with pytest.raises(torpor.agents.models.ModelRequestError) as plain:
            model.complete([torpor.agents.models.Message.user("hi")])
        assert not isinstance(plain.value, ModelContextTooLongError)


CHILD = """
import sys
sys.path.insert(0, {tests!r})
import torpor
from test_memory_overflow import make_agent
agent = make_agent({name!r}, "openai", {url!r})
with torpor.Runtime({store!r}) as rt:
    rt.run(agent, {{}}, run_id="killed", scope="killed")
print("finished")
"""


@pytest.mark.slow
def test_killed_after_the_overflow_step_resumes_to_the_uninterrupted_record(
    store_url: str, tmp_path: Path
) -> None:
    name = "test.overflow.kill"
    with loopback("openai", responder("openai")) as api:
        agent = make_agent(name, "openai", api.url)
        with torpor.Runtime(store_url) as rt:
            rt.run(agent, {}, run_id="straight", scope="straight")
        code = CHILD.format(
            tests=str(Path(__file__).parent), name=name, url=api.url, store=store_url
        )
        env = {"TORPOR_FAULTS": "crash:memory.overflow@1"}
        proc = run_python(code, cwd=tmp_path, env=env, timeout=120)
        assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
        before = len(api.requests)
        with torpor.Runtime(store_url) as rt:
            assert rt.resume("killed").outcome == "succeeded_with_warnings"
        # The resumed run did not send the refused context again: the retry went first.
        assert all(_size(r.body) <= WINDOW_CHARS for r in api.requests[before:][:1])
    client = torpor.Client(store_url)
    for etype in ("context_built", "context_compacted", "model_called", "warning_recorded"):
        a = [
            e.payload.model_dump(mode="json") for e in client.events("straight") if e.type == etype
        ]
        b = [e.payload.model_dump(mode="json") for e in client.events("killed") if e.type == etype]
        assert len(a) == len(b), (etype, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert x == y, (etype, i, x, y)
