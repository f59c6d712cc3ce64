"""An agent whose tools come from a real MCP server (``server.py`` beside this file, on the
official SDK), killed mid-call and resumed without paying twice.

The plan, by a code planner: read the balance of the account (a ``read``: the trusted
server marks it ``readOnlyHint``), transfer the amount (an effect the server deduplicates by
the engine's ``idempotency_key``; after a crash it is reconciled by the server's own
``find_transfer``), then leave a note (an effect the server gives no way to look up: a crash
while it is in flight leaves the run ``unresolved``, never sent twice).

    python -m examples.mcp_ledger                      # run it (the server over stdio)
    TORPOR_CRASH_AT=effect.called python -m examples.mcp_ledger --run-id pay-1   # killed
    python -m examples.mcp_ledger --resume pay-1       # resumed: one transfer in the ledger
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torpor
from torpor import mcp
from torpor.agents import PlanView, step

SERVER = str(Path(__file__).with_name("server.py"))
#: The per-session state the ledger keeps (the open book), re-created on every new session.
SETUP = [("open_book", {"book": "ops"})]


def stdio_server(**env: str) -> mcp.Server:
    """The ledger over stdio (a process per session), trusted, with its session setup."""
    return mcp.stdio("ledger", "python", SERVER, env=env or None, trusted=True, setup=SETUP)


def http_server(url: str) -> mcp.Server:
    """The ledger at a streamable-HTTP ``url`` (started with ``server.py --http PORT``)."""
    return mcp.http("ledger", url, trusted=True)


def plan(view: PlanView) -> Any:
    """Balance, transfer, note — once; done when all three succeeded."""
    if view.steps:
        return None
    inp = view.input or {}
    account, amount = inp.get("account", "acme"), int(inp.get("amount", 10))
    steps = [
        step("read", "balance", account=account),
        step("pay", "transfer", after=["read"], account=account, amount=amount),
    ]
    if inp.get("note", True):
        steps.append(step("tell", "note", after=["pay"], text=f"paid {amount} to {account}"))
    return steps


def transferred(ctx: Any) -> bool:
    """Evidence: the transfer's recorded answer (the server's, or the lookup's)."""
    r = ctx.results().get("pay")
    return isinstance(r, dict) and r.get("amount") is not None


def make_agent(name: str, server: mcp.Server, *extra: torpor.Tool) -> torpor.Agent:
    """The agent ``name`` on ``server``'s tools (plus ``extra`` tools written in code)."""
    tools = mcp.toolset(server, overrides={"transfer": mcp.Override(lookup="find_transfer")})
    for t in extra:
        tools.add(t)
    return torpor.Agent(
        name,
        goal="pay the account once and say so",
        tools=tools,
        planner=torpor.CodePlanner(plan),
        criteria={"transferred": transferred},
    )
