"""Wake latency (G7): from a signal being sent to the waiting run's next step starting.

One worker process, idle, holds nothing for a run that waits on ``run.wait_for("go")``. This
process sends the signal (``Client.signal``: one inbox transaction, which wakes the run) and
the step after the wait writes the wall-clock time it started; the latency is the difference.
Repeated ``--n`` times per backend: SQLite (the worker polls ``PRAGMA data_version``) and
PostgreSQL (``LISTEN/NOTIFY``).

    uv run python bench/wake_latency.py [--n 200] [--backends sqlite,postgres]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    WorkerProcs,
    load_module,
    percentile,
    pg_schema,
    save,
    table,
    write_module,
)

MODULE = """
import time
import torpor

STAMPS = {stamps!r}


def stamp(i):
    with open(STAMPS, "a") as f:
        f.write(f"{{i}} {{time.time()!r}}\\n")
    return i


@torpor.workflow(name="bench.wake")
def flow(run, n):
    for i in range(n):
        run.wait_for("go")
        run.step(f"s{{i}}", stamp, i)
    return n
"""


@contextmanager
def store_url(backend: str, tmp: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp}/wake.db"
    else:
        with pg_schema() as url:
            yield url


def measure(backend: str, n: int, idle_s: float) -> list[float]:
    import torpor

    with tempfile.TemporaryDirectory(prefix="torpor-wake-") as d:
        tmp = Path(d)
        stamps = tmp / "stamps"
        stamps.touch()
        mod = write_module(tmp, "bench_wake_wf", MODULE.format(stamps=str(stamps)))
        load_module(tmp, mod)
        with store_url(backend, tmp) as url:
            rt = torpor.Runtime(url)
            client = torpor.Client(rt.store)
            workers = WorkerProcs(url, tmp, mod, concurrency=1)
            workers.start(1, gated=False)
            try:
                rid = rt.start("bench.wake", n, run_id="wake")
                out: list[float] = []
                for i in range(n):
                    deadline = time.monotonic() + 30
                    while client.get(rid).status != "waiting":
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"run did not reach wait #{i + 1}")
                        time.sleep(0.002)
                    time.sleep(idle_s)  # the worker is idle: blocked waiting for a wakeup
                    t0 = time.time()
                    client.signal(rid, "go", i, message_id=f"go-{i}")
                    while True:
                        lines = stamps.read_text().splitlines()
                        if len(lines) > i and lines[i].endswith(tuple("0123456789")):
                            break
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"step {i} never started")
                        time.sleep(0.0005)
                    out.append((float(lines[i].split()[1]) - t0) * 1000)
                return out
            finally:
                workers.stop()
                rt.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="wakes per backend")
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--idle", type=float, default=0.05, help="idle time before each signal (s)")
    args = ap.parse_args()
    rows, results = [], {}
    for backend in args.backends.split(","):
        lat = measure(backend, args.n, args.idle)
        r = {
            "n": len(lat),
            "p50_ms": percentile(lat, 50),
            "p90_ms": percentile(lat, 90),
            "p99_ms": percentile(lat, 99),
            "max_ms": max(lat),
        }
        results[backend] = r
        rows.append(
            [
                backend,
                r["n"],
                f"{r['p50_ms']:.1f}",
                f"{r['p90_ms']:.1f}",
                f"{r['p99_ms']:.1f}",
                f"{r['max_ms']:.1f}",
            ]
        )
    print("Wake latency, signal sent -> next step starts (one idle worker process)\n")
    print(table(["backend", "wakes", "p50 ms", "p90 ms", "p99 ms", "max ms"], rows))
    path = save("wake_latency", {"results": results, "args": vars(args)})
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
