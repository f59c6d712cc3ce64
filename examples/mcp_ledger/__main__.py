"""``python -m examples.mcp_ledger [--run-id ID] [--resume ID] [--url URL]``: run the ledger
agent in this process (its MCP server over stdio, or at ``--url``); the ledger file is
``$LEDGER_FILE`` (default ``ledger.jsonl`` here)."""

from __future__ import annotations

import argparse
import os
import sys

import torpor

from . import http_server, make_agent, stdio_server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.mcp_ledger")
    p.add_argument("--run-id", help="the run's id (default: a new one)")
    p.add_argument("--resume", metavar="RUN_ID", help="continue a run instead of starting one")
    p.add_argument("--url", help="a streamable-HTTP ledger server instead of one over stdio")
    p.add_argument("--amount", type=int, default=10)
    args = p.parse_args(argv)
    os.environ.setdefault("LEDGER_FILE", os.path.abspath("ledger.jsonl"))
    server = http_server(args.url) if args.url else stdio_server()
    agent = make_agent("mcp.ledger", server)
    with torpor.Runtime() as rt:
        if args.resume:
            res = rt.resume(args.resume)
        else:
            res = rt.run(agent, {"account": "acme", "amount": args.amount}, run_id=args.run_id)
    agent.tools.close()  # type: ignore[attr-defined]
    print(f"run {res.run_id}: {res.status} {res.outcome or ''} {res.reason or ''}".rstrip())
    return 0 if res.outcome in (None, "succeeded") else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except torpor.TorporError as exc:  # (a bad run id, an unreachable server: one line)
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(3)
