"""One MCP server and this process's connection to it, on the official ``mcp`` SDK.

A :class:`Server` says how to reach a server: a command to run (stdio: the process is the
session) or a streamable-HTTP URL (a session per connection, where the server keeps one). A
:class:`Connection` holds one SDK client open in a background thread with its own event loop
(the SDK is async and its client must be entered and left in one task), so sync tool calls
of an agent can use it; calls are sent one at a time.

A session is **re-established** when it broke (the server process died, the HTTP server was
restarted): the next call opens a new one first, and before anything else replays the
session's *setup calls* — the recorded calls that re-create the state the server keeps per
session (:mod:`torpor.mcp.toolset`). A session whose state cannot be re-created (declared
``stateful`` without setup calls, or a setup call that fails on replay) refuses every call
(:class:`~torpor.errors.McpSessionLostError`): nothing is sent.

Errors (:mod:`torpor.errors`): a call that could not be sent raises McpNotSentError (nothing
happened); a connection that broke while a call was in flight raises McpConnectionError (the
server may have performed it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import McpConnectionError, McpError, McpNotSentError, McpSessionLostError

#: A setup call replayed on each new session: (tool name, arguments).
SetupCall = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Server:
    """An MCP server: ``command`` + ``args`` (stdio; ``env`` added to this process's, ``cwd``)
    or ``url`` (streamable HTTP). ``name`` identifies it in the run's record (step ids
    ``mcp:tools:<name>``, ``mcp:setup:<name>``; an effect's operation is its tool's registered
    name). ``trusted``: the tools' annotations are believed
    (``readOnlyHint`` makes a read; the MCP specification says clients must treat them as
    untrusted unless the server is trusted). ``stateful``: the server keeps state per session
    that the run relies on (see ``setup``). ``setup``: calls that create that state, made on
    each new session before any other call and recorded by the run. ``timeout_s``: seconds a
    request may take before it is given up, a hang guard (the session is then ended and a
    call in flight is in doubt: reconciled); None: no limit."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    trusted: bool = False
    stateful: bool = False
    setup: tuple[SetupCall, ...] = ()
    timeout_s: float | None = 300.0

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise McpError(f"MCP server {self.name!r}: give a command (stdio) or a url (HTTP)")
        if not self.name or "/" in self.name or ":" in self.name:
            raise McpError(f"MCP server name {self.name!r}: a non-empty name without '/' or ':'")

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"


def stdio(
    name: str,
    command: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    trusted: bool = False,
    stateful: bool = False,
    setup: Sequence[SetupCall] = (),
    timeout_s: float | None = 300.0,
) -> Server:
    """A server run as ``command args...`` over stdio (``sys.executable`` when ``command`` is
    ``"python"``); see :class:`Server`."""
    cmd = sys.executable if command == "python" else command
    return Server(
        name, cmd, tuple(args), env, cwd, None, trusted, stateful, _setup(setup), timeout_s
    )


def http(
    name: str,
    url: str,
    *,
    trusted: bool = False,
    stateful: bool = False,
    setup: Sequence[SetupCall] = (),
    timeout_s: float | None = 300.0,
) -> Server:
    """A server at a streamable-HTTP ``url`` (e.g. ``http://127.0.0.1:8000/mcp``); see
    :class:`Server`."""
    return Server(name, None, (), None, None, url, trusted, stateful, _setup(setup), timeout_s)


def _setup(calls: Sequence[SetupCall]) -> tuple[SetupCall, ...]:
    out = []
    for c in calls:
        if not (isinstance(c, tuple | list) and len(c) == 2 and isinstance(c[1], dict)):
            raise McpError(f"a setup call is (tool name, arguments dict), not {c!r}")
        out.append((str(c[0]), dict(c[1])))
    return tuple(out)


@dataclass
class _Request:
    kind: str  # "list" or "call"
    name: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    future: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)


class Connection:
    """This process's connection to ``server`` (see the module docstring). Each new session
    first makes the server's setup calls (``server.setup``: the toolset checks that they are
    the ones each run recorded); ``sessions`` counts the sessions opened."""

    def __init__(self, server: Server):
        self.server = server
        self.sessions = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[_Request | None] | None = None
        self._task: concurrent.futures.Future[None] | None = None
        self._broken = False

    # ------------------------------------------------------------ public, sync

    def list_tools(self) -> list[dict[str, Any]]:
        """The server's tools as JSON data (``name``, ``description``, ``inputSchema``,
        ``annotations``…, as the protocol spells them), every page."""
        return list(self._submit(_Request("list")))

    def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """Call tool ``name``: the ``CallToolResult`` as JSON data (``content``,
        ``structuredContent``, ``isError``). McpNotSentError when it was never sent,
        McpConnectionError when the connection broke while it was in flight."""
        return dict(self._submit(_Request("call", name, dict(args))))

    def close(self) -> None:
        """End the session (a stdio server's process exits) and the background thread."""
        with self._lock:
            loop, self._loop = self._loop, None
            task, self._task = self._task, None
            queue, self._queue = self._queue, None
        if loop is None:
            return
        if queue is not None and task is not None and not task.done():
            loop.call_soon_threadsafe(queue.put_nowait, None)  # (the session's end)
            with contextlib.suppress(Exception):
                task.result(timeout=10)  # a hang guard: the session's own shutdown
        loop.call_soon_threadsafe(loop.stop)

    # ------------------------------------------------------------ internals

    def _submit(self, req: _Request) -> Any:
        with self._lock:  # one request at a time, on a live session
            self._open(req.kind)
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._enqueue, req)
            try:
                return req.future.result()
            except McpError:
                raise
            except Exception as exc:
                raise McpError(f"MCP server {self.server.name!r}: {_describe(exc)}") from None

    def _open(self, kind: str) -> None:
        """A live session: the one open, or a new one with its setup calls replayed. A call
        to a ``stateful`` server without setup calls is refused once its session broke (the
        state the run relies on is gone); listing opens a new session (a new execution
        starts there, and its toolset judges the runs that began on the old one)."""
        if self._task is not None and not self._task.done():
            return
        s = self.server
        if self._broken and kind == "call" and s.stateful and not s.setup:
            raise McpSessionLostError(
                f"MCP server {s.name!r}: its session was lost and the state it kept for it "
                "cannot be re-created (stateful, no setup calls): the run cannot continue on "
                "this server"
            )
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(
                target=loop.run_forever, name=f"torpor-mcp-{s.name}", daemon=True
            ).start()
            self._loop = loop
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._task = asyncio.run_coroutine_threadsafe(self._serve(ready), self._loop)
        try:
            ready.result()
        except McpSessionLostError:
            raise
        except Exception as exc:
            raise McpNotSentError(
                f"MCP server {s.name!r} could not be reached: {_describe(exc)}"
            ) from None
        self.sessions += 1
        self._broken = False

    def _enqueue(self, req: _Request) -> None:
        """(In the loop's thread.) Hand ``req`` to the live session, or refuse it unsent when
        the session ended meanwhile (a broken connection is noticed asynchronously)."""
        if self._queue is None:
            req.future.set_exception(
                McpNotSentError(f"MCP server {self.server.name!r}: the session ended; not sent")
            )
        else:
            self._queue.put_nowait(req)

    async def _serve(self, ready: concurrent.futures.Future[None]) -> None:
        """One session: open it, replay the setup calls, then answer requests until closed or
        broken (a request in flight then gets McpConnectionError)."""
        # (The optional extra: imported only when a server is used.)
        from mcp import Client, MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        queue: asyncio.Queue[_Request | None] = asyncio.Queue()
        self._queue = queue
        current: _Request | None = None
        try:
            async with Client(self._target(), read_timeout_seconds=self.server.timeout_s) as c:
                for name, args in self.server.setup:
                    res = _jsonable(await c.call_tool(name, args))
                    if res.get("isError"):
                        raise McpSessionLostError(
                            f"MCP server {self.server.name!r}: setup call {name}({args}) "
                            f"failed on a new session: {text_of(res)[:300]}; the state the "
                            "run relies on cannot be re-created"
                        )
                ready.set_result(None)
                while True:
                    current = await queue.get()
                    if current is None:
                        return
                    try:
                        if current.kind == "list":
                            current.future.set_result(await _all_tools(c))
                        else:
                            answer = await c.call_tool(current.name, current.args)
                            current.future.set_result(_jsonable(answer))
                    except MCPError as exc:
                        if exc.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                            raise  # no answer: the session is over, the call in doubt
                        current.future.set_exception(  # the server answered an error
                            McpError(
                                f"MCP server {self.server.name!r} answered "
                                f"{current.name or 'tools/list'} with error {exc.code}: "
                                f"{str(exc)[:500]}"
                            )
                        )
                    current = None
        except BaseException as exc:
            self._broken = True
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else McpError(str(exc)))
            elif current is not None and not current.future.done():
                current.future.set_exception(
                    McpConnectionError(
                        f"MCP server {self.server.name!r}: the connection broke during "
                        f"{current.name or 'tools/list'}: {_describe(exc)}"
                    )
                )
            if not isinstance(exc, Exception):
                raise
        finally:
            self._queue = None
            while not queue.empty():
                left = queue.get_nowait()
                if left is not None and not left.future.done():
                    left.future.set_exception(
                        McpNotSentError(f"MCP server {self.server.name!r}: the session ended")
                    )

    def _target(self) -> Any:
        s = self.server
        if s.url is not None:
            return s.url
        from mcp import StdioServerParameters

        env = {**os.environ, **(s.env or {})}
        return StdioServerParameters(command=s.command or "", args=list(s.args), env=env, cwd=s.cwd)


async def _all_tools(c: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:  # (bypassing the SDK's response cache: the list is what the server says now)
        page = await c.list_tools(cursor=cursor, cache_mode="bypass")
        out.extend(_jsonable(t) for t in page.tools)
        cursor = page.next_cursor
        if not cursor:
            return out


def _jsonable(model: Any) -> dict[str, Any]:
    return dict(model.model_dump(mode="json", by_alias=True, exclude_none=True))


def text_of(result: Mapping[str, Any]) -> str:
    """The text parts of a ``CallToolResult`` (JSON data), joined."""
    return "\n".join(
        str(p.get("text", "")) for p in result.get("content", []) if p.get("type") == "text"
    )


def _describe(exc: BaseException) -> str:
    """An exception in one line; an exception group by its first leaf (the SDK's task groups
    wrap transport errors)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"[:500]
