"""Model adapters stream (issue 40): over real HTTP against the loopback servers of
tests/agent_kit.py answering ``stream: true`` with each API's server-sent events, a model
call's reply reaches the run's ``reply`` stream piece by piece, as one part that ends when
the call returns; the recorded response is the whole reply (the same as without
streaming), tool calls and usage included; a call that raises mid-stream is retracted; a
secret split across two deltas is never stored."""

from __future__ import annotations

import platform
from typing import Any

import pytest

import torpor
from agent_kit import DropStream, anthropic_reply, loopback, openai_reply, pieces
from torpor.agents.models import (
    AnthropicModel,
    Message,
    ModelError,
    OpenAIChatModel,
    call_model,
)
from torpor.streams import fold, shown

# The SDKs' platform headers ask `uname -p` once per process: asked here, at import, so no
# test of the fast tier is seen starting that process.
platform.processor()

TEXT = "Torpor is a state of lowered activity, a sleep that keeps what matters."


def _model(flavour: str, url: str, **kw: Any) -> Any:
    if flavour == "openai":
        return OpenAIChatModel("loop-1", base_url=url, api_key="k", max_retries=0, **kw)
    return AnthropicModel("claude-loop", base_url=url, api_key="k", max_retries=0, **kw)


def _reply(flavour: str, text: str, tool: bool = False) -> dict[str, Any]:
    if flavour == "openai":
        return openai_reply(text, [("c1", "lookup", {"word": "x"})] if tool else [])
    return anthropic_reply(text, [("c1", "lookup", {"word": "x"})] if tool else [])


@torpor.workflow(name="streams.ask")
def ask(run: torpor.Run, spec: dict[str, Any]) -> dict[str, Any]:
    model = _model(spec["flavour"], spec["url"], stream="reply")
    resp = call_model(run, model, [Message.user("what is torpor?")])
    return {
        "text": resp.message.content,
        "calls": [c.name for c in resp.message.tool_calls],
        "out": resp.usage.output_tokens,
    }


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_a_streamed_call_fills_the_reply_stream_and_records_the_whole_reply(
    flavour: str, store_url: str
) -> None:
    with (
        loopback(flavour, lambda body: _reply(flavour, TEXT, tool=True)) as api,
        torpor.Runtime(store_url) as rt,
    ):
        h = rt.run("streams.ask", {"flavour": flavour, "url": api.url}, run_id="ask-1")
        assert h.outcome == "succeeded", h
        assert h.result["text"] == TEXT
        assert h.result["calls"] == ["lookup"]
        assert h.result["out"] > 0
        items = list(torpor.Client(rt.store).stream("ask-1"))
    assert api.requests[0].body["stream"] is True
    assert api.pieces_sent == len(pieces(TEXT))
    (part,) = fold(items)
    assert part.part == "model@" + part.part.split("@")[1] and part.state == "ended"
    assert part.text == TEXT and shown(items) == TEXT
    assert [i.offset for i in items] == list(range(1, len(items) + 1))


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_a_call_that_fails_mid_stream_is_retracted(flavour: str, db_url: str) -> None:
    def gate(i: int) -> None:
        if i == 3:
            raise DropStream()

    @torpor.workflow(name=f"streams.drop.{flavour}")
    def drop(run: torpor.Run, url: str) -> str:
        try:
            call_model(run, _model(flavour, url, stream="reply"), [Message.user("hi")])
        except ModelError as exc:
            return f"failed: {type(exc).__name__}"
        return "answered"

    with loopback(flavour, lambda body: _reply(flavour, TEXT)) as api:
        api.gate = gate
        with torpor.Runtime(db_url) as rt:
            h = rt.run(f"streams.drop.{flavour}", api.url, run_id="drop-1")
            items = list(torpor.Client(rt.store).stream("drop-1"))
    assert str(h.result).startswith("failed"), h.result
    (part,) = fold(items)
    assert part.state == "retracted" and TEXT.startswith(part.text)
    assert shown(items) == ""


def test_a_secret_split_across_two_deltas_is_never_stored(db_url: str) -> None:
    secret = "sk-live-4f9a8b7c6d5e"
    text = f"The key is {secret} done."

    @torpor.workflow(name="streams.secret")
    def secretive(run: torpor.Run, url: str) -> str:
        model = _model("openai", url, stream="reply")
        original = model.complete_stream

        def split(messages: Any, tools: Any, on_text: Any) -> Any:
            # cut every piece in two, so the secret is split across two deltas
            def halves(t: str) -> None:
                on_text(t[: len(t) // 2])
                on_text(t[len(t) // 2 :])

            return original(messages, tools, halves)

        model.complete_stream = split  # type: ignore[method-assign]
        return call_model(run, model, [Message.user("hi")]).message.content

    torpor.scrub.remember(secret, "[secret:test]")
    with loopback("openai", lambda body: openai_reply(text)) as api, torpor.Runtime(db_url) as rt:
        h = rt.run("streams.secret", api.url, run_id="sec-1")
        rows = rt.store.stream_items("sec-1", "reply")
    assert h.outcome == "succeeded"
    stored = "".join(r.data for r in rows)
    # Its first half arrived alone in a delta: held back, then scrubbed with the second.
    assert secret not in stored and secret[:10] not in stored
    assert shown([]) == "" and "The key is [secret:test] done." in stored.replace('""', "")
