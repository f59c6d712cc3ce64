"""Crash the OpenAI Agents SDK desk (examples/openai_agents) at every boundary it crosses.

    uv run python scripts/openai_agents_explore.py [--seed N]

Every crash boundary of the crash-free run (SIGKILL there, again during recovery, then resume)
and the refund's lost acknowledgement; exit 1 on a violation (the summary says how to replay
it). tests/test_openai_agents_explore.py runs the boundaries that are not plain appends.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torpor.testing import explore

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=47)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from examples.openai_agents import explore_target

    target = explore_target(ROOT)
    report = explore(target, seed=args.seed, kinds=["crash", "ack"], progress=print)
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
