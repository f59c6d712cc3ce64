"""Worker throughput on PostgreSQL with 1, 2, 4 and 8 worker processes.

Two workloads, each in a fresh schema per worker count:

- *trivial steps*: ``--runs`` runs of ``--steps`` steps whose body returns a constant; every
  step is one durable boundary (one fenced append, one commit). Reported as steps/second.
- *10-step runs*: ``--runs10`` runs of a 10-step workflow. Reported as runs/second.

The runs are created first; the workers start, report READY and wait at a gate; the clock
starts when the gate opens and stops when every run has finished. Every step commits (fsync) on
its own, so one worker running one run at a time is bound by the disk's flush latency; more
runs at once (``--concurrency``, or more workers) share flushes (PostgreSQL group commit) until
the CPUs are the limit. Results: ``bench/results/worker_throughput_c<concurrency>.json``.

    uv run python bench/worker_throughput.py [--workers 1,2,4,8] [--concurrency 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    WorkerProcs,
    load_module,
    pg_schema,
    save,
    table,
    write_module,
)

MODULE = """
import torpor


@torpor.workflow(name="bench.steps")
def steps(run, n):
    for i in range(n):
        run.step("s", int, i)
    return n
"""


def measure(workers: int, runs: int, steps: int, concurrency: int) -> dict[str, float]:
    import torpor

    with tempfile.TemporaryDirectory(prefix="torpor-tput-") as d:
        tmp = Path(d)
        mod = write_module(tmp, "bench_tput_wf", MODULE)
        load_module(tmp, mod)
        with pg_schema() as url:
            rt = torpor.Runtime(url)
            client = torpor.Client(rt.store)
            for i in range(runs):
                rt.start("bench.steps", steps, run_id=f"r{i:05d}")
            procs = WorkerProcs(url, tmp, mod, concurrency=concurrency)
            procs.start(workers)
            try:
                t0 = time.perf_counter()
                procs.open_gate()
                while True:
                    done = len(client.runs(status="finished", limit=runs + 1))
                    if done >= runs:
                        break
                    time.sleep(0.02)
                elapsed = time.perf_counter() - t0
            finally:
                procs.stop()
                rt.close()
    return {
        "elapsed_s": elapsed,
        "runs_per_s": runs / elapsed,
        "steps_per_s": runs * steps / elapsed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--concurrency", type=int, default=1, help="runs at once per worker")
    ap.add_argument("--runs", type=int, default=40, help="runs of the trivial-step workload")
    ap.add_argument("--steps", type=int, default=50, help="steps per run (trivial workload)")
    ap.add_argument("--runs10", type=int, default=200, help="runs of the 10-step workload")
    args = ap.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    trivial, ten = {}, {}
    for w in counts:
        trivial[w] = measure(w, args.runs, args.steps, args.concurrency)
        ten[w] = measure(w, args.runs10, 10, args.concurrency)
    print(
        f"PostgreSQL, worker processes x concurrency {args.concurrency}; "
        f"trivial: {args.runs} runs x {args.steps} steps; 10-step: {args.runs10} runs\n"
    )
    rows = [
        [
            w,
            f"{trivial[w]['steps_per_s']:.0f}",
            f"{ten[w]['runs_per_s']:.1f}",
            f"{ten[w]['steps_per_s']:.0f}",
        ]
        for w in counts
    ]
    print(table(["workers", "trivial steps/s", "10-step runs/s", "(steps/s)"], rows))
    path = save(
        f"worker_throughput_c{args.concurrency}",
        {"trivial_steps": trivial, "ten_step_runs": ten, "args": vars(args)},
    )
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
