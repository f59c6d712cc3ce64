"""Loopback model servers for the adapter and agent tests (tests/test_models*.py,
tests/test_agent*.py).

:class:`LoopbackAPI` is a real HTTP server on 127.0.0.1 implementing the documented wire format
of the OpenAI Chat Completions API (``POST /v1/chat/completions``) and of Anthropic's Messages
API (``POST /v1/messages``). It checks each request's shape the way the real services refuse a
malformed one (400 with the provider's error body), records every request, and answers from a
*responder*: a function of the request body returning a reply, or an :class:`Err` (status,
headers, delay) — so tests cover tool calls, usage, errors, rate limits and timeouts over real
HTTP through the official SDKs.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Err:
    """An error answer: HTTP ``status`` with the provider's error body; ``delay`` seconds first."""

    status: int
    message: str = "error"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    #: The error's ``code`` (OpenAI: ``context_length_exceeded``) or ``type`` (Anthropic).
    code: str | None = None


@dataclass
class Slow:
    """Answer ``reply`` after ``delay`` seconds (a timeout test)."""

    delay: float
    reply: Any = None


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: Any
    at: float


# ------------------------------------------------------------------ shape checks


def openai_problems(path: str, headers: dict[str, str], body: Any) -> list[str]:
    """What the Chat Completions API would refuse in this request."""
    out = []
    if path != "/v1/chat/completions":
        out.append(f"unknown path {path}")
    if not headers.get("authorization", "").startswith("Bearer "):
        out.append("missing bearer token")
    if not isinstance(body, dict):
        return [*out, "body is not a JSON object"]
    if not isinstance(body.get("model"), str):
        out.append("model is required")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return [*out, "messages must be a non-empty array"]
    open_calls: list[str] = []
    for i, m in enumerate(msgs):
        role = m.get("role")
        if role not in ("system", "user", "assistant", "tool", "developer"):
            out.append(f"messages[{i}].role {role!r} is invalid")
        if role == "tool":
            if m.get("tool_call_id") not in open_calls:
                out.append(f"messages[{i}] answers an unknown tool_call_id")
            else:
                open_calls.remove(m["tool_call_id"])
            if not isinstance(m.get("content"), str):
                out.append(f"messages[{i}].content must be a string")
            continue
        if open_calls:
            out.append(
                "an assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id' ({open_calls})"
            )
            open_calls = []
        if role == "assistant":
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                if c.get("type") != "function" or not c.get("id") or not fn.get("name"):
                    out.append(f"messages[{i}].tool_calls entry malformed")
                if not isinstance(fn.get("arguments"), str):
                    out.append(f"messages[{i}].tool_calls arguments must be a JSON string")
                open_calls.append(c.get("id"))
            if m.get("content") is None and not m.get("tool_calls"):
                out.append(f"messages[{i}] has neither content nor tool_calls")
        elif not isinstance(m.get("content"), str):
            out.append(f"messages[{i}].content must be a string")
    for t in body.get("tools") or []:
        fn = t.get("function") or {}
        if t.get("type") != "function" or not fn.get("name"):
            out.append("tools entries must be {type: function, function: {name, parameters}}")
        if fn.get("parameters", {}).get("type") != "object":
            out.append(f"tool {fn.get('name')} parameters must be an object schema")
    return out


def anthropic_problems(path: str, headers: dict[str, str], body: Any) -> list[str]:
    """What the Messages API would refuse in this request."""
    out = []
    if path != "/v1/messages":
        out.append(f"unknown path {path}")
    if not headers.get("x-api-key"):
        out.append("missing x-api-key")
    if not headers.get("anthropic-version"):
        out.append("missing anthropic-version")
    if not isinstance(body, dict):
        return [*out, "body is not a JSON object"]
    if not isinstance(body.get("model"), str):
        out.append("model: Field required")
    if not isinstance(body.get("max_tokens"), int):
        out.append("max_tokens: Field required")
    if "system" in body and not isinstance(body["system"], str | list):
        out.append("system must be a string or blocks")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return [*out, "messages: at least one message is required"]
    expect = "user"
    pending_uses: list[str] = []
    for i, m in enumerate(msgs):
        if m.get("role") != expect:
            out.append(f"messages[{i}]: roles must alternate user/assistant, starting with user")
        expect = "assistant" if m.get("role") == "user" else "user"
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            out.append(f"messages[{i}].content must be a string or a list")
            continue
        if m.get("role") == "user":
            answered = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
            if sorted(answered) != sorted(pending_uses):
                out.append(
                    f"messages[{i}]: tool_use ids {pending_uses} need tool_result blocks "
                    f"immediately after (got {answered})"
                )
            pending_uses = []
        for b in blocks:
            t = b.get("type")
            if t == "tool_use":
                if m.get("role") != "assistant" or not isinstance(b.get("input"), dict):
                    out.append(f"messages[{i}]: malformed tool_use block")
                pending_uses.append(b.get("id"))
            elif t == "tool_result":
                if m.get("role") != "user":
                    out.append(f"messages[{i}]: tool_result outside a user message")
            elif t == "text":
                if not isinstance(b.get("text"), str) or not b["text"]:
                    out.append(f"messages[{i}]: text blocks must be non-empty")
            else:
                out.append(f"messages[{i}]: unknown block type {t!r}")
    for t in body.get("tools") or []:
        if not t.get("name") or (t.get("input_schema") or {}).get("type") != "object":
            out.append("tools entries need name and an object input_schema")
    return out


# ------------------------------------------------------------------ replies


def openai_reply(
    content: str | None = None,
    tool_calls: list[tuple[str, str, Any]] = (),  # type: ignore[assignment]
    *,
    usage: tuple[int, int] = (12, 5),
    model: str = "loop-1",
) -> dict[str, Any]:
    """A ``chat.completion`` body. Tool call arguments that are not a str are JSON-encoded."""
    calls = [
        {
            "id": cid,
            "type": "function",
            "function": {"name": name, "arguments": a if isinstance(a, str) else json.dumps(a)},
        }
        for cid, name, a in tool_calls
    ]
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = calls
    return {
        "id": "chatcmpl-loop",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": msg,
                "logprobs": None,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        },
    }


def anthropic_reply(
    text: str | None = None,
    tool_uses: list[tuple[str, str, dict[str, Any]]] = (),  # type: ignore[assignment]
    *,
    usage: tuple[int, int] = (20, 7),
    model: str = "claude-loop",
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    for tid, name, args in tool_uses:
        content.append({"type": "tool_use", "id": tid, "name": name, "input": args})
    return {
        "id": "msg_loop",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if tool_uses else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def _error_body(flavour: str, status: int, message: str, code: str | None = None) -> dict[str, Any]:
    if flavour == "anthropic":
        kind = {
            429: "rate_limit_error",
            529: "overloaded_error",
            400: "invalid_request_error",
            413: "request_too_large",
        }
        return {
            "type": "error",
            "error": {"type": code or kind.get(status, "api_error"), "message": message},
        }
    kind = {429: "rate_limit_exceeded", 400: "invalid_request_error"}
    return {"error": {"message": message, "type": kind.get(status, "server_error"), "code": code}}


# ------------------------------------------------------------------ the server


class LoopbackAPI:
    """``LoopbackAPI("openai", responder)``; ``url`` is the SDK's base URL."""

    def __init__(self, flavour: str, responder: Callable[[Any], Any]):
        assert flavour in ("openai", "anthropic")
        self.flavour = flavour
        self.responder = responder
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n)
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                with api.lock:
                    api.requests.append(Request(self.path, headers, body, time.monotonic()))
                check = openai_problems if api.flavour == "openai" else anthropic_problems
                problems = check(self.path, headers, body)
                if problems:
                    self._send(400, _error_body(api.flavour, 400, "; ".join(problems)), {})
                    return
                reply = api.responder(body)
                if isinstance(reply, Slow):
                    time.sleep(reply.delay)
                    reply = reply.reply
                if isinstance(reply, Err):
                    time.sleep(reply.delay)
                    self._send(
                        reply.status,
                        _error_body(api.flavour, reply.status, reply.message, reply.code),
                        reply.headers,
                    )
                    return
                self._send(200, reply, {})

            def _send(self, status: int, body: Any, headers: dict[str, str]) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        base = f"http://{host}:{port}"
        return f"{base}/v1" if self.flavour == "openai" else base

    def start(self) -> LoopbackAPI:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextmanager
def loopback(flavour: str, responder: Callable[[Any], Any]) -> Iterator[LoopbackAPI]:
    api = LoopbackAPI(flavour, responder).start()
    try:
        yield api
    finally:
        api.stop()


def turn_of(body: Any) -> int:
    """How many assistant messages the request holds: the conversation's turn."""
    return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
