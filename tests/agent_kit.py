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
import re
import socket
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


class DropStream(Exception):
    """Raised by a :attr:`LoopbackAPI.gate`: the server drops the connection mid-stream."""


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


def pieces(text: str | None) -> list[str]:
    """A reply's text in the pieces a stream sends: each word with the spaces after it."""
    return re.findall(r"\S+\s*|\s+", text or "")


def openai_events(
    reply: dict[str, Any], body: dict[str, Any]
) -> list[tuple[str | None, Any, bool]]:
    """A ``chat.completion`` body as the stream of ``chat.completion.chunk`` s the API sends
    for ``stream: true``: the role, the content piece by piece, each tool call whole, the
    finish reason, the usage (with ``stream_options.include_usage``), ``[DONE]``."""
    choice = reply["choices"][0]
    msg = choice["message"]
    base = {k: reply[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        c = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**base, "choices": [c]}

    out: list[tuple[str | None, Any, bool]] = [
        (None, chunk({"role": "assistant", "content": ""}), False)
    ]
    out += [(None, chunk({"content": p}), True) for p in pieces(msg.get("content"))]
    for i, tc in enumerate(msg.get("tool_calls") or []):
        out.append((None, chunk({"tool_calls": [{"index": i, **tc}]}), False))
    out.append((None, chunk({}, choice["finish_reason"]), False))
    if (body.get("stream_options") or {}).get("include_usage"):
        out.append((None, {**base, "choices": [], "usage": reply["usage"]}, False))
    out.append((None, "[DONE]", False))
    return out


def anthropic_events(reply: dict[str, Any]) -> list[tuple[str | None, Any, bool]]:
    """A Messages API body as the server-sent events the API sends for ``stream: true``."""
    start = {**reply, "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": reply["usage"]["input_tokens"], "output_tokens": 1}
    out: list[tuple[str | None, Any, bool]] = [
        ("message_start", {"type": "message_start", "message": start}, False)
    ]
    for i, block in enumerate(reply["content"]):
        if block["type"] == "text":
            first = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
        else:
            first = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        out.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": first},
                False,
            )
        )
        for d in deltas:
            ev = {"type": "content_block_delta", "index": i, "delta": d}
            out.append(("content_block_delta", ev, d["type"] == "text_delta"))
        out.append(("content_block_stop", {"type": "content_block_stop", "index": i}, False))
    delta = {"stop_reason": reply["stop_reason"], "stop_sequence": None}
    usage = {"output_tokens": reply["usage"]["output_tokens"]}
    out.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}, False))
    out.append(("message_stop", {"type": "message_stop"}, False))
    return out


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
        #: A request with ``"stream": true`` is answered with server-sent events (the reply's
        #: text in word-sized pieces): ``gate(i)`` runs before piece ``i`` is sent (a test
        #: holds the stream there), ``piece_delay_s`` between pieces.
        self.gate: Callable[[int], None] | None = None
        self.piece_delay_s = 0.0
        #: Pieces sent so far, over every streamed answer.
        self.pieces_sent = 0
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
                if isinstance(body, dict) and body.get("stream"):
                    events = (
                        openai_events(reply, body)
                        if api.flavour == "openai"
                        else anthropic_events(reply)
                    )
                    self._send_events(events)
                    return
                self._send(200, reply, {})

            def _send_events(self, events: list[tuple[str | None, Any, bool]]) -> None:
                """Chunked ``text/event-stream``; an event flagged as a piece waits for the
                gate first."""
                try:
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    for name, data, piece in events:
                        if piece:
                            if api.gate is not None:
                                api.gate(api.pieces_sent)
                            if api.piece_delay_s:
                                time.sleep(api.piece_delay_s)
                        text = data if isinstance(data, str) else json.dumps(data)
                        raw = (f"event: {name}\n" if name else "") + f"data: {text}\n\n"
                        chunk = raw.encode()
                        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                        self.wfile.flush()
                        if piece:
                            with api.lock:
                                api.pieces_sent += 1
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except DropStream:  # the connection breaks mid-stream
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                except (BrokenPipeError, ConnectionResetError):
                    pass

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
