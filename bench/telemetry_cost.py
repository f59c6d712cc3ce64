"""What tracing costs a durable step: off (the default) against a baseline without the
telemetry code at all, and on (spans and metrics to in-memory exporters).

    uv run python bench/telemetry_cost.py                       # 2,000 steps x 7 repetitions
    uv run python bench/telemetry_cost.py --steps 500 --reps 3  # a quick look

The baseline is the torpor source of ``--baseline-rev`` (default: main before issue 20),
exported with ``git archive`` into a temporary folder; every mode runs the same workflow — N
plain ``read`` steps in one run — in a fresh process on a fresh SQLite file at
``synchronous=OFF`` (no fsync to hide the engine's own CPU), and the timed region is the run
itself. Repetitions are interleaved (baseline, off, on, baseline, …) so a noisy phase of the
machine hits every mode; each figure is the median µs per step with (min-max), and each ratio
is taken within one repetition before the median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: main before issue 20 (no torpor.telemetry, no journal observer).
DEFAULT_BASELINE = "401b8c8"

WORKLOAD = r"""
import json, os, sys, time
mode, steps, db = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for k in [k for k in os.environ if k.startswith("OTEL_")]:
    del os.environ[k]
import torpor
if mode == "on":
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from torpor import telemetry
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    telemetry.configure(tp, MeterProvider(metric_readers=[InMemoryMetricReader()]))

@torpor.workflow(name="bench.tel", version="1")
def flow(run, n):
    for i in range(n):
        run.step("s", int, i)
    return n

rt = torpor.Runtime(f"sqlite:///{db}?synchronous=OFF")
rt.run("bench.tel", 20, run_id="warm")  # imports, schema, first writes: outside the timing
t0 = time.perf_counter()
res = rt.run("bench.tel", steps, run_id="timed")
dt = time.perf_counter() - t0
assert res.outcome == "succeeded", res
tel = sys.modules.get("opentelemetry") is not None
print(json.dumps({"us_per_step": dt * 1e6 / steps, "otel_imported": tel}))
"""


def export_baseline(rev: str, into: Path) -> Path:
    """The ``src`` tree of ``rev`` (git archive), extracted under ``into``."""
    blob = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "src"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def measure(mode: str, src: Path, steps: int, tmp: Path, rep: int) -> dict[str, float]:
    db = tmp / f"{mode}-{rep}.db"
    env = {**os.environ, "PYTHONPATH": str(src)}
    cp = subprocess.run(
        [sys.executable, "-c", WORKLOAD, mode, str(steps), str(db)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if cp.returncode != 0:
        raise SystemExit(f"{mode}: {cp.stderr}")
    return json.loads(cp.stdout.strip().splitlines()[-1])


def fmt(xs: list[float], digits: int = 1) -> str:
    med, lo, hi = statistics.median(xs), min(xs), max(xs)
    return f"{med:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--baseline-rev", default=DEFAULT_BASELINE)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="torpor-bench-tel-") as d:
        tmp = Path(d)
        srcs = {
            "baseline": export_baseline(args.baseline_rev, tmp / "baseline"),
            "off": ROOT / "src",
            "on": ROOT / "src",
        }
        runs: dict[str, list[dict[str, float]]] = {m: [] for m in srcs}
        for rep in range(args.reps):
            for mode, src in srcs.items():
                runs[mode].append(measure(mode, src, args.steps, tmp, rep))
    us = {m: [r["us_per_step"] for r in rs] for m, rs in runs.items()}
    off_ratio = [o / b for o, b in zip(us["off"], us["baseline"], strict=True)]
    on_ratio = [o / b for o, b in zip(us["on"], us["baseline"], strict=True)]
    print(f"{args.steps} read steps per run, {args.reps} repetitions, SQLite synchronous=OFF")
    print("| mode | µs/step median (min-max) | ratio to baseline | OpenTelemetry imported |")
    print("|---|---|---|---|")
    print(f"| baseline ({args.baseline_rev}) | {fmt(us['baseline'])} | 1 | no |")
    for mode, ratio in (("off", off_ratio), ("on", on_ratio)):
        imported = "yes" if all(r["otel_imported"] for r in runs[mode]) else "no"
        print(f"| tracing {mode} | {fmt(us[mode])} | {fmt(ratio, 3)} | {imported} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
