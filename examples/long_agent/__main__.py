"""Run the long agent: hundreds of turns offline, killable and resumable, printing the size of
the context each model call gets (it stays bounded while the transcript grows).

    uv run python -m examples.long_agent --turns 300 --kill-at 150   # dies by SIGKILL at turn 150
    uv run python -m examples.long_agent --resume                    # continues from its checkpoint
    uv run torpor --db sqlite:///.long_agent/torpor.db context long-1   # the next context

The world (one notes file per turn) and the store live in ``--dir`` (default ``.long_agent``).
Exit status: 0 the run succeeded, 1 another outcome.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import torpor
from torpor.agents.models import Message
from torpor.memory import estimate_request

from .script import make_script, write_world


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.long_agent", description=__doc__)
    p.add_argument("--turns", type=int, default=300, help="model turns of the run (default 300)")
    p.add_argument("--seed", type=int, default=7, help="seed of the world and the script")
    p.add_argument("--budget", type=int, default=6000, help="context budget in tokens")
    p.add_argument("--dir", type=Path, default=Path(".long_agent"), help="world and store")
    p.add_argument("--run-id", default="long-1")
    p.add_argument("--kill-at", type=int, help="SIGKILL this process at that turn's model call")
    p.add_argument("--resume", action="store_true", help="continue the run after a kill")
    args = p.parse_args(argv)

    root = args.dir.resolve()
    world = root / "world"
    os.environ["LONG_AGENT_WORLD"] = str(world)
    from . import agent as la

    agent = la.make_agent(la.NAME, budget_tokens=args.budget)
    url = f"sqlite:///{root}/torpor.db"

    def show(turn: int, messages: Sequence[Message]) -> None:
        tokens = estimate_request(messages, la.tools.specs())
        summary = "summary" if "earlier turns summarized" in messages[0].content else "-"
        print(f"turn {turn:4d}  context {tokens:5d} tokens  {len(messages):3d} messages  {summary}")
        if args.kill_at is not None and turn == args.kill_at:
            print(f"SIGKILL at turn {turn}; continue with: python -m examples.long_agent --resume")
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    la.ON_CALL.append(show)
    with torpor.Runtime(url) as rt:
        if args.resume:
            res = rt.resume(args.run_id)
        else:
            root.mkdir(parents=True, exist_ok=True)
            write_world(world, make_script(args.turns, args.seed))
            res = rt.run(agent, {"turns": args.turns, "seed": args.seed}, run_id=args.run_id)
        state = torpor.Client(rt.store).state(args.run_id)
    print(
        f"{res.outcome}: {state.usage.model_calls} model calls, "
        f"{state.context_compactions} compactions, last context {state.context_tokens} tokens"
    )
    return 0 if res.outcome == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
