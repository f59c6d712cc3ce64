"""Tools from MCP servers, recorded by the run that uses them (issue 41).

:func:`toolset` makes a :class:`~torpor.Tools` registry of the tools the servers list, each
under its recovery policy (:mod:`torpor.mcp.tools`); tools written in code may be added to it
as to any registry. It connects lazily: at the start of an agent's run (or on
:meth:`Toolset.refresh`), not at import.

At the start of each execution of a run (:meth:`Toolset.prepare`, called by the agent before
anything is replayed):

- **the tool list is recorded** — step ``mcp:tools:<server>``: every tool's name,
  description, input schema and annotations, and their digest. A resumed run finds its
  recorded list and compares it with what the server lists now: another list (an upgrade
  added, removed or changed a tool) is a needs-attention detail naming the difference, like
  a version mismatch (:class:`~torpor.errors.McpToolsChangedError`); the run stays
  resumable and continues once the server offers the recorded list again. A server that
  cannot be reached leaves the run resumable too, with the reason where people look.
- **the session's setup is recorded** — step ``mcp:setup:<server>``: the setup calls made
  on the session (:class:`~torpor.mcp.Server`'s ``setup``) and their answers. Each new
  session — after a restart of this process or of the server — replays exactly those calls
  before anything else. A run whose server is ``stateful`` without setup calls, resumed on
  a session other than the one it started on, cannot continue there: the state it relied
  on is gone and cannot be re-created, so each new call of it to that server is refused
  unsent (McpSessionLostError, recorded as the call's failure saying so).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from .. import serde
from ..agents.tools import Tools
from ..errors import McpError, McpToolsChangedError
from ..history import AttentionNeeded, Policy
from .connection import Connection, Server
from .tools import LOST, Override, build

#: What of a listed tool a run records (and a resumed run compares).
RECORDED_FIELDS = ("name", "description", "inputSchema", "annotations")


def toolset(
    *servers: Server,
    overrides: Mapping[str, Override] | None = None,
    prefix: bool = False,
) -> Toolset:
    """The tools of ``servers`` as one registry (see the module docstring). ``overrides``:
    per tool name (the server's name for it) an :class:`~torpor.mcp.Override`. ``prefix``:
    register each tool as ``<server>_<tool>`` (two servers may offer the same name)."""
    return Toolset(servers, overrides or {}, prefix)


class Toolset(Tools):
    """A :class:`~torpor.Tools` registry whose tools come from MCP servers (see
    :func:`toolset`). ``connections``: server name -> this process's
    :class:`~torpor.mcp.connection.Connection`."""

    def __init__(
        self, servers: tuple[Server, ...], overrides: Mapping[str, Override], prefix: bool
    ):
        super().__init__()
        names = [s.name for s in servers]
        if len(set(names)) != len(names):
            raise McpError(f"two MCP servers with the same name in {names}")
        self.servers = {s.name: s for s in servers}
        self.connections = {s.name: Connection(s) for s in servers}
        self.overrides = dict(overrides)
        self.prefix = prefix
        self._listed: dict[str, list[dict[str, Any]]] = {}
        self._setup: dict[str, list[dict[str, Any]]] = {}
        #: server -> (session number, the runs that began on that session)
        self._session_runs: dict[str, tuple[int, set[str]]] = {}
        self._mcp_tools: set[str] = set()
        self._refresh_lock = threading.Lock()

    # ------------------------------------------------------------ listing

    def refresh(self, server: str | None = None) -> dict[str, list[dict[str, Any]]]:
        """List the tools of every server (or of ``server``) now and register them, replacing
        those listed before; returns server -> the recorded fields of its tools."""
        with self._refresh_lock:
            for name in [server] if server else list(self.servers):
                conn = self.connections[name]
                listed = [{k: t[k] for k in RECORDED_FIELDS if k in t} for t in conn.list_tools()]
                self._listed[name] = listed
                self._register(name, listed)
            return dict(self._listed)

    def _register(self, server: str, listed: list[dict[str, Any]]) -> None:
        conn = self.connections[server]
        for t in listed:
            name = f"{server}_{t['name']}" if self.prefix else str(t["name"])
            if name in self and name not in self._mcp_tools:
                raise McpError(
                    f"MCP server {server!r}: a tool named {name!r} is already registered"
                )
            tool = build(conn, t, name, self.overrides.get(str(t["name"])))
            self._tools[name] = tool
            self._mcp_tools.add(name)

    def close(self) -> None:
        """Close every connection (a stdio server's process exits)."""
        for c in self.connections.values():
            c.close()

    # ------------------------------------------------------------ a run's record

    def prepare(self, run: Any) -> None:
        """Record (first execution) or check (later ones) each server's tool list and session
        setup for ``run`` (see the module docstring). Raises McpToolsChangedError (the run
        needs attention) or ends the run ``failed`` (RunStopped) when a stateful server's
        session is gone."""
        LOST.set(frozenset())
        for name, server in self.servers.items():
            conn = self.connections[name]
            try:  # (listed again at each execution: the server may have been upgraded)
                live: dict[str, Any] = {"tools": self.refresh(name)[name]}
            except McpError as exc:
                why = f"{exc}; the run is left as it is: resume it when the server answers"
                _note_attention(run, why)
                raise McpToolsChangedError(why) from None
            live["digest"] = serde.hash_value(live["tools"])
            began = run.journal.recorded(f"mcp:tools:{name}", Policy.READ) is not None
            recorded = run.step(
                f"mcp:tools:{name}", lambda live=live: live, purpose=f"tools of MCP server {name}"
            )
            if recorded["digest"] != live["digest"]:
                why = f"MCP server {name!r}: " + changed(recorded["tools"], live["tools"])
                _note_attention(run, why)
                raise McpToolsChangedError(why)
            self._check_session(run, name, server, conn, began)

    def _check_session(
        self, run: Any, name: str, server: Server, conn: Connection, began: bool
    ) -> None:
        session, runs = self._session_runs.get(name, (-1, set()))
        if session != conn.sessions:
            session, runs = conn.sessions, set()
            self._session_runs[name] = (session, runs)
        if began and run.run_id not in runs and server.stateful and not server.setup:
            LOST.set(LOST.get() | {name})  # its new calls are refused (McpSessionLostError)
            return
        runs.add(run.run_id)
        if server.setup:
            declared = [[c, a] for c, a in server.setup]
            rec = run.step(
                f"mcp:setup:{name}", lambda: declared, purpose=f"session setup of MCP server {name}"
            )
            if serde.hash_value(rec) != serde.hash_value(declared):
                why = (
                    f"MCP server {name!r}: the recorded session setup {rec} is not the declared "
                    f"one {declared}: the session the run relies on cannot be replayed as it was"
                )
                _note_attention(run, why)
                raise McpToolsChangedError(why)


def changed(recorded: list[dict[str, Any]], live: list[dict[str, Any]]) -> str:
    """What differs between two tool lists, in one line: tools added, removed, changed."""
    before = {t["name"]: t for t in recorded}
    now = {t["name"]: t for t in live}
    parts = []
    added = sorted(set(now) - set(before))
    removed = sorted(set(before) - set(now))
    diff = sorted(n for n in set(now) & set(before) if now[n] != before[n])
    if added:
        parts.append(f"added {', '.join(added)}")
    if removed:
        parts.append(f"removed {', '.join(removed)}")
    if diff:
        parts.append(f"changed {', '.join(diff)}")
    return (
        "its tool list changed since the run recorded it ("
        + ("; ".join(parts) or "reordered")
        + "): the run plans against the recorded tools, so it waits until the server offers "
        "them again (or start a new run)"
    )


def _note_attention(run: Any, detail: str) -> None:
    """Record why the run cannot proceed, where ``ls`` and ``show`` look (once)."""
    j = run.journal
    if j.state.attention == detail[:4000]:
        return
    j.append(AttentionNeeded(detail=detail[:4000], by=j.lease.owner), by_code=False, lease=False)
