"""Command line of the planner + workers example.

    uv run python -m examples.planner_workers --auto-approve          # json, tomllib, wsgiref
    uv run python -m examples.planner_workers --packages json,http     # waits for approvals
    uv run python -m examples.planner_workers --resume RUN_ID [--auto-approve]   # after kill -9

Exit status: 0 succeeded, 1 another outcome, 2 waiting (for approvals, or a worker a budget
blocked), 3 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path

import torpor
from examples.repo_agent.codemod import stdlib_dir

from . import team

DEFAULT_PACKAGES = ("json", "tomllib", "wsgiref")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.planner_workers", description=__doc__)
    p.add_argument("--packages", default=",".join(DEFAULT_PACKAGES))
    p.add_argument("--run-id", help="run id of the planner (default: random)")
    p.add_argument("--resume", metavar="RUN_ID", help="continue the tree of this planner run")
    p.add_argument("--world", help="output folder (default: $TORPOR_HOME/planner_workers/RUN_ID)")
    p.add_argument("--auto-approve", action="store_true", help="approve every worker's patch")
    p.add_argument("--approver", default="planner-workers-example")
    p.add_argument("--db", help="store URL (default: the configured store)")
    args = p.parse_args(argv)
    pkgs = [x.strip() for x in args.packages.split(",") if x.strip()]
    for pkg in pkgs:
        try:
            stdlib_dir(pkg)
        except ValueError as exc:
            print(f"error: --packages: {exc}", file=sys.stderr)
            return 3
    rt = torpor.Runtime(args.db, auto_approve=args.approver if args.auto_approve else None)
    with rt:
        client = torpor.Client(rt.store)
        if args.resume:
            rid = args.resume
            res = rt.resume(rid)
        else:
            rid = args.run_id or f"team-{uuid.uuid4().hex[:8]}"
            world = Path(args.world or Path(client.settings.home) / "planner_workers" / rid)
            world.mkdir(parents=True, exist_ok=True)
            res = rt.run(team.planner, {"packages": pkgs, "world": str(world)}, run_id=rid)
        for kid in client.children(rid):
            print(f"worker {kid.run_id}: {kid.status} {kid.outcome or ''}".rstrip())
            for a in client.state(kid.run_id).open_approvals():
                print(f"  waits for approval {a}: torpor approve {kid.run_id} {a} --as NAME")
        print(f"planner {rid}: {res.status} {res.outcome or ''}".rstrip())
        if res.outcome in ("succeeded", "succeeded_with_warnings"):
            world = Path(client.state(rid).input["world"])
            print(json.dumps(json.loads((world / "published.json").read_text())))
            return 0
        if res.status == "waiting":
            print(f"continue: python -m examples.planner_workers --resume {rid}")
            return 2
        return 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except torpor.TorporError as exc:  # (a bad run id, an unreachable server: one line)
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(3)
