"""Child runs (issue 37): what a tree costs, against its plain peers measured in the same run.

1. **Parent wake after its last child vs a signal wake.** One idle worker process (one
   thread: ``--wake-concurrency``) serves a parent that, ``--n`` times, spawns a child and
   waits on it, and a plain run that waits on a signal as many times. A child waits for a
   signal too; once signalled it ends. The parent's wake is from the child's outcome being
   recorded (the ``at_ms`` of its ``run_finished``, stamped by the store's clock as that
   append begins: the transaction that tells the parent) to the parent's next step (the wake,
   the claim, the replay, the wait's end). The signal wake is from just before
   ``Client.signal`` (one inbox transaction that wakes the run) to the waiting run's next step
   (as ``bench/wake_latency.py``). Also kept: the parent's wake from the child's last step
   (adds the child's own step append). Both alternate, round after round, on one worker, so
   load hits both alike. Goal: parent wake p50 ≤ 2x the signal wake p50.
2. **Fan-out on workers vs independent runs.** ``--workers`` worker processes (concurrency 1
   each); a parent spawns ``--children`` children and waits for all, against as many
   independent runs started by a client; each run does ``--steps`` steps of ``--step-ms``
   of I/O-like waiting (``time.sleep``, as an agent's model or tool call). The figure is the
   time from the start to the last outcome, the two alternating ``--reps`` times. Goal: the
   tree ≤ 1.2x the independent runs.

    uv run python bench/children.py [--backends postgres,sqlite] [--n 50] [--children 100]
    uv run python -m bench --sections children
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

from common import WorkerProcs, load_module, percentile, pg_schema, save, table, write_module

MODULE = """
import time
import torpor

STAMPS = {stamps!r}


def stamp(tag):
    with open(STAMPS, "a") as f:
        f.write(f"{{tag}} {{time.time()!r}}\\n")
    return tag


@torpor.workflow(name="bench.kids.child")
def child(run, i):
    run.wait_for("go")
    run.step("end", stamp, f"child{{i}}")
    return i


@torpor.workflow(name="bench.kids.parent")
def parent(run, n):
    for i in range(n):
        r = run.child("bench.kids.child", i)
        run.step(f"after{{i}}", stamp, f"parent{{i}}")
    return n


@torpor.workflow(name="bench.kids.signal")
def signalled(run, n):
    for i in range(n):
        run.wait_for("go")
        run.step(f"after{{i}}", stamp, f"signal{{i}}")
    return n


@torpor.workflow(name="bench.kids.work")
def work(run, spec):
    steps, ms = spec
    for i in range(steps):
        run.step(f"s{{i}}", time.sleep, ms / 1000)
    return steps


@torpor.workflow(name="bench.kids.fan")
def fan(run, spec):
    n, steps, ms = spec
    kids = [run.spawn("bench.kids.work", [steps, ms]) for _ in range(n)]
    return sum(1 for r in run.wait_children(kids) if r.ok)
"""


@contextmanager
def store_url(backend: str, tmp: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp}/kids.db"
    else:
        with pg_schema() as url:
            yield url


def _stamps(path: Path) -> dict[str, float]:
    out = {}
    for line in path.read_text().splitlines():
        tag, _, t = line.partition(" ")
        if t.endswith(tuple("0123456789")):
            out[tag] = float(t)
    return out


def _until(what: str, cond: Any, hang_s: float = 300.0, poll_s: float = 0.001) -> None:
    deadline = time.monotonic() + hang_s
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen within {hang_s:g} s (a hang guard)")
        time.sleep(poll_s)


def measure_wake(
    backend: str, n: int, idle_s: float = 0.05, concurrency: int = 1
) -> dict[str, list[float]]:
    """Parent-wake and signal-wake latencies (ms), alternating, on one idle worker process of
    ``concurrency`` threads (1, as ``bench/wake_latency.py``: with 2 on SQLite, the parent's
    claim can collide with the child's lease release in the same process, and SQLite's busy
    handler sleeps; that is the worker's cost, measured with ``--wake-concurrency 2``)."""
    import torpor

    with tempfile.TemporaryDirectory(prefix="torpor-kids-") as d:
        tmp = Path(d)
        stamps = tmp / "stamps"
        stamps.touch()
        mod = write_module(tmp, "bench_kids_wf", MODULE.format(stamps=str(stamps)))
        load_module(tmp, mod)
        with store_url(backend, tmp) as url:
            rt = torpor.Runtime(url)
            client = torpor.Client(rt.store)
            workers = WorkerProcs(url, tmp, mod, concurrency=concurrency)
            workers.start(1, gated=False)
            try:
                rt.start("bench.kids.parent", n, run_id="p")
                rt.start("bench.kids.signal", n, run_id="s")
                child_ms, signal_ms, step_ms = [], [], []
                for i in range(n):
                    kid = f"p.child:bench.kids.child{'' if i == 0 else f'#{i + 1}'}"
                    _until(f"child {i} waiting", lambda k=kid: _waiting(client, k))
                    _until("parent waiting", lambda: client.get("p").status == "waiting")
                    _until("signal run waiting", lambda: client.get("s").status == "waiting")
                    time.sleep(idle_s)  # the worker is idle, blocked waiting for a wakeup
                    client.signal(kid, "go", i, message_id=f"kid-{i}")
                    _until(f"parent step {i}", lambda i=i: f"parent{i}" in _stamps(stamps))
                    st = _stamps(stamps)
                    fin = [e for e in client.events(kid) if e.type == "run_finished"][-1]
                    child_ms.append((st[f"parent{i}"] - fin.at_ms / 1000) * 1000)
                    step_ms.append((st[f"parent{i}"] - st[f"child{i}"]) * 1000)
                    time.sleep(idle_s)
                    t0 = time.time()
                    client.signal("s", "go", i, message_id=f"sig-{i}")
                    _until(f"signal step {i}", lambda i=i: f"signal{i}" in _stamps(stamps))
                    signal_ms.append((_stamps(stamps)[f"signal{i}"] - t0) * 1000)
                return {
                    "parent_wake_ms": child_ms,
                    "signal_wake_ms": signal_ms,
                    "parent_wake_from_last_step_ms": step_ms,
                }
            finally:
                workers.stop()
                rt.close()


def _waiting(client: Any, run_id: str) -> bool:
    try:
        return bool(client.get(run_id).status == "waiting")
    except Exception:
        return False  # not created yet


def measure_fan(
    backend: str, children: int, workers_n: int, steps: int, step_ms: float, reps: int
) -> dict[str, list[float]]:
    """Seconds from start to the last outcome: a parent of ``children`` children vs as many
    independent runs, alternating, on ``workers_n`` worker processes."""
    import torpor

    with tempfile.TemporaryDirectory(prefix="torpor-fan-") as d:
        tmp = Path(d)
        (tmp / "stamps").touch()
        mod = write_module(tmp, "bench_fan_wf", MODULE.format(stamps=str(tmp / "stamps")))
        load_module(tmp, mod)
        with store_url(backend, tmp) as url:
            rt = torpor.Runtime(url)
            client = torpor.Client(rt.store)
            workers = WorkerProcs(url, tmp, mod, concurrency=1)
            workers.start(workers_n, gated=False)
            tree_s, flat_s = [], []
            try:
                for rep in range(reps):
                    t0 = time.monotonic()
                    rt.start("bench.kids.fan", [children, steps, step_ms], run_id=f"fan{rep}")
                    _until("the tree", lambda r=rep: _finished(client, f"fan{r}"), poll_s=0.01)
                    tree_s.append(time.monotonic() - t0)
                    ok = client.state(f"fan{rep}").result
                    if ok != children:
                        raise RuntimeError(f"the tree ended with {ok} of {children} children")
                    t0 = time.monotonic()
                    ids = [
                        rt.start("bench.kids.work", [steps, step_ms], run_id=f"flat{rep}-{i}")
                        for i in range(children)
                    ]
                    _until(
                        "the independent runs", lambda ids=ids: _all_done(client, ids), poll_s=0.01
                    )
                    flat_s.append(time.monotonic() - t0)
                return {"tree_s": tree_s, "independent_s": flat_s}
            finally:
                workers.stop()
                rt.close()


def _finished(client: Any, run_id: str) -> bool:
    return bool(client.get(run_id).status == "finished")


def _all_done(client: Any, ids: list[str]) -> bool:
    want = set(ids)
    done = client.runs(workflow="bench.kids.work", status="finished", limit=10**6)
    return sum(1 for r in done if r.run_id in want) == len(want)


def run(
    backends: list[str],
    n: int,
    children: int,
    workers_n: int,
    steps: int,
    step_ms: float,
    reps: int,
    wake_concurrency: int = 1,
) -> dict[str, Any]:
    """Both measurements per backend, as one result dict (what ``python -m bench`` keeps)."""
    import os

    out: dict[str, Any] = {
        "load_avg_at_start": os.getloadavg(),
        "wake_worker_concurrency": wake_concurrency,
    }
    for backend in backends:
        w = measure_wake(backend, n, concurrency=wake_concurrency)
        f = measure_fan(backend, children, workers_n, steps, step_ms, reps)
        pw, sw = w["parent_wake_ms"], w["signal_wake_ms"]
        wake_ratio = statistics.median(pw) / statistics.median(sw)
        fan_ratio = statistics.median(
            [t / i for t, i in zip(f["tree_s"], f["independent_s"], strict=True)]
        )
        out[backend] = {
            "parent_wake_p50_ms": percentile(pw, 50),
            "parent_wake_p99_ms": percentile(pw, 99),
            "parent_wake_from_last_step_p50_ms": percentile(w["parent_wake_from_last_step_ms"], 50),
            "signal_wake_p50_ms": percentile(sw, 50),
            "signal_wake_p99_ms": percentile(sw, 99),
            "wake_ratio_p50": wake_ratio,
            "wake_goal": "parent wake ≤ 2x signal wake (p50)",
            "wake_holds": wake_ratio <= 2.0,
            "tree_s": f["tree_s"],
            "independent_s": f["independent_s"],
            "fan_ratio_median": fan_ratio,
            "fan_goal": f"{children} children on {workers_n} workers ≤ 1.2x {children} runs",
            "fan_holds": fan_ratio <= 1.2,
            "samples": {**w, **f},
        }
    out["load_avg_at_end"] = os.getloadavg()
    return out


def report(res: dict[str, Any]) -> str:
    rows = []
    for backend, r in res.items():
        if not isinstance(r, dict) or "wake_ratio_p50" not in r:
            continue
        rows.append(
            [
                backend,
                f"{r['parent_wake_p50_ms']:.1f} / {r['parent_wake_p99_ms']:.1f}",
                f"{r['signal_wake_p50_ms']:.1f} / {r['signal_wake_p99_ms']:.1f}",
                f"{r['wake_ratio_p50']:.2f}x ({'holds' if r['wake_holds'] else '**short**'})",
                f"{statistics.median(r['tree_s']):.2f} s",
                f"{statistics.median(r['independent_s']):.2f} s",
                f"{r['fan_ratio_median']:.2f}x ({'holds' if r['fan_holds'] else '**short**'})",
            ]
        )
    head = [
        "backend",
        "parent wake p50/p99 ms",
        "signal wake p50/p99 ms",
        "ratio (≤ 2x)",
        "tree",
        "independent",
        "ratio (≤ 1.2x)",
    ]
    return table(head, rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="postgres,sqlite")
    ap.add_argument("--n", type=int, default=50, help="parent wakes (and signal wakes)")
    ap.add_argument("--children", type=int, default=100)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5, help="steps per child run")
    ap.add_argument("--step-ms", type=float, default=100.0, help="each step's wait")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--wake-concurrency", type=int, default=1, help="threads of the wake bench's worker"
    )
    args = ap.parse_args()
    res = run(
        args.backends.split(","),
        args.n,
        args.children,
        args.workers,
        args.steps,
        args.step_ms,
        args.reps,
        args.wake_concurrency,
    )
    print("Child runs: parent wake vs signal wake; a tree on workers vs independent runs\n")
    print(report(res))
    path = save("children", {"results": res, "args": vars(args)})
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
