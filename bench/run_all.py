"""torpor against its peers and the physical floor, in one invocation (issue 6).

    uv run --group bench python -m bench            # everything (about 20-30 minutes)
    uv run --group bench python -m bench --quick    # fewer repetitions and shorter histories

Writes ``bench/results/report.md`` (the tables), ``bench/results/results.json`` (every sample)
and ``bench/results/resume_latency.png``, ``bench/results/per_step_cost.png``.

Method: every workload runs in a fresh subprocess on a fresh database (SQLite file in a temp
dir; PostgreSQL schema created and dropped). Repetitions are interleaved round-robin across
systems, so slow phases of this shared, noisy machine hit every system alike; each figure is
the median of the repetitions with its min and max, and every ratio is computed within one
repetition (torpor and the floor measured back to back) before taking the median. fsyncs per
step come from one extra pass per system under ``strace -f -c`` (attached to the process, to
the PostgreSQL backends of its connections, or to the peer's server); bytes per step are the
growth of the database (SQLite file with its WAL checkpointed, or the schema's relations, or
the server's data directory) divided by the steps.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import RESULTS, machine, pg_server_url  # noqa: E402
from servers import Server, Unavailable, restate_server, temporal_server  # noqa: E402

WORKLOADS = HERE / "workloads.py"


class Failed(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


_PYCACHE: list[str] = []


def pycache() -> str:
    """This invocation's bytecode cache (``PYTHONPYCACHEPREFIX``), removed at exit. The
    workloads compile each module once and load it from there afterwards, as an installed
    package does, even where ``PYTHONDONTWRITEBYTECODE`` is set (it would add the compilation
    of every imported module to each process's start: the cold-start figures would measure
    the compiler); the repository's and the venv's directories get no ``__pycache__``."""
    if not _PYCACHE:
        _PYCACHE.append(tempfile.mkdtemp(prefix="bench-pycache-"))
        atexit.register(shutil.rmtree, _PYCACHE[0], True)
    return _PYCACHE[0]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(HERE.parent / "src"), str(HERE)])
    e.pop("PYTHONDONTWRITEBYTECODE", None)
    e["PYTHONPYCACHEPREFIX"] = pycache()
    e.setdefault("TORPOR_SIGNING_KEY", "bench")
    e.setdefault("TORPOR_HOME", tempfile.mkdtemp(prefix="bench-home-"))
    e["DBOS__APPVERSION"] = "bench"
    return e


def run_workload(name: str, args: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    p = subprocess.run(
        [sys.executable, str(WORKLOADS), name, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env(),
    )
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]))
    tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
    raise Failed(f"{name} exited {p.returncode}: {' | '.join(tail)[-400:]}")


# --------------------------------------------------------------------------- stats


def summary(values: list[float]) -> dict[str, Any]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {
        "median": statistics.median(vals),
        "min": min(vals),
        "max": max(vals),
        "n": len(vals),
    }


def fmt(s: dict[str, Any] | None, digits: int = 0, unit: str = "") -> str:
    if not s or s.get("median") is None:
        return "—"
    f = f"{{:,.{digits}f}}"
    return f"{f.format(s['median'])}{unit} ({f.format(s['min'])}-{f.format(s['max'])})"


# --------------------------------------------------------------------------- databases


@contextmanager
def pg_schema(base: str) -> Iterator[tuple[str, str]]:
    """(url whose connections use a fresh schema, schema name)."""
    from urllib.parse import quote

    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in base else "?"
    try:
        yield f"{base}{sep}options={quote(f'-csearch_path={schema}')}", schema
    finally:
        with psycopg.connect(base, autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextmanager
def tmpdir() -> Iterator[Path]:
    # On the same disk as the repository (not a tmpfs): fsync must reach a real device.
    d = Path(tempfile.mkdtemp(prefix="bench-", dir=os.environ.get("TORPOR_BENCH_TMP", "/var/tmp")))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------- per-step cost


class System:
    """One row of the per-step table: how to run its workload once."""

    def __init__(
        self,
        key: str,
        label: str,
        backend: str,
        run: Callable[[int, bool], dict[str, Any]],
        note: str = "",
        n: int | None = None,
        server: list[Server | None] | None = None,
    ):
        self.key, self.label, self.backend, self.run, self.note, self.n = (
            key,
            label,
            backend,
            run,
            note,
            n,
        )
        #: The peer server this system's workload talks to (paused while others run).
        self.server = server
        self.samples: list[dict[str, Any]] = []
        self.count: dict[str, Any] | None = None
        self.error: str | None = None


def sqlite_system(
    workload: str, extra: dict[str, Any] | None = None, query: str = ""
) -> Callable[..., dict]:
    """``query``: options appended to the SQLite URL (e.g. ``?synchronous=OFF``)."""

    def run(n: int, count: bool) -> dict[str, Any]:
        with tmpdir() as d:
            return run_workload(
                workload,
                {"n": n, "url": f"sqlite:///{d}/db.sqlite{query}", "count": count, **(extra or {})},
            )

    return run


def pg_system(workload: str, base: str, extra: dict[str, Any] | None = None) -> Callable[..., dict]:
    def run(n: int, count: bool) -> dict[str, Any]:
        with pg_schema(base) as (url, schema):
            if workload == "dbos_steps":
                args = {"url": base, "schema": schema}
            else:
                args = {"url": url, "schema": schema}
            return run_workload(workload, {"n": n, "count": count, **args, **(extra or {})})

    return run


def floor_systems(base: str | None) -> list[System]:
    def fsync_loop(n: int, count: bool) -> dict[str, Any]:
        with tmpdir() as d:
            return run_workload("floor_fsync", {"n": n, "dir": str(d), "count": count})

    def sqlite_floor(synchronous: str) -> Callable[[int, bool], dict[str, Any]]:
        def run(n: int, count: bool) -> dict[str, Any]:
            with tmpdir() as d:
                args = {"n": n, "path": f"{d}/raw.sqlite", "count": count}
                return run_workload("floor_sqlite", {**args, "synchronous": synchronous})

        return run

    out = [
        System("floor.fsync", "floor: write+fsync loop", "disk", fsync_loop),
        System(
            "floor.sqlite",
            "floor: raw SQLite INSERT+COMMIT (WAL, synchronous=FULL)",
            "sqlite",
            sqlite_floor("FULL"),
        ),
        System(
            "floor.sqlite_off",
            "floor: raw SQLite INSERT+COMMIT (WAL, synchronous=OFF)",
            "sqlite",
            sqlite_floor("OFF"),
            note="not durable against power loss (nothing is fsynced)",
        ),
    ]
    if base:

        def pg_floor(n: int, count: bool) -> dict[str, Any]:
            with pg_schema(base) as (url, schema):
                return run_workload(
                    "floor_postgres", {"n": n, "url": url, "schema": schema, "count": count}
                )

        out.append(
            System(
                "floor.postgres",
                "floor: raw PostgreSQL INSERT, one per transaction",
                "postgres",
                pg_floor,
            )
        )
    return out


def peer_systems(base: str | None, n: int) -> list[System]:
    out = [
        System(
            "torpor.sqlite", "torpor (default: synchronous=FULL)", "sqlite",
            sqlite_system("torpor_steps"),
        ),
        System(
            "torpor.sqlite_off", "torpor ?synchronous=OFF", "sqlite",
            sqlite_system("torpor_steps", query="?synchronous=OFF"),
            note="not durable against power loss (nothing is fsynced)",
        ),
        System("dbos.sqlite", "DBOS", "sqlite", sqlite_system("dbos_steps")),
        System(
            "langgraph.sqlite", "LangGraph durability=sync", "sqlite",
            sqlite_system("langgraph_steps", {"durability": "sync"}),
        ),
        System(
            "langgraph_default.sqlite", "LangGraph default durability (async)", "sqlite",
            sqlite_system("langgraph_steps", {"durability": "default"}),
            note="not durable per step: see the SIGKILL table",
        ),
    ]  # fmt: skip
    if base:
        out += [
            System("torpor.postgres", "torpor", "postgres", pg_system("torpor_steps", base)),
            System("dbos.postgres", "DBOS", "postgres", pg_system("dbos_steps", base)),
            System(
                "langgraph.postgres", "LangGraph durability=sync", "postgres",
                pg_system("langgraph_steps", base, {"durability": "sync"}),
            ),
            System(
                "langgraph_default.postgres", "LangGraph default durability (async)", "postgres",
                pg_system("langgraph_steps", base, {"durability": "default"}),
                note="not durable per step: see the SIGKILL table",
            ),
        ]  # fmt: skip
    return out


def server_system(
    key: str, label: str, backend: str, workload: str, server: list[Server | None],
    extra: dict[str, Any], n: int | None, note: str,
) -> System:  # fmt: skip
    from workloads import fsync_counter

    def run(k: int, count: bool) -> dict[str, Any]:
        srv = server[0]
        if srv is None:
            raise Failed("server not running")
        addr = {"ingress": srv.address} if workload == "restate_steps" else {"address": srv.address}
        before = srv.data_bytes()
        with fsync_counter(srv.pids(), count) as fs:
            out = run_workload(workload, {"n": k, **addr, **extra})
        out["bytes_per_step"] = max(0, srv.data_bytes() - before) / (k + 10)
        out["fsyncs"] = fs.get("total")
        return out

    return System(key, label, backend, run, note=note, n=n, server=server)


def _only_server_of(system: System | None, systems: list[System]) -> None:
    """Run only the peer server ``system`` talks to (if any); pause the others (SIGSTOP), so
    that an idle server's background work does not load the machine while another system is
    measured. ``None``: resume every server."""
    holders = {id(s.server): s.server for s in systems if s.server is not None}
    for holder in holders.values():
        srv = holder[0]
        if srv is not None:
            srv.pause(system is not None and system.server is not holder)
    if system is not None and system.server is not None:
        time.sleep(0.5)  # let a resumed server catch up with its timers before it is measured


def measure_per_step(systems: list[System], n: int, reps: int, count: bool) -> None:
    try:
        _measure_per_step(systems, n, reps, count)
    finally:
        _only_server_of(None, systems)


def _run_system(s: System, systems: list[System], n: int, count: bool) -> dict[str, Any]:
    """One run of ``s``'s workload with only its own peer server running; raises _FAILURES."""
    _only_server_of(s, systems)
    return s.run(s.n or n, count)


_FAILURES = (Failed, Unavailable, subprocess.TimeoutExpired, OSError)


def _measure_per_step(systems: list[System], n: int, reps: int, count: bool) -> None:
    for rep in range(reps):
        for s in [s for s in systems if not s.error]:
            try:
                r = _run_system(s, systems, n, False)
            except _FAILURES as exc:
                s.error = str(exc)
                log(f"per-step {s.key}: FAILED {exc}")
                continue
            s.samples.append(r)
            log(f"per-step rep {rep + 1}/{reps} {s.key}: {r['us_per_step']:,.0f} µs/step")
    if count and shutil.which("strace"):
        for s in [s for s in systems if not s.error]:
            try:
                r = _run_system(s, systems, n, True)
            except _FAILURES as exc:
                log(f"fsync count {s.key}: failed {exc}")
                continue
            r["n_steps"] = s.n or n
            s.count = r
            log(f"fsync count {s.key}: {r.get('fsyncs')} for {r['n_steps']} steps")


def ratio_samples(a: System, b: System) -> list[float]:
    return [
        x["us_per_step"] / y["us_per_step"]
        for x, y in zip(a.samples, b.samples, strict=False)
        if x.get("us_per_step") and y.get("us_per_step")
    ]


# --------------------------------------------------------------------------- resume


def resume_once(
    system: str, url: str, steps: int, stamps: Path, build_url: str | None = None
) -> dict[str, float]:
    """One resume of an already built history: returns both latencies in ms."""
    args = {"url": url, "steps": steps, "stamps": str(stamps)}
    n_before = len(stamps.read_text().splitlines()) if stamps.exists() else 0
    t_start = time.time()
    p = subprocess.run(
        [sys.executable, str(WORKLOADS), f"{system}_resume", json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env(),
    )
    lines = stamps.read_text().splitlines() if stamps.exists() else []
    if len(lines) <= n_before:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        raise Failed(f"{system} resume did not reach the new step: {' | '.join(tail)[-300:]}")
    t_first = float(lines[-1])
    call = [float(x.split()[1]) for x in p.stdout.splitlines() if x.startswith("CALL ")]
    if not call:
        raise Failed(f"{system} resume printed no CALL line")
    return {"call_ms": (t_first - call[0]) * 1000, "process_ms": (t_first - t_start) * 1000}


def build_history(system: str, url: str, steps: int, stamps: Path) -> None:
    args = {"url": url, "steps": steps, "stamps": str(stamps)}
    p = subprocess.run(
        [sys.executable, str(WORKLOADS), f"{system}_resume_build", json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=3600,
        env=env(),
    )
    if p.returncode != -signal.SIGKILL:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        raise Failed(f"building {steps} steps for {system} failed: {' | '.join(tail)[-300:]}")


def measure_resume(
    base: str | None, lengths: list[int], reps: int, lg_lengths: list[int], dbos_lengths: list[int]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    plans: list[tuple[str, str, list[int]]] = [("torpor", "sqlite", lengths)]
    if base:
        plans.append(("torpor", "postgres", lengths))
    plans += [("langgraph", "sqlite", lg_lengths), ("dbos", "sqlite", dbos_lengths)]
    for system, backend, lens in plans:
        key = f"{system}.{backend}"
        out[key] = {}
        for steps in lens:
            with tmpdir() as d, contextmanager(_backend_url)(base, backend, d) as (url, build):
                stamps = d / "stamps"
                try:
                    t0 = time.monotonic()
                    build_history(system, build if system == "torpor" else url, steps, stamps)
                    log(f"resume {key}: built {steps:,} steps in {time.monotonic() - t0:.1f}s")
                    samples = [resume_once(system, url, steps, stamps) for _ in range(reps)]
                except (Failed, subprocess.TimeoutExpired) as exc:
                    out[key][str(steps)] = {"error": str(exc)}
                    log(f"resume {key} {steps}: FAILED {exc}")
                    continue
            res = {
                "call_ms": summary([s["call_ms"] for s in samples]),
                "process_ms": summary([s["process_ms"] for s in samples]),
                "samples": samples,
            }
            out[key][str(steps)] = res
            log(
                f"resume {key} {steps:,}: call {fmt(res['call_ms'], 1)} ms, "
                f"process {fmt(res['process_ms'], 0)} ms"
            )
    return out


def _backend_url(base: str | None, backend: str, d: Path) -> Iterator[tuple[str, str]]:
    """(url to resume on, url to build the history on). SQLite histories are built with
    synchronous=OFF (only to build them fast; the process is SIGKILLed, not the machine, so
    nothing written is lost) and resumed with torpor's default (FULL)."""
    if backend == "sqlite":
        yield f"sqlite:///{d}/db.sqlite", f"sqlite:///{d}/db.sqlite?synchronous=OFF"
        return
    assert base is not None
    with pg_schema(base) as (url, _schema):
        yield url, url


# --------------------------------------------------------------------------- kill test


def kill_test(system: str, durability: str | None, kills: int) -> dict[str, Any]:
    """Kill the victim with SIGKILL at a random moment mid-loop; count the steps the engine
    had reported done (acknowledged) that are missing from the record afterwards."""
    lost_total, acked_total, per = 0, 0, []
    for _ in range(kills):
        with tmpdir() as d:
            url = f"sqlite:///{d}/db.sqlite"
            acks = d / "acks"
            args: dict[str, Any] = {"url": url, "acks": str(acks)}
            if durability:
                args["durability"] = durability
            p = subprocess.Popen(
                [sys.executable, str(WORKLOADS), f"{system}_kill", json.dumps(args)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env(),
            )
            assert p.stdout is not None
            if "READY" not in p.stdout.readline():
                p.kill()
                raise Failed(f"{system} kill victim did not start")
            time.sleep(random.uniform(0.5, 2.0))
            p.send_signal(signal.SIGKILL)
            p.wait()
            acked = {int(x) for x in acks.read_text().split()} if acks.exists() else set()
            rec = set(run_workload(f"{system}_kill_count", {"url": url})["recorded"])
            lost = len(acked - rec)
            lost_total += lost
            acked_total += len(acked)
            per.append({"acked": len(acked), "recorded": len(rec), "lost": lost})
    return {"kills": kills, "acked": acked_total, "lost": lost_total, "runs": per}


# --------------------------------------------------------------------------- wake / effect


def measure_wake(base: str | None, n: int) -> dict[str, Any]:
    import wake_latency
    from common import percentile

    out: dict[str, Any] = {}
    for backend in ["sqlite"] + (["postgres"] if base else []):
        try:
            lat = wake_latency.measure(backend, n, 0.05)
        except Exception as exc:  # a failed measurement is reported, not fatal
            out[backend] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        out[backend] = {
            "n": len(lat),
            "p50_ms": percentile(lat, 50),
            "p99_ms": percentile(lat, 99),
            "max_ms": max(lat),
        }
        log(f"wake {backend}: p50 {out[backend]['p50_ms']:.1f} ms p99 {out[backend]['p99_ms']:.1f}")
    return out


def measure_effects(
    base: str | None, sizes: list[int], reps: int, per_sample: int = 1000
) -> dict[str, Any]:
    """Runs of ``n`` effects against runs of ``n`` plain steps, for each ``n`` in ``sizes``, on
    each backend. Every sample covers ``per_sample`` steps or effects (``per_sample // n`` runs
    of ``n``, executed back to back in one process), so that small runs are timed, and their
    bytes counted, over as many appends as large ones. Repetitions are interleaved across
    backends and sizes; within one, the steps and the effects of a size run back to back and
    their ratio is taken there."""
    out: dict[str, Any] = {}
    backends = [("sqlite", None)] + ([("postgres", base)] if base else [])
    samples: dict[tuple[str, int], dict[str, list[dict[str, Any]]]] = {
        (backend, n): {"steps": [], "effects": []} for backend, _ in backends for n in sizes
    }
    errors: dict[tuple[str, int], str] = {}
    for rep in range(reps):
        for (backend, b), n in ((bb, n) for bb in backends for n in sizes):
            if (backend, n) in errors:
                continue
            runs = max(1, per_sample // n)
            try:
                pair = {}
                for kind in ("steps", "effects"):
                    args = {"n": n, "kind": kind, "runs": runs}
                    if b is None:
                        with tmpdir() as d:
                            r = run_workload(
                                "torpor_steps", {**args, "url": f"sqlite:///{d}/db.sqlite"}
                            )
                    else:
                        with pg_schema(b) as (url, schema):
                            r = run_workload("torpor_steps", {**args, "url": url, "schema": schema})
                    pair[kind] = r
            except _FAILURES as exc:
                errors[(backend, n)] = str(exc)
                log(f"effects {backend} x{n}: FAILED {exc}")
                continue
            for kind, r in pair.items():
                samples[(backend, n)][kind].append(r)
            log(
                f"effects rep {rep + 1}/{reps} {backend} x{n} ({runs} runs): "
                f"{pair['effects']['us_per_step'] / pair['steps']['us_per_step']:.2f}x a step, "
                f"{pair['effects']['bytes_per_step']:,.0f} B/effect"
            )
    for backend, _ in backends:
        for n in sizes:
            key = f"{backend}, {n:,} per run"
            if (backend, n) in errors:
                out[key] = {"backend": backend, "n": n, "error": errors[(backend, n)]}
                continue
            step_s, eff_s = samples[(backend, n)]["steps"], samples[(backend, n)]["effects"]
            out[key] = {
                "backend": backend,
                "n": n,
                "runs": max(1, per_sample // n),
                "step_us": summary([r["us_per_step"] for r in step_s]),
                "effect_us": summary([r["us_per_step"] for r in eff_s]),
                "ratio": summary(
                    [
                        e["us_per_step"] / s["us_per_step"]
                        for e, s in zip(eff_s, step_s, strict=True)
                    ]
                ),
                "step_bytes": summary([r["bytes_per_step"] for r in step_s]),
                "effect_bytes": summary([r["bytes_per_step"] for r in eff_s]),
                "samples": {"steps": step_s, "effects": eff_s},
            }
    return out


# --------------------------------------------------------------------------- cold start

COLD_RESUME = HERE / "cold_resume.py"

#: (key, label, target in ms or None) of the cold-start rows, in the report's order.
COLD_ROWS: list[tuple[str, str, float | None]] = [
    ("python", "`python -c pass`", None),
    ("import", "`python -c 'import torpor'`", None),
    ("version", "`torpor --version`", 200),
    ("ls", "`torpor ls`", 700),
    ("resume", "cold resume (SQLite)", 400),
]


def measure_cold(runs: int, resume_steps: int = 10, ls_runs: int = 5) -> dict[str, Any]:
    """Wall time of fresh processes, on the parent's clock, round-robin for ``runs`` rounds
    (after one warm-up round, not kept, that brings the files into the page cache):
    ``python -c pass`` (the interpreter alone), ``import torpor``, the venv's ``torpor``
    console script with ``--version`` and with ``ls`` on a store of ``ls_runs`` finished runs
    (``TORPOR_DATABASE_URL``), and a cold resume: ``cold_resume.py`` resumes a run SIGKILLed
    as its step ``resume_steps`` started, from the parent's timestamp right before spawning
    to the one the first new step's body writes (the body SIGKILLs again, so every round
    resumes the same history). Each figure is also given minus ``python -c pass`` of the same
    round."""
    e = env()
    py = sys.executable
    script = Path(sys.executable).parent / "torpor"  # the console script, not `uv run torpor`
    out: dict[str, Any] = {
        "runs": runs,
        "resume_steps": resume_steps,
        "ls_runs": ls_runs,
        "torpor_script": str(script),
        "rows": {},
    }
    with tmpdir() as d:
        resume_url = f"sqlite:///{d}/resume.sqlite"
        ls_url = f"sqlite:///{d}/ls.sqlite"
        stamps = d / "stamps"
        run_workload("cold_ls_store", {"url": ls_url, "runs": ls_runs})
        resume_cmd = [py, str(COLD_RESUME), "resume", resume_url, str(stamps), str(resume_steps)]
        p = subprocess.run(
            [py, str(COLD_RESUME), "build", resume_url, str(stamps), str(resume_steps)],
            capture_output=True,
            text=True,
            timeout=120,
            env=e,
        )
        if p.returncode != -signal.SIGKILL:
            tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
            raise Failed(f"building the cold-resume run failed: {' | '.join(tail)[-300:]}")

        def wall(cmd: list[str], extra: dict[str, str] | None = None) -> Callable[[], dict]:
            def once() -> dict[str, Any]:
                t0 = time.perf_counter()
                p = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=120, env={**e, **(extra or {})}
                )
                ms = (time.perf_counter() - t0) * 1000
                if p.returncode != 0:
                    tail = (p.stderr or p.stdout).strip().splitlines()[-2:]
                    raise Failed(f"{cmd[-1]} exited {p.returncode}: {' | '.join(tail)[-300:]}")
                return {"ms": ms}

            return once

        def resume() -> dict[str, Any]:
            n_before = len(stamps.read_text().splitlines())
            t0 = time.time()
            p = subprocess.run(resume_cmd, capture_output=True, text=True, timeout=120, env=e)
            lines = stamps.read_text().splitlines()
            if len(lines) <= n_before:
                tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
                raise Failed(f"cold resume did not reach the new step: {' | '.join(tail)[-300:]}")
            t_step = float(lines[-1])
            ph = {x.split()[1]: float(x.split()[2]) for x in p.stdout.splitlines() if x[:2] == "T "}
            return {
                "ms": (t_step - t0) * 1000,
                # interpreter start + `import torpor`; Runtime(url); resume -> first new step
                "import_ms": (ph["import"] - t0) * 1000,
                "open_ms": (ph["open"] - ph["import"]) * 1000,
                "resume_ms": (t_step - ph["open"]) * 1000,
            }

        measures: dict[str, Callable[[], dict[str, Any]]] = {
            "python": wall([py, "-c", "pass"]),
            "import": wall([py, "-c", "import torpor"]),
            "version": wall([str(script), "--version"]),
            "ls": wall([str(script), "ls"], {"TORPOR_DATABASE_URL": ls_url}),
            "resume": resume,
        }
        samples: dict[str, list[dict[str, Any]]] = {k: [] for k in measures}
        errors: dict[str, str] = {}
        if not script.exists():
            errors["version"] = errors["ls"] = f"no torpor script at {script}"
        for rnd in range(runs + 1):
            keys = list(measures)
            keys = keys[rnd % len(keys) :] + keys[: rnd % len(keys)]  # rotate the order
            for key in keys:
                if key in errors:
                    continue
                try:
                    r = measures[key]()
                except _FAILURES as exc:
                    errors[key] = str(exc)
                    log(f"cold {key}: FAILED {exc}")
                    continue
                if rnd:  # round 0 warms the page cache
                    samples[key].append({"round": rnd, **r})
            if rnd:
                log(
                    f"cold round {rnd}/{runs}: "
                    + ", ".join(f"{k} {v[-1]['ms']:.0f} ms" for k, v in samples.items() if v)
                )
    base_by_round = {x["round"]: x["ms"] for x in samples["python"]}
    for key, label, limit in COLD_ROWS:
        xs = samples[key]
        row: dict[str, Any] = {"label": label, "target_ms": limit}
        if key in errors:
            row["error"] = errors[key]
        row["ms"] = summary([x["ms"] for x in xs])
        row["over_python_ms"] = summary(
            [x["ms"] - base_by_round[x["round"]] for x in xs if x["round"] in base_by_round]
        )
        if key == "resume":
            for part in ("import_ms", "open_ms", "resume_ms"):
                row[part] = summary([x[part] for x in xs])
        row["samples"] = xs
        out["rows"][key] = row
    return out


# --------------------------------------------------------------------------- report


def per_step_rows(systems: list[System]) -> list[dict[str, Any]]:
    rows = []
    for s in systems:
        us = summary([x["us_per_step"] for x in s.samples])
        by = summary(
            [x["bytes_per_step"] for x in s.samples if x.get("bytes_per_step") is not None]
        )
        fs = None
        if s.count and s.count.get("fsyncs") is not None:
            fs = s.count["fsyncs"] / s.count["n_steps"]
        rows.append(
            {
                "key": s.key,
                "label": s.label,
                "backend": s.backend,
                "us_per_step": us,
                "steps_per_s": None if us["median"] is None else 1e6 / us["median"],
                "bytes_per_step": by,
                "fsyncs_per_step": fs,
                "error": s.error,
                "note": s.note,
                "samples": s.samples,
            }
        )
    return rows


def plots(per_step: list[dict[str, Any]], resume: dict[str, Any]) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return [f"(no plots: matplotlib not installed: {exc})"]
    made: list[str] = []
    fig, ax = plt.subplots(figsize=(8, 5))
    plotted = False
    for key, by_len in resume.items():
        xs = [int(k) for k, v in by_len.items() if "call_ms" in v]
        if not xs:
            continue
        med = [by_len[str(x)]["call_ms"]["median"] for x in xs]
        lo = [m - by_len[str(x)]["call_ms"]["min"] for x, m in zip(xs, med, strict=True)]
        hi = [by_len[str(x)]["call_ms"]["max"] - m for x, m in zip(xs, med, strict=True)]
        ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, label=key)
        plotted = True
    if plotted:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("completed steps in the history")
    ax.set_ylabel("resume call -> first new step (ms, median, min-max)")
    ax.set_title("Resume latency after SIGKILL vs history length")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    if plotted:
        fig.savefig(RESULTS / "resume_latency.png", dpi=120)
        plt.close(fig)
        made.append("resume_latency.png")

    rows = [r for r in per_step if r["us_per_step"]["median"] is not None]
    if not rows:
        return made
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.5))
    labels = [f"{r['label']} [{r['backend']}]" for r in rows]
    med = [r["us_per_step"]["median"] for r in rows]
    lo = [m - r["us_per_step"]["min"] for m, r in zip(med, rows, strict=True)]
    hi = [r["us_per_step"]["max"] - m for m, r in zip(med, rows, strict=True)]
    colors = [
        "tab:green" if r["key"].startswith("torpor") else
        "tab:gray" if r["key"].startswith("floor") else "tab:blue"
        for r in rows
    ]  # fmt: skip
    ax.barh(range(len(rows)), med, xerr=[lo, hi], color=colors, capsize=3)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("µs per durable step (median, min-max; log scale)")
    ax.set_title("Per-step durability cost")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(RESULTS / "per_step_cost.png", dpi=120)
    plt.close(fig)
    made.append("per_step_cost.png")
    return made


def report(res: dict[str, Any]) -> str:
    L: list[str] = []
    m = res["machine"]
    L.append("# torpor benchmarks (issues 6 and 11)\n")
    L.append(
        f"Measured {res['at']} on {m['platform']}, {m['cpus']} CPUs, Python {m['python']}, "
        f"load average at start {tuple(round(x, 2) for x in m['load_avg_at_start'])}; "
        f"PostgreSQL: {res.get('postgres') or 'not used'}. "
        f"Command: `{res['command']}`. Medians of {res['args']['reps']} interleaved "
        "repetitions, (min-max) after each figure; ratios are computed within one repetition. "
        f"Bytecode: {res.get('bytecode', 'as the environment has it')}.\n"
    )
    if res["per_step"]:
        L.append("## Per-step durability cost\n")
        L.append(
            f"{res['args']['steps']:,} trivial sequential steps, each durably recorded before "
            "the next begins (fresh database per repetition).\n"
        )
        L.append("| system | backend | µs/step | steps/s | fsyncs/step | bytes/step | note |")
        L.append("|---|---|---|---|---|---|---|")
        for r in res["per_step"]:
            if r["error"]:
                L.append(f"| {r['label']} | {r['backend']} | not measured | | | | {r['error']} |")
                continue
            fs = "—" if r["fsyncs_per_step"] is None else f"{r['fsyncs_per_step']:.2f}"
            sps = "—" if r["steps_per_s"] is None else f"{r['steps_per_s']:,.0f}"
            L.append(
                f"| {r['label']} | {r['backend']} | {fmt(r['us_per_step'])} | {sps} | {fs} | "
                f"{fmt(r['bytes_per_step'])} | {r['note']} |"
            )
        L.append("")
    L.append("## Targets (ratios from this invocation)\n")
    L.append("| target | measured | holds |")
    L.append("|---|---|---|")
    for t in res["targets"]:
        L.append(f"| {t['target']} | {t['measured']} | {'holds' if t['holds'] else '**short**'} |")
    L.append("")
    if res["resume"]:
        L.append("## Resume latency after SIGKILL vs history length\n")
        L.append(
            "`call`: from the resume call (torpor `Runtime.resume`, LangGraph `graph.invoke(None, "
            "config)`, DBOS `DBOS.launch()` recovery) to the first new step starting; `process`: "
            "from spawning a fresh interpreter to the same moment. torpor's workflow checkpoints "
            "its loop state every 10 steps (`run.checkpoint` / `run.restore`).\n"
        )
        L.append("| system | steps | call ms | process ms |")
        L.append("|---|---|---|---|")
        for key, by_len in res["resume"].items():
            for steps, v in by_len.items():
                if "error" in v:
                    L.append(f"| {key} | {int(steps):,} | failed: {v['error'][:120]} | |")
                else:
                    call, proc = fmt(v["call_ms"], 1), fmt(v["process_ms"])
                    L.append(f"| {key} | {int(steps):,} | {call} | {proc} |")
        L.append("")
    if res["wake"]:
        L.append("## Wake latency (signal from another process -> next step starts)\n")
        L.append("| backend | wakes | p50 ms | p99 ms | max ms |")
        L.append("|---|---|---|---|---|")
        for b, v in res["wake"].items():
            if "error" in v:
                L.append(f"| {b} | failed: {v['error']} | | | |")
            else:
                ms = f"{v['p50_ms']:.1f} | {v['p99_ms']:.1f} | {v['max_ms']:.1f}"
                L.append(f"| {b} | {v['n']} | {ms} |")
        L.append("")
    if res.get("children"):
        import children as _children  # (bench/children.py, issue 37)

        L.append("## Child runs (issue 37)\n")
        L.append(
            "Parent wake after its last child vs a signal wake, alternating on one idle worker; "
            "a tree of children on worker processes vs as many independent runs "
            "(`bench/children.py`).\n"
        )
        if "error" in res["children"]:
            L.append(f"failed: {res['children']['error']}\n")
        else:
            L.append(_children.report(res["children"]))
            L.append("")
    if res.get("streaming"):
        import streaming as _streaming  # (bench/streaming.py, issue 40)

        L.append("## Streaming (issue 40)\n")
        L.append(
            "A 2,000-token reply streamed into the run's stream vs the same call not streamed; "
            "delta latency writer -> reader on another connection vs a bare LISTEN/NOTIFY "
            "round trip (`bench/streaming.py`).\n"
        )
        if "error" in res["streaming"]:
            L.append(f"failed: {res['streaming']['error']}\n")
        else:
            L.append(_streaming.report(res["streaming"]))
            L.append("")
    if res["effects"]:
        L.append("## Effect overhead (intent + observation vs a plain step)\n")
        L.append(
            "Runs of n effects (`run.effect`: the intent committed before the call, the "
            "observation written with the next append — since issue 28 one durable append per "
            "effect) against runs of n plain steps (one append), "
            "at n = 10, 100 and 1,000 per run. Each sample covers 1,000 effects or steps (100 runs "
            "of 10, 10 of 100, one of 1,000, executed back to back in one process), on a fresh "
            "database; a run's own events (claim, completion) are part of the figures, shared "
            "out over its n. Bytes: growth of the SQLite file (WAL checkpointed) or of the "
            "schema's relations over the measured runs, per effect or step.\n"
        )
        L.append(
            "| backend, effects per run | µs/step | µs/effect | effect/step | bytes/step "
            "| bytes/effect |"
        )
        L.append("|---|---|---|---|---|---|")
        for b, v in res["effects"].items():
            if "error" in v:
                L.append(f"| {b} | failed: {v['error'][:120]} | | | | |")
                continue
            L.append(
                f"| {b} | {fmt(v['step_us'])} | {fmt(v['effect_us'])} | {fmt(v['ratio'], 2)} | "
                f"{fmt(v['step_bytes'])} | {fmt(v['effect_bytes'])} |"
            )
        L.append("")
    cold = res.get("cold") or {}
    if cold.get("rows") or cold.get("error"):
        L.append("## Cold start (fresh processes)\n")
        L.append(
            f"Wall time of a fresh process on the parent's clock, {cold.get('runs')} rounds "
            "round-robin (order rotated each round) after one warm-up round; medians (min-max) "
            "in ms, and minus `python -c pass` of the same round. `torpor` is the venv's "
            f"console script, `ls` on a SQLite store of {cold.get('ls_runs')} finished runs. "
            "Cold resume: a new process runs `bench/cold_resume.py` (import torpor, "
            f"`Runtime(url)`, `resume(run_id)`) on a run of {cold.get('resume_steps')} "
            "completed steps SIGKILLed as its next step started, timed from right before the "
            "spawn to the first new step's body; its parts: interpreter start + `import "
            "torpor`, `Runtime(url)`, `resume` to the step.\n"
        )
        if cold.get("error"):
            L.append(f"Failed: {cold['error']}\n")
        L.append("| process | ms | minus `python -c pass` | target |")
        L.append("|---|---|---|---|")
        for key, row in cold.get("rows", {}).items():
            limit = "" if row["target_ms"] is None else f"≤ {row['target_ms']:.0f} ms"
            if row.get("error"):
                L.append(f"| {row['label']} | failed: {row['error'][:120]} | | {limit} |")
                continue
            over = "" if key == "python" else fmt(row["over_python_ms"])
            L.append(f"| {row['label']} | {fmt(row['ms'])} | {over} | {limit} |")
            if key == "resume":
                for part, text in (
                    ("import_ms", "interpreter start + `import torpor`"),
                    ("open_ms", "`Runtime(url)`"),
                    ("resume_ms", "`resume` -> first new step"),
                ):
                    L.append(f"| &nbsp;&nbsp;of which {text} | {fmt(row[part], 1)} | | |")
        L.append("")
    if res["kill"]:
        L.append("## Steps lost under SIGKILL (SQLite, killed at a random moment mid-loop)\n")
        L.append(
            "A step counts as acknowledged once the engine handed control back after it "
            "(torpor: `run.step` returned; LangGraph: the next node started); lost = "
            "acknowledged but absent from the record read back after the kill.\n"
        )
        L.append("| system | kills | acknowledged | lost |")
        L.append("|---|---|---|---|")
        for k, v in res["kill"].items():
            if "error" in v:
                L.append(f"| {k} | failed: {v['error']} | | |")
            else:
                L.append(f"| {k} | {v['kills']} | {v['acked']:,} | {v['lost']:,} |")
        L.append("")
    if res.get("scale"):
        L += scale_report(res["scale"])
    if res.get("plots"):
        made = [f"`bench/results/{p}`" for p in res["plots"] if not p.startswith("(")]
        L.append("Plots: " + ", ".join(made or res["plots"]) + "\n")
    return "\n".join(L) + "\n"


def targets(res: dict[str, Any], systems: dict[str, System]) -> list[dict[str, Any]]:
    out = []

    def ratio_target(a: str, b: str, limit: float, text: str) -> None:
        if a in systems and b in systems and not systems[a].error and not systems[b].error:
            r = summary(ratio_samples(systems[a], systems[b]))
            if r["median"] is not None:
                out.append(
                    {"target": text, "measured": fmt(r, 2, "x"), "holds": r["median"] <= limit}
                )

    ratio_target(
        "torpor.sqlite_off",
        "floor.sqlite_off",
        1.5,
        "1a. step, SQLite synchronous=OFF: torpor ≤ 1.5x raw INSERT+COMMIT (OFF)",
    )
    ratio_target(
        "torpor.sqlite",
        "floor.sqlite",
        1.3,
        "1b. step, SQLite synchronous=FULL: torpor ≤ 1.3x raw INSERT+COMMIT (FULL)",
    )
    ratio_target(
        "torpor.postgres",
        "floor.postgres",
        1.3,
        "1c. step, PostgreSQL: torpor ≤ 1.3x raw INSERT, one per transaction",
    )
    for peer in ("dbos", "langgraph"):
        for b in ("sqlite", "postgres"):
            a, p = f"torpor.{b}", f"{peer}.{b}"
            if a in systems and p in systems and systems[p].samples and systems[a].samples:
                r = summary(ratio_samples(systems[p], systems[a]))
                if r["median"] is not None:
                    out.append(
                        {
                            "target": f"{peer} ({b}) ≥ 3x torpor's per-step time",
                            "measured": fmt(r, 1, "x"),
                            "holds": r["median"] >= 3,
                        }
                    )
    for b in ("sqlite", "postgres"):
        eff = [v for v in res["effects"].values() if v.get("backend") == b]
        if not eff:
            continue
        ok = [v for v in eff if "ratio" in v and v["ratio"]["median"] is not None]
        per_size = ", ".join(f"{v['n']:,}: {fmt(v['ratio'], 2, 'x')}" for v in ok)
        by = ", ".join(f"{v['effect_bytes']['median']:,.0f}" for v in ok)
        out.append(
            {
                "target": f"2. effect ≤ 2.2x a step at 10, 100, 1,000 per run ({b})",
                "measured": f"{per_size}; bytes/effect {by}"
                + ("" if len(ok) == len(eff) else f"; {len(eff) - len(ok)} size(s) failed"),
                "holds": len(ok) == len(eff) and all(v["ratio"]["median"] <= 2.2 for v in ok),
            }
        )
    rows = (res.get("cold") or {}).get("rows", {})
    py = rows.get("python", {}).get("ms", {}).get("median")
    for key, text in (
        ("resume", "3a. cold resume, SQLite (interpreter start -> first new step)"),
        ("version", "3b. `torpor --version`"),
        ("ls", "3c. `torpor ls`, small SQLite store"),
    ):
        row = rows.get(key)
        if not row:
            continue
        med = row["ms"]["median"]
        out.append(
            {
                "target": f"{text} ≤ {row['target_ms']:.0f} ms",
                "measured": (
                    f"failed: {row['error'][:80]}"
                    if med is None
                    else f"{fmt(row['ms'], 0, ' ms')}"
                    + ("" if py is None else f"; `python -c pass` {py:.0f} ms")
                ),
                "holds": med is not None and med <= row["target_ms"],
            }
        )
    for key in ("torpor.sqlite", "torpor.postgres"):
        rs = res["resume"].get(key, {})
        lens = sorted(int(k) for k, v in rs.items() if "call_ms" in v)
        if len(lens) >= 2:
            lo, hi = rs[str(lens[0])]["call_ms"]["median"], rs[str(lens[-1])]["call_ms"]["median"]
            out.append(
                {
                    "target": f"{key} resume at {lens[-1]:,} steps ≤ 1.5x at {lens[0]:,}",
                    "measured": f"{hi:.1f} ms vs {lo:.1f} ms ({hi / lo:.2f}x)",
                    "holds": hi <= 1.5 * lo,
                }
            )
    lg = res["resume"].get("langgraph.sqlite", {}).get("1000", {})
    tp = res["resume"].get("torpor.sqlite", {})
    if "call_ms" in lg and tp:
        big = max((int(k) for k, v in tp.items() if "call_ms" in v), default=None)
        if big is not None:
            t = tp[str(big)]["call_ms"]["median"]
            g = lg["call_ms"]["median"]
            out.append(
                {
                    "target": f"torpor resume at {big:,} ≤ LangGraph's at 1,000 (SQLite)",
                    "measured": f"{t:.1f} ms vs {g:.1f} ms",
                    "holds": t <= g,
                }
            )
    for b, limit in (("sqlite", 100), ("postgres", 50)):
        w = res["wake"].get(b)
        if w and "p99_ms" in w:
            out.append(
                {
                    "target": f"wake p99 < {limit} ms ({b})",
                    "measured": f"{w['p99_ms']:.1f} ms",
                    "holds": w["p99_ms"] < limit,
                }
            )
    for b in ("sqlite", "postgres"):
        t, g = systems.get(f"torpor.{b}"), systems.get(f"langgraph.{b}")
        if t and g and t.samples and g.samples:
            tb = statistics.median(x["bytes_per_step"] for x in t.samples)
            gb = statistics.median(x["bytes_per_step"] for x in g.samples)
            out.append(
                {
                    "target": f"storage per step ≤ 1/3 of LangGraph's ({b})",
                    "measured": f"{tb:,.0f} B vs {gb:,.0f} B ({tb / gb:.2f})",
                    "holds": tb <= gb / 3,
                }
            )
    k = res["kill"].get("torpor (default)")
    if k and "lost" in k:
        out.append(
            {
                "target": "zero steps lost under SIGKILL (torpor default)",
                "measured": f"{k['lost']} lost of {k['acked']:,} acknowledged, {k['kills']} kills",
                "holds": k["lost"] == 0,
            }
        )
    return out


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="torpor vs peers and the floor (issue 6)")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, shorter histories")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per figure (default 5)")
    ap.add_argument("--steps", type=int, default=1000, help="steps per per-step run")
    ap.add_argument(
        "--sections",
        default="per_step,resume,wake,effects,cold,kill,children,streaming,scale,sessions",
        help="comma-separated subset of per_step,resume,wake,effects,cold,kill,children,"
        "streaming,scale,sessions",
    )
    ap.add_argument(
        "--scale-finished",
        type=int,
        default=None,
        help="scale section: finished runs in the big store (default 1,000,000; --quick 100,000)",
    )
    ap.add_argument(
        "--scale-waiting",
        type=int,
        default=None,
        help="scale section: waiting runs in the big store (default 100,000; --quick 10,000)",
    )
    ap.add_argument(
        "--cold-runs",
        type=int,
        default=None,
        help="fresh processes per cold-start figure (default 11, --quick 9)",
    )
    ap.add_argument(
        "--systems",
        default="",
        help="per-step rows to run: comma-separated key prefixes (e.g. floor,torpor); all if empty",
    )
    ap.add_argument(
        "--postgres",
        default=None,
        help="server URL (default: TORPOR_BENCH_DATABASE_URL, TORPOR_TEST_DATABASE_URL, "
        "else a pgserver instance)",
    )
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--no-servers", action="store_true", help="skip Temporal and Restate")
    ap.add_argument("--no-strace", action="store_true", help="skip the fsync-counting pass")
    args = ap.parse_args(argv)
    reps = args.reps or (3 if args.quick else 5)
    sections = set(args.sections.split(","))
    RESULTS.mkdir(parents=True, exist_ok=True)
    base = None
    if not args.no_postgres:
        try:
            base = args.postgres or pg_server_url()
        except Exception as exc:
            log(f"PostgreSQL unavailable ({exc}); SQLite only")
    res: dict[str, Any] = {
        "at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])]),
        "args": {**vars(args), "reps": reps},
        "machine": machine(),
        "bytecode": "compiled once per invocation into PYTHONPYCACHEPREFIX"
        + (
            " (PYTHONDONTWRITEBYTECODE set in the caller's environment, unset for the workloads)"
            if os.environ.get("PYTHONDONTWRITEBYTECODE")
            else ""
        ),
        "postgres": None if base is None else re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", base),
        "per_step": [],
        "resume": {},
        "wake": {},
        "effects": {},
        "cold": {},
        "kill": {},
        "children": {},
        "streaming": {},
        "scale": {},
    }
    systems: list[System] = []
    if "per_step" in sections:
        systems = floor_systems(base) + peer_systems(base, args.steps)
        srv_temporal: list[Server | None] = [None]
        srv_restate: list[Server | None] = [None]
        t_sys = [
            server_system(
                "temporal.activity", "Temporal activities (dev server, SQLite file)", "server",
                "temporal_steps", srv_temporal, {"kind": "activity"},
                min(args.steps, 100 if args.quick else 200),
                "each activity: scheduled+started+completed in the durable history",
            ),
            server_system(
                "temporal.local", "Temporal local activities (dev server, SQLite file)", "server",
                "temporal_steps", srv_temporal, {"kind": "local"}, None,
                "results reach the history with the next workflow task completion, "
                "several at a time: not each durable before the next",
            ),
        ]  # fmt: skip
        r_sys = [
            server_system(
                "restate", "Restate ctx.run (restate-server)", "server", "restate_steps",
                srv_restate, {}, None, "journal entry acknowledged by the server per step",
            )
        ]  # fmt: skip
        with contextlib_exit() as stack:
            wanted = args.systems.split(",") if args.systems else None
            if not args.no_servers and (
                wanted is None or any(w.startswith(("temporal", "restate")) for w in wanted)
            ):
                for syslist, starter, holder in (
                    (t_sys, temporal_server, srv_temporal),
                    (r_sys, restate_server, srv_restate),
                ):
                    try:
                        holder[0] = stack.enter_context(starter())
                        systems += syslist
                    except (Unavailable, OSError) as exc:
                        for s in syslist:
                            s.error = f"cannot run here: {exc}"
                        systems += syslist
            if args.systems:
                keep = tuple(args.systems.split(","))
                systems = [s for s in systems if s.key.startswith(keep)]
            measure_per_step(systems, args.steps, reps, count=not args.no_strace)
        res["per_step"] = per_step_rows(systems)
    if "resume" in sections:
        lengths = [10, 1000, 10000] if args.quick else [10, 1000, 10000, 100000]
        res["resume"] = measure_resume(
            base,
            lengths,
            reps,
            lg_lengths=[10, 1000] if args.quick else [10, 1000, 10000],
            dbos_lengths=[10, 1000],
        )
    if "wake" in sections:
        res["wake"] = measure_wake(base, 50 if args.quick else 200)
    if "effects" in sections:
        res["effects"] = measure_effects(base, [10, 100, 1000], reps)
    if "children" in sections:
        import children

        try:
            res["children"] = children.run(
                ["sqlite"] + (["postgres"] if base else []),
                n=20 if args.quick else 50,
                children=100,
                workers_n=8,
                steps=5,
                step_ms=100.0,
                reps=2 if args.quick else 3,
            )
        except Exception as exc:  # a failed measurement is reported, not fatal
            res["children"] = {"error": f"{type(exc).__name__}: {exc}"}
            traceback.print_exc()
    if "streaming" in sections:
        import streaming

        try:
            res["streaming"] = streaming.run(
                ["sqlite"] + (["postgres"] if base else []),
                tokens=2000,
                token_ms=1.0,
                reps=2 if args.quick else 5,
                n=20 if args.quick else 50,
            )
        except Exception as exc:  # a failed measurement is reported, not fatal
            res["streaming"] = {"error": f"{type(exc).__name__}: {exc}"}
            traceback.print_exc()
    if "cold" in sections:
        try:
            res["cold"] = measure_cold(args.cold_runs or (9 if args.quick else 11))
        except (*_FAILURES, KeyError, ValueError) as exc:
            res["cold"] = {"error": f"{type(exc).__name__}: {exc}"}
            traceback.print_exc()
    if "kill" in sections:
        kills = 3 if args.quick else 5
        for label, system, dur in (
            ("torpor (default)", "torpor", None),
            ("LangGraph default durability", "langgraph", "default"),
            ("LangGraph durability=sync", "langgraph", "sync"),
        ):
            try:
                res["kill"][label] = kill_test(system, dur, kills)
                log(f"kill {label}: {res['kill'][label]['lost']} lost")
            except Exception as exc:
                res["kill"][label] = {"error": f"{type(exc).__name__}: {exc}"}
                traceback.print_exc()
    if "scale" in sections:
        res["scale"] = measure_scale(args, base)
    if "sessions" in sections:
        res["sessions"] = measure_sessions(args, base)
    res["targets"] = targets(res, {s.key: s for s in systems})
    (RESULTS / "results.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    try:
        res["plots"] = plots(res["per_step"], res["resume"])
    except Exception as exc:  # a plot must not cost the tables
        res["plots"] = []
        log(f"plots failed: {type(exc).__name__}: {exc}")
    (RESULTS / "results.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    text = report(res)
    (RESULTS / "report.md").write_text(text)
    print()
    print(text)
    log(f"written to {RESULTS / 'report.md'} and {RESULTS / 'results.json'}")
    return 0


def measure_scale(args: argparse.Namespace, base: str | None) -> dict[str, Any]:
    """The scale section (issue 48): :mod:`scale` (a million finished and a hundred thousand
    waiting runs against a near-empty store; on SQLite, and on PostgreSQL when ``base`` is a
    server) and :mod:`cli_start` (read commands against
    ``--version``), each in its own subprocess with this invocation's bytecode cache."""
    finished = args.scale_finished or (100_000 if args.quick else 1_000_000)
    waiting = args.scale_waiting or (10_000 if args.quick else 100_000)
    out: dict[str, Any] = {}
    sizes = ["--finished", str(finished), "--waiting", str(waiting)]
    jobs = [("store", "scale.py", sizes, "scale")]
    if base is not None:
        jobs.append(("store_pg", "scale.py", [*sizes, "--backend", "postgres"], "scale_postgres"))
    jobs.append(("cli", "cli_start.py", ["--reps", "5" if args.quick else "9"], "cli_start"))
    for key, script, argv, name in jobs:
        log(f"scale: {script} {' '.join(argv)}")
        try:
            e = env() if base is None else {**env(), "TORPOR_BENCH_DATABASE_URL": base}
            subprocess.run(
                [sys.executable, str(HERE / script), *argv], env=e, check=True, timeout=3600
            )
            out[key] = json.loads((RESULTS / f"{name}.json").read_text())
        except (subprocess.SubprocessError, OSError, ValueError) as exc:
            out[key] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def measure_sessions(args: argparse.Namespace, base: str | None) -> dict[str, Any]:
    """The sessions section (issue 46): :mod:`sessions` in its own subprocess — wake after 1,
    1,000 and 100,000 turns against a plain run's signal wake, and the idle footprint; its
    table is printed by that script and kept in results/sessions.json."""
    argv = ["--wakes", "10" if args.quick else "30"]
    argv += ["--backends", "sqlite" if base is None else "sqlite,postgres"]
    log(f"sessions: sessions.py {' '.join(argv)}")
    try:
        e = env() if base is None else {**env(), "TORPOR_BENCH_DATABASE_URL": base}
        subprocess.run(
            [sys.executable, str(HERE / "sessions.py"), *argv], env=e, check=True, timeout=3600
        )
        return dict(json.loads((RESULTS / "sessions.json").read_text()))
    except (subprocess.SubprocessError, OSError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def scale_report(sc: dict[str, Any]) -> list[str]:
    """The scale section's text (see :func:`measure_scale`)."""
    import cli_start
    import scale

    L = ["## Scale: cost that stays flat as the work grows (issue 48)\n"]
    for key, mod in (("store", scale), ("store_pg", scale), ("cli", cli_start)):
        r = sc.get(key) or {}
        L += [f"Not measured: {r['error']}"] if "error" in r else mod.lines(r) if r else []
        L.append("")
    return L


@contextmanager
def contextlib_exit() -> Iterator[Any]:
    from contextlib import ExitStack

    with ExitStack() as stack:
        yield stack


if __name__ == "__main__":
    with suppress(KeyboardInterrupt):
        sys.exit(main())
