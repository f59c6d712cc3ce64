"""Parallel tool calls in one agent run (issue 38): ten calls of ``--call-s`` (0.5 s) each,
run side by side (``Agent(max_parallel=10)``), against one such call, in the same process on
the same store, alternating round after round so load hits both alike.

Each figure is a whole agent run (``Runtime.run``: its plan, the calls as recorded steps, their
outcomes, the checkpoint and the finish), timed from the call to its result. The ten calls are
half ``read`` tools and half ``effect`` tools (intent, call, observation), with arguments that
differ from round to round; each call sleeps ``--call-s`` in the tool (an I/O-like wait, as a
model or HTTP call). The ratio is computed per round (ten-call run / one-call run), then the
median taken. Goal: ≤ 1.4x (the issue's "Done when"). A sequential agent (``max_parallel=1``)
would take about 10x.

    uv run python bench/parallel_calls.py [--backends sqlite,postgres] [--reps 7] [--call-s 0.5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import pg_schema, save, table

import torpor
from torpor.agents.planners import CodePlanner
from torpor.agents.proposals import ProposedStep

CALL_S = [0.5]
tools = torpor.Tools()


@tools.tool(policy="read")
def fetch(item: str) -> str:
    time.sleep(CALL_S[0])
    return f"fetched {item}"


@tools.tool(policy="effect")
def post(item: str, idempotency_key: str) -> str:
    time.sleep(CALL_S[0])
    return f"posted {item} ({idempotency_key})"


def _planner(n: int) -> CodePlanner:
    def plan(view: Any) -> Any:
        if view.version:
            return None
        tag = view.input["round"]
        return [
            ProposedStep(
                call_id=f"c{i}", tool="fetch" if i % 2 else "post", args={"item": f"{tag}-{i}"}
            )
            for i in range(n)
        ]

    return CodePlanner(plan, name=f"bench{n}")


ONE = torpor.Agent("bench.parallel.one", goal="one call", tools=tools, planner=_planner(1))
TEN = torpor.Agent(
    "bench.parallel.ten", goal="ten calls", tools=tools, planner=_planner(10), max_parallel=10
)


@contextmanager
def store(backend: str) -> Iterator[str]:
    if backend == "postgres":
        with pg_schema() as url:
            yield url
    else:
        with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
            yield f"sqlite:///{d}/bench.db"


def measure(backend: str, reps: int) -> dict[str, Any]:
    one: list[float] = []
    ten: list[float] = []
    ratios: list[float] = []
    with store(backend) as url, torpor.Runtime(url) as rt:
        rt.run(ONE, {"round": "warm"}, run_id="warm-1")  # imports, schema, first plan
        for r in range(reps):
            times = {}
            for agent, key in (
                ((ONE, "one"), (TEN, "ten")) if r % 2 else ((TEN, "ten"), (ONE, "one"))
            ):
                t0 = time.perf_counter()
                res = rt.run(agent, {"round": f"r{r}"}, run_id=f"{key}-{r}")
                times[key] = time.perf_counter() - t0
                assert res.outcome == "succeeded", res
            one.append(times["one"])
            ten.append(times["ten"])
            ratios.append(times["ten"] / times["one"])
    return {
        "one_s": one,
        "ten_s": ten,
        "ratios": ratios,
        "one_p50_s": statistics.median(one),
        "ten_p50_s": statistics.median(ten),
        "ratio_p50": statistics.median(ratios),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--call-s", type=float, default=0.5)
    a = ap.parse_args()
    CALL_S[0] = a.call_s
    out: dict[str, Any] = {"call_s": a.call_s, "reps": a.reps, "goal_ratio": 1.4}
    rows = []
    for backend in a.backends.split(","):
        m = measure(backend, a.reps)
        out[backend] = m
        rows.append(
            (
                backend,
                f"{m['one_p50_s']:.3f}",
                f"{m['ten_p50_s']:.3f}",
                f"{m['ratio_p50']:.2f}x ({min(m['ratios']):.2f}-{max(m['ratios']):.2f})",
                "holds" if m["ratio_p50"] <= 1.4 else "**short**",
            )
        )
    print(
        table(
            [
                "backend",
                "one call (s, p50)",
                "ten parallel (s, p50)",
                "ratio p50 (min-max)",
                "≤ 1.4x",
            ],
            rows,
        )
    )
    print(f"saved {save('parallel_calls', out)}")


if __name__ == "__main__":
    main()
