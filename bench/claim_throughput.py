"""Claim throughput of a limited queue whose limits do not bind, against an unlimited one
(issue 21: target >= 0.8x), with 8 worker processes on PostgreSQL.

Each measurement creates ``--runs`` runs of a one-step workflow in a fresh schema — either in
no queue, or in a queue with a concurrency limit (64), a per-key limit (1), a rate limit (1,000
starts a second) and a per-key rate limit (10 a second), none of which the workers reach (8 of
them; each run its own key) — starts ``--workers`` worker processes held at a
gate, opens the gate and times until every run has finished. A run here is a claim, one step,
the outcome and a release, so the claim is a large share of its cost: the ratio shows what the
limit checks (the per-queue advisory lock and the checked claim) cost. The two kinds alternate,
``--reps`` times each; the ratio of the medians is reported. Results:
``bench/results/claim_throughput.json``.

    uv run python bench/claim_throughput.py [--workers 8] [--runs 400] [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import WorkerProcs, load_module, pg_schema, save, table, write_module

MODULE = """
import torpor


@torpor.workflow(name="bench.claim")
def claim(run, n):
    run.step("s", int, n)
    return n
"""


def measure(kind: str, workers: int, runs: int, tmp: Path, mod: str) -> float:
    """Runs per second for ``kind`` (``unlimited`` or ``limited``)."""
    import torpor
    from torpor.queues import Queues

    with pg_schema() as url:
        rt = torpor.Runtime(url)
        client = torpor.Client(rt.store)
        queue = None
        if kind == "limited":
            queue = "bench"
            # Every kind of limit, none of which binds: 8 workers run at most 8 runs at once
            # and start far fewer than 1,000 a second; each run has a key of its own.
            Queues(rt.store).set(
                queue,
                concurrency=64,
                key_concurrency=1,
                rate_limit=1_000,
                rate_period_s=1,
                key_rate_limit=10,
                key_rate_period_s=1,
            )
        for i in range(runs):
            key = f"k{i}" if queue else None
            rt.start("bench.claim", i, run_id=f"r{i:05d}", queue=queue, key=key)
        # Table statistics, as autovacuum keeps them on a table in use (a fresh table has none,
        # and the planner then cannot tell the per-key index from the per-queue one).
        with rt.store.driver.transaction() as cur:
            rt.store.driver.execute(cur, "ANALYZE runs", {})
        procs = WorkerProcs(url, tmp, mod, concurrency=1)
        procs.start(workers)
        try:
            t0 = time.perf_counter()
            procs.open_gate()
            while len(client.runs(status="finished", limit=runs + 1)) < runs:
                time.sleep(0.02)
            elapsed = time.perf_counter() - t0
        finally:
            procs.stop()
            rt.close()
    return runs / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    got: dict[str, list[float]] = {"unlimited": [], "limited": []}
    with tempfile.TemporaryDirectory(prefix="torpor-claim-") as d:
        tmp = Path(d)
        mod = write_module(tmp, "bench_claim_wf", MODULE)
        load_module(tmp, mod)
        for rep in range(args.reps):
            order = ("unlimited", "limited") if rep % 2 == 0 else ("limited", "unlimited")
            for kind in order:
                got[kind].append(measure(kind, args.workers, args.runs, tmp, mod))
    med = {k: statistics.median(v) for k, v in got.items()}
    ratio = med["limited"] / med["unlimited"]
    print(
        f"PostgreSQL, {args.workers} worker processes, {args.runs} one-step runs, "
        f"{args.reps} reps (median, min-max)\n"
    )
    rows = [[k, f"{med[k]:.0f}", f"{min(v):.0f}-{max(v):.0f}"] for k, v in got.items()]
    print(table(["queue", "runs/s", "range"], rows))
    print(f"\nlimited / unlimited: {ratio:.2f}x (target >= 0.8x)")
    path = save(
        "claim_throughput", {"runs_per_s": got, "median": med, "ratio": ratio, "args": vars(args)}
    )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
