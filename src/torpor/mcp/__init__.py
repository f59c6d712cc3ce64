"""MCP servers as durable tools (issue 41): every call recorded, effects reconciled, sessions
that survive a restart. On the official ``mcp`` SDK — ``pip install 'torpor[mcp]'``; importing
this package does not import the SDK (a server is reached only when a run uses it)::

    from torpor import mcp

    ledger = mcp.stdio("ledger", "python", "ledger_server.py", trusted=True)
    tools = mcp.toolset(ledger, overrides={"transfer": mcp.Override(lookup="find_transfer")})
    agent = torpor.Agent("payer", goal="pay the invoice", tools=tools, planner=...)

- :func:`stdio` / :func:`http` say how to reach a server (a process over stdio, or a
  streamable-HTTP URL), whether it is **trusted** (only then are its tools' annotations
  believed), and the **setup calls** that re-create the state it keeps per session;
- :func:`toolset` lists their tools as torpor tools, each under a recovery policy
  (:mod:`torpor.mcp.tools`): a trusted server's ``readOnlyHint`` tool is a ``read``, every
  other tool an ``effect`` — intent before the call, reconciled after a crash by the tool's
  ``reconcile`` or a :class:`Lookup` of the server's own, else the run is ``unresolved``;
  :class:`Override` changes that per tool;
- the tool list a run saw and its session setup are recorded (:mod:`torpor.mcp.toolset`):
  a resumed run whose server lists other tools needs attention
  (:class:`~torpor.errors.McpToolsChangedError`).

Errors are in :mod:`torpor.errors` (``McpError`` and its subclasses), re-exported here.
"""

from ..errors import (
    McpConnectionError,
    McpError,
    McpNotSentError,
    McpSessionLostError,
    McpToolsChangedError,
)
from .connection import Connection, Server, http, stdio
from .tools import Lookup, McpTool, Override
from .toolset import Toolset, toolset

__all__ = [
    "Connection",
    "Lookup",
    "McpConnectionError",
    "McpError",
    "McpNotSentError",
    "McpSessionLostError",
    "McpTool",
    "McpToolsChangedError",
    "Override",
    "Server",
    "Toolset",
    "http",
    "stdio",
    "toolset",
]
