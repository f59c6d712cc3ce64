"""A small ledger MCP server, on the official SDK (``mcp.server.mcpserver.MCPServer``).

Every call that reaches a tool is appended to the ledger file ``$LEDGER_FILE`` (JSON lines,
fsynced) before it answers, so a test can count what the world saw. ``transfer`` does not
deduplicate by its key on purpose: a second call with one key would show as two lines.

    python examples/mcp_ledger/server.py                 # stdio
    python examples/mcp_ledger/server.py --http 8765     # streamable HTTP on 127.0.0.1:8765/mcp

``LEDGER_TOOLS=v2`` lists one more tool (``audit``): an upgraded server.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("ledger", log_level="WARNING")
LEDGER = os.environ.get("LEDGER_FILE", "ledger.jsonl")
#: The state this server keeps per session (a stdio session is this process).
SESSION: dict[str, Any] = {"book": None}


def write(kind: str, **fields: Any) -> None:
    with open(LEDGER, "a") as f:
        f.write(json.dumps({"kind": kind, "pid": os.getpid(), **fields}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def entries(kind: str, **match: Any) -> list[dict[str, Any]]:
    if not os.path.exists(LEDGER):
        return []
    with open(LEDGER) as f:
        rows = [json.loads(x) for x in f if x.strip()]
    return [r for r in rows if r["kind"] == kind and all(r.get(k) == v for k, v in match.items())]


READ = ToolAnnotations(read_only_hint=True)


@server.tool(annotations=READ)
def balance(account: str) -> int:
    """The balance of ``account``: the sum of the transfers to it."""
    write("balance", account=account)
    return sum(int(r["amount"]) for r in entries("transfer", account=account))


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def transfer(account: str, amount: int, idempotency_key: str) -> dict[str, Any]:
    """Move ``amount`` to ``account`` in the open book."""
    write("transfer", account=account, amount=amount, key=idempotency_key, book=SESSION["book"])
    return {"account": account, "amount": amount, "key": idempotency_key, "book": SESSION["book"]}


@server.tool(annotations=READ)
def find_transfer(idempotency_key: str) -> dict[str, Any]:
    """The transfer made under ``idempotency_key``, or ``{"found": false}``."""
    hits = entries("transfer", key=idempotency_key)
    if not hits:
        return {"found": False}
    h = hits[-1]
    return {"account": h["account"], "amount": h["amount"], "key": h["key"], "book": h["book"]}


@server.tool()
def note(text: str) -> str:
    """Append a note to the ledger (no annotations: an effect, and no way to look it up)."""
    write("note", text=text)
    return f"noted: {text}"


@server.tool()
def open_book(book: str) -> str:
    """Open ``book`` for this session: later transfers are made in it."""
    SESSION["book"] = book
    write("open_book", book=book)
    return book


@server.tool(annotations=READ)
def info() -> dict[str, Any]:
    """This server process and its session's state."""
    return {"pid": os.getpid(), "book": SESSION["book"]}


if os.environ.get("LEDGER_TOOLS") == "v2":

    @server.tool(annotations=READ)
    def audit() -> int:
        """How many transfers the ledger holds (an upgraded server's new tool)."""
        return len(entries("transfer"))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        port = int(sys.argv[2])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()
