"""``python -m examples.minimal [NAME] [--auto-approve] [--resume RUN_ID]``: run the minimal
workflow in this process. Without ``--auto-approve`` it stops at the approval and prints how to
approve and continue."""

from __future__ import annotations

import argparse
import sys

import torpor

from . import greet


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.minimal")
    p.add_argument("name", nargs="?", default="world")
    p.add_argument("--auto-approve", action="store_true", help="approve as this process's user")
    p.add_argument("--resume", metavar="RUN_ID", help="continue a run instead of starting one")
    args = p.parse_args(argv)
    with torpor.Runtime(auto_approve="you" if args.auto_approve else None) as rt:
        res = rt.resume(args.resume) if args.resume else rt.run(greet, args.name)
    print(f"run {res.run_id}: {res.status} {res.outcome or ''} {res.result or res.reason}")
    if res.status == "waiting":
        print(f"approve: uv run torpor approve {res.run_id} --as YOU   (see torpor keys init)")
        print(f"then:    uv run python -m examples.minimal --resume {res.run_id}")
    return 0 if res.outcome in (None, "succeeded") else 1


if __name__ == "__main__":
    sys.exit(main())
