"""Model adapters over real HTTP against loopback servers implementing each API's documented
wire format (tests/agent_kit.py): request shape checked by the server (a malformed request
gets the provider's 400), tool calls and usage parsed, errors, rate limits (429 +
retry-after) and timeouts mapped to torpor's model errors."""

from __future__ import annotations

from typing import Any

import pytest

from agent_kit import Err, Slow, anthropic_reply, loopback, openai_reply, turn_of
from torpor.agents.models import (
    AnthropicModel,
    Message,
    ModelRateLimitedError,
    ModelRequestError,
    ModelTimeoutError,
    ModelUnavailableError,
    OpenAIChatModel,
    Price,
    ToolCall,
    ToolSpec,
)

TOOLS = [
    ToolSpec(
        name="lookup",
        description="Look a word up.",
        parameters={
            "type": "object",
            "properties": {"word": {"type": "string"}},
            "required": ["word"],
        },
    )
]

#: A conversation with one finished tool round trip: the adapters must render it correctly.
HISTORY = [
    Message.system("Be brief."),
    Message.user("Define 'torpor'."),
    Message(
        role="assistant",
        content="Looking it up.",
        tool_calls=[ToolCall(id="c1", name="lookup", arguments={"word": "torpor"})],
    ),
    Message.tool_result("c1", '{"meaning": "a state of inactivity"}'),
]


def test_openai_tool_calls_usage_cost_and_request_shape() -> None:
    def responder(body: dict) -> dict:
        if turn_of(body) == 1:
            return openai_reply("It means inactivity.", usage=(40, 6))
        return openai_reply(None, [("call_9", "lookup", {"word": "sloth"})], usage=(30, 9))

    with loopback("openai", responder) as api:
        model = OpenAIChatModel(
            "loop-1",
            base_url=api.url,
            api_key="sk-test",
            max_retries=0,
            price=Price(input_per_mtok=1.0, output_per_mtok=2.0),
        )
        first = model.complete(HISTORY[:2], TOOLS)
        second = model.complete(HISTORY, TOOLS)
    assert first.message.tool_calls == [
        ToolCall(id="call_9", name="lookup", arguments={"word": "sloth"})
    ]
    assert (first.usage.input_tokens, first.usage.output_tokens) == (30, 9)
    assert first.stop_reason == "tool_calls" and first.model == "loop-1"
    assert first.cost_usd == pytest.approx((30 * 1.0 + 9 * 2.0) / 1e6)
    assert second.message.content == "It means inactivity." and not second.message.tool_calls
    req = api.requests[1]
    assert req.headers["authorization"] == "Bearer sk-test"
    body = req.body
    assert body["model"] == "loop-1"
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"]
    call = body["messages"][2]["tool_calls"][0]
    assert call == {
        "id": "c1",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"word": "torpor"}'},
    }
    assert body["messages"][3] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": '{"meaning": "a state of inactivity"}',
    }
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look a word up.",
                "parameters": TOOLS[0].parameters,
            },
        }
    ]


def test_openai_arguments_that_are_not_json_are_kept_raw() -> None:
    with loopback("openai", lambda b: openai_reply(None, [("c", "lookup", "{word: oops")])) as api:
        resp = OpenAIChatModel("m", base_url=api.url, max_retries=0).complete(HISTORY[:2], TOOLS)
    (call,) = resp.message.tool_calls
    assert call.arguments == {} and call.raw_arguments == "{word: oops"


def test_openai_rate_limit_honours_retry_after_then_succeeds() -> None:
    answers = [Err(429, "Rate limit reached", {"retry-after": "0.4"}), openai_reply("ok")]
    with loopback("openai", lambda b: answers.pop(0)) as api:
        resp = OpenAIChatModel("m", base_url=api.url, max_retries=2).complete(HISTORY[:2])
    assert resp.message.content == "ok"
    assert len(api.requests) == 2
    assert api.requests[1].at - api.requests[0].at >= 0.35  # waited as the server asked
    assert api.requests[1].headers.get("x-stainless-retry-count") == "1"


def test_openai_rate_limit_after_retries_is_a_typed_error() -> None:
    answer = Err(429, "Rate limit reached for requests", {"retry-after": "7"})
    with loopback("openai", lambda b: answer) as api:
        model = OpenAIChatModel("m", base_url=api.url, max_retries=0)
        with pytest.raises(ModelRateLimitedError) as info:
            model.complete(HISTORY[:2])
    assert info.value.retry_after == 7.0 and info.value.transient
    assert "Rate limit reached" in str(info.value)


def test_openai_errors_are_typed() -> None:
    answers = [Err(400, "context_length_exceeded"), Err(401, "bad key"), Err(503, "down")]
    with loopback("openai", lambda b: answers.pop(0)) as api:
        model = OpenAIChatModel("m", base_url=api.url, max_retries=0)
        with pytest.raises(ModelRequestError, match="context_length_exceeded") as bad:
            model.complete(HISTORY[:2])
        with pytest.raises(ModelRequestError, match="bad key"):
            model.complete(HISTORY[:2])
        with pytest.raises(ModelUnavailableError) as down:
            model.complete(HISTORY[:2])
    assert bad.value.status == 400 and not bad.value.transient
    assert down.value.status == 503 and down.value.transient


def test_openai_timeout() -> None:
    with loopback("openai", lambda b: Slow(3.0, openai_reply("late"))) as api:
        model = OpenAIChatModel("m", base_url=api.url, timeout=0.3, max_retries=0)
        with pytest.raises(ModelTimeoutError):
            model.complete(HISTORY[:2])


def test_openai_malformed_history_is_refused_by_the_server() -> None:
    """The loopback server enforces the wire rules: a tool call never answered is a 400."""
    with loopback("openai", lambda b: openai_reply("ok")) as api:
        model = OpenAIChatModel("m", base_url=api.url, max_retries=0)
        with pytest.raises(ModelRequestError, match="must be followed by tool messages"):
            model.complete([*HISTORY[:3], Message.user("and?")])


def test_anthropic_tool_use_usage_and_request_shape() -> None:
    def responder(body: dict) -> dict:
        if turn_of(body) == 1:
            return anthropic_reply("It means inactivity.", usage=(50, 8))
        return anthropic_reply("Let me check.", [("toolu_1", "lookup", {"word": "sloth"})])

    with loopback("anthropic", responder) as api:
        model = AnthropicModel("claude-loop", base_url=api.url, api_key="ak-test", max_retries=0)
        first = model.complete(HISTORY[:2], TOOLS)
        second = model.complete(HISTORY, TOOLS)
    assert first.message.content == "Let me check."
    assert first.message.tool_calls == [
        ToolCall(id="toolu_1", name="lookup", arguments={"word": "sloth"})
    ]
    assert (first.usage.input_tokens, first.usage.output_tokens) == (20, 7)
    assert first.stop_reason == "tool_use" and first.cost_usd is None
    assert second.message.content == "It means inactivity."
    assert second.usage.total == 58
    req = api.requests[1]
    assert req.headers["x-api-key"] == "ak-test" and req.headers["anthropic-version"]
    body = req.body
    assert body["system"] == "Be brief." and body["max_tokens"] == 1024
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "Looking it up."},
        {"type": "tool_use", "id": "c1", "name": "lookup", "input": {"word": "torpor"}},
    ]
    assert body["messages"][2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "c1",
            "content": '{"meaning": "a state of inactivity"}',
        }
    ]
    assert body["tools"] == [
        {"name": "lookup", "description": "Look a word up.", "input_schema": TOOLS[0].parameters}
    ]


def test_anthropic_results_of_parallel_calls_share_one_user_turn() -> None:
    history = [
        Message.user("Compare."),
        Message(
            role="assistant",
            tool_calls=[
                ToolCall(id="a", name="lookup", arguments={"word": "x"}),
                ToolCall(id="b", name="lookup", arguments={"word": "y"}),
            ],
        ),
        Message.tool_result("a", "1"),
        Message.tool_result("b", "boom", is_error=True),
    ]
    with loopback("anthropic", lambda b: anthropic_reply("same")) as api:
        AnthropicModel("c", base_url=api.url, max_retries=0).complete(history, TOOLS)
    last = api.requests[0].body["messages"][-1]
    assert last["role"] == "user"
    assert [(b["tool_use_id"], b.get("is_error", False)) for b in last["content"]] == [
        ("a", False),
        ("b", True),
    ]


def test_anthropic_rate_limit_retry_after_overload_and_timeout() -> None:
    answers = [Err(429, "slow down", {"retry-after": "0.3"}), anthropic_reply("ok")]
    with loopback("anthropic", lambda b: answers.pop(0)) as api:
        ok = AnthropicModel("c", base_url=api.url, max_retries=1).complete(HISTORY[:2])
    assert ok.message.content == "ok" and len(api.requests) == 2
    assert api.requests[1].at - api.requests[0].at >= 0.25

    def fails(answer: object, exc: type[Exception], timeout: float = 60) -> Any:
        with loopback("anthropic", lambda b: answer) as api, pytest.raises(exc) as info:
            model = AnthropicModel("c", base_url=api.url, max_retries=0, timeout=timeout)
            model.complete(HISTORY[:2])
        return info

    info = fails(Err(429, "slow down", {"retry-after": "12"}), ModelRateLimitedError)
    assert info.value.retry_after == 12.0
    over = fails(Err(529, "Overloaded"), ModelUnavailableError)
    assert over.value.status == 529 and "Overloaded" in str(over.value)
    bad = fails(Err(400, "max_tokens: too large"), ModelRequestError)
    assert "max_tokens" in str(bad.value)
    fails(Slow(3.0, anthropic_reply("late")), ModelTimeoutError, timeout=0.3)
