"""The PostgreSQL drain of the scale section (issue 48): ``--workers`` worker processes of
``--concurrency`` each (8 x 4) draining ``--runs`` short runs (one step each) from a fresh
schema: runs per second and the database server's CPU per run.

The runs are made as the scale section makes its big store (:func:`scale.build`): one run is
started through the public API, then SQL copies its ``runs`` and ``events`` rows under new run
ids — every copy a pending run, as ``Runtime.start`` leaves it. The workers start held at a gate;
the clock runs from the gate's opening until every run has finished (``count_runs``, polled).

Database CPU: the workers' connections carry ``application_name=torpor-drain``; their server
backends (``pg_stat_activity``, sampled every 0.2 s) are read in ``/proc/<pid>/stat``
(utime + stime, clock ticks) at the gate and at the end, the difference summed — what the
server spent serving this drain, not the other databases of a shared server (a backend that
exited mid-drain is counted up to its last sample). Also ``pg_stat_database``'s commits of the
database, per run (other users of the same database count too).

    uv run python bench/scale.py --drain                # 2,000 runs
    uv run python bench/scale.py --drain --drain-runs 20000   # the issue's size
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from common import WorkerProcs, load_module, pg_schema, write_module

MODULE = """
import torpor


@torpor.workflow(name="bench.drain", version="1")
def drain(run, n):
    return run.step("s", int, n)
"""
APP = "torpor-drain"
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)


class BackendCPU:
    """CPU ticks of the server backends named ``APP``, sampled in a thread."""

    def __init__(self, url: str):
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.seen: dict[int, int] = {}  # pid -> latest ticks
        self.start: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> dict[int, int]:
        pids = [r[0] for r in self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (APP,))]  # fmt: skip
        for pid in pids:
            t = _cpu_ticks(pid)
            if t is not None:
                self.seen[pid] = t
        return dict(self.seen)

    def begin(self) -> None:
        self.start = self.sample()
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self.sample()

    def end(self) -> float:
        """CPU seconds the backends used since :meth:`begin`."""
        self._stop.set()
        self._thread.join()
        final = self.sample()
        self.conn.close()
        return sum(t - self.start.get(pid, 0) for pid, t in final.items()) / _TICK


def _commits(conn: Any) -> int:
    row = conn.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    return int(row[0])


def drain(runs: int, workers: int = 8, concurrency: int = 4) -> dict[str, Any]:
    """Runs/s and database CPU per run of ``workers`` x ``concurrency`` draining ``runs``."""
    import psycopg
    from scale import _copy_pg

    import torpor

    with tempfile.TemporaryDirectory(prefix="bench-drain-") as d, pg_schema() as url:
        tmp = Path(d)
        mod = write_module(tmp, "bench_drain_wf", MODULE)
        load_module(tmp, mod)
        rt = torpor.Runtime(url)
        tmpl = rt.start("bench.drain", 1)
        client = torpor.Client(rt.store)
        t0 = time.perf_counter()
        with psycopg.connect(url) as pg:
            for tbl in ("runs", "events"):
                _copy_pg(pg, tbl, tmpl, "d", runs - 1)
            pg.commit()
            pg.execute("ANALYZE runs")
            pg.execute("ANALYZE events")
            pg.commit()
        load_s = time.perf_counter() - t0
        wurl = f"{url}&application_name={quote(APP)}"
        procs = WorkerProcs(wurl, tmp, mod, concurrency=concurrency)
        procs.start(workers)
        cpu = BackendCPU(url)
        try:
            with psycopg.connect(url, autocommit=True) as mon:
                c0 = _commits(mon)
                cpu.begin()
                t0 = time.perf_counter()
                procs.open_gate()
                while True:
                    done = sum(c.count for c in rt.store.count_runs() if c.status == "finished")
                    if done >= runs:
                        break
                    time.sleep(0.05)
                elapsed = time.perf_counter() - t0
                db_cpu_s = cpu.end()
                commits = _commits(mon) - c0
            outcomes = {
                str(c.outcome): c.count for c in rt.store.count_runs() if c.status == "finished"
            }
        finally:
            procs.stop()
            rt.close()
    del client
    return {
        "runs": runs, "workers": workers, "concurrency": concurrency, "load_s": load_s,
        "elapsed_s": elapsed, "runs_per_s": runs / elapsed, "db_cpu_s": db_cpu_s,
        "db_cpu_ms_per_run": db_cpu_s * 1e3 / runs, "commits_per_run": commits / runs,
        "outcomes": outcomes, "load_avg": os.getloadavg(),
    }  # fmt: skip


def lines(res: dict[str, Any]) -> list[str]:
    return [
        f"PostgreSQL drain: {res['workers']} workers x {res['concurrency']} concurrency, "
        f"{res['runs']:,} one-step runs: {res['runs_per_s']:.0f} runs/s "
        f"({res['elapsed_s']:.1f} s), database CPU {res['db_cpu_ms_per_run']:.2f} ms per run "
        f"({res['db_cpu_s']:.1f} s of the server's backends), "
        f"{res['commits_per_run']:.1f} commits per run; outcomes {res['outcomes']}; "
        f"load average at the end {res['load_avg'][0]:.1f} (a shared 2-core machine)."
    ]
