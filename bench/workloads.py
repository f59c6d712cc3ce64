"""The measured workloads, one per system and mode, each run in a subprocess of its own.

    python bench/workloads.py <name> '<json args>'

prints one line ``RESULT <json>``. The orchestrator (:mod:`bench.run_all`) decides what to run
and how often; every figure it reports is a median over such subprocesses. A workload measures
only its own loop (``time.perf_counter`` around it): interpreter start, imports, schema setup
and server start-up are outside the timed region unless a figure says otherwise.

Peers are imported lazily, so a missing one fails only its own workload (the orchestrator
records the reason in the table).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypedDict

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

WORKLOADS: dict[str, Callable[..., dict[str, Any]]] = {}


def workload(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    WORKLOADS[fn.__name__] = fn
    return fn


# --------------------------------------------------------------------------- helpers


@contextmanager
def fsync_counter(pids: Sequence[int], enabled: bool = True) -> Iterator[dict[str, int]]:
    """Count fsync/fdatasync calls of ``pids`` (all their threads) while the block runs, with
    strace attached (``-f``, seccomp filter so untraced syscalls do not stop). The counts land
    in the yielded dict after the block."""
    out: dict[str, int] = {}
    if not enabled or not pids:
        yield out
        return
    fd, path = tempfile.mkstemp(prefix="bench-strace-")
    os.close(fd)
    cmd = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", path]
    for p in pids:
        cmd += ["-p", str(p)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    # Wait until strace reports every process attached (or gave up on one: a backend that
    # just exited), reading its messages on a thread so a missing line cannot block us.
    lines: list[str] = []
    stream = proc.stderr
    assert stream is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(stream.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None:
        if sum(("attached" in x) or ("ptrace" in x) for x in list(lines)) >= len(pids):
            break
        time.sleep(0.02)
    time.sleep(0.2)
    try:
        yield out
    finally:
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        text = Path(path).read_text()
        os.unlink(path)
        for line in text.splitlines():
            parts = line.split()
            if parts and parts[-1] in ("fsync", "fdatasync"):
                # columns: % time, seconds, usecs/call, calls, [errors,] syscall
                nums = [p for p in parts[:-1]]
                out[parts[-1]] = int(nums[3])
        out["total"] = out.get("fsync", 0) + out.get("fdatasync", 0)


def sqlite_bytes(path: str | Path) -> int:
    """Size of an SQLite database with its WAL folded in (checkpointed and truncated)."""
    path = str(path)
    c = sqlite3.connect(path, timeout=30)
    try:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        c.close()
    size = os.path.getsize(path)
    for extra in ("-wal", "-journal"):
        with suppress(OSError):
            size += os.path.getsize(path + extra)
    return size


def pg_schema_bytes(url: str, schema: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute(
            "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def _my_tcp_ports() -> list[int]:
    """Local ports of this process's TCP sockets (from /proc: socket inodes -> /proc/net/tcp)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                parts = line.split()
                if parts[9] in inodes:
                    ports.append(int(parts[1].rsplit(":", 1)[1], 16))
    return ports


def pg_backend_pids(url: str, application_name: str) -> list[int]:
    """The PostgreSQL backends serving this process's connections: by client port (works
    whatever application_name a library sets), else by ``application_name``."""
    import psycopg

    ports = _my_tcp_ports()
    with psycopg.connect(url, autocommit=True) as c:
        rows = c.execute(
            "SELECT pid FROM pg_stat_activity WHERE (client_port = ANY(%s) "
            "OR application_name = %s) AND pid <> pg_backend_pid()",
            (ports, application_name),
        ).fetchall()
    return [int(r[0]) for r in rows]


def with_params(url: str, **params: str) -> str:
    from urllib.parse import quote

    sep = "&" if "?" in url else "?"
    return url + sep + "&".join(f"{k}={quote(v)}" for k, v in params.items())


def stamp(path: str) -> None:
    with open(path, "a") as f:
        f.write(f"{time.time()!r}\n")


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# --------------------------------------------------------------------------- floors


@workload
def floor_fsync(n: int, dir: str, count: bool = False) -> dict[str, Any]:
    """write(64 bytes) + fsync, n times, on a file in ``dir`` (the disk's flush latency)."""
    path = Path(dir) / "fsync-loop.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        data = b"x" * 64
        with fsync_counter([os.getpid()], count) as fs:
            t0 = time.perf_counter()
            for _ in range(n):
                os.write(fd, data)
                os.fsync(fd)
            dt = time.perf_counter() - t0
    finally:
        os.close(fd)
    return {"us_per_step": dt / n * 1e6, "fsyncs": fs.get("total"), "bytes_per_step": 64}


@workload
def floor_sqlite(n: int, path: str, synchronous: str = "FULL", count: bool = False) -> dict:
    """One INSERT + COMMIT per step, WAL, ``synchronous`` as torpor's default (FULL)."""
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode = WAL")
    c.execute(f"PRAGMA synchronous = {synchronous}")
    c.execute("CREATE TABLE IF NOT EXISTS steps (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    c.close()
    before = sqlite_bytes(path)
    c = sqlite3.connect(path, isolation_level=None)
    c.execute(f"PRAGMA synchronous = {synchronous}")
    with fsync_counter([os.getpid()], count) as fs:
        t0 = time.perf_counter()
        for i in range(n):
            c.execute("BEGIN IMMEDIATE")
            c.execute("INSERT INTO steps (v) VALUES (?)", (f"step {i}",))
            c.execute("COMMIT")
        dt = time.perf_counter() - t0
    c.close()
    return {
        "us_per_step": dt / n * 1e6,
        "fsyncs": fs.get("total"),
        "bytes_per_step": (sqlite_bytes(path) - before) / n,
    }


@workload
def floor_postgres(n: int, url: str, schema: str, count: bool = False) -> dict[str, Any]:
    """One INSERT per transaction (autocommit: one round trip, one WAL flush per step)."""
    import psycopg

    app = f"bench-floor-{os.getpid()}"
    with psycopg.connect(with_params(url, application_name=app), autocommit=True) as c:
        c.execute("CREATE TABLE IF NOT EXISTS steps (id bigserial PRIMARY KEY, v text NOT NULL)")
        for i in range(20):
            c.execute("INSERT INTO steps (v) VALUES (%s)", (f"warm {i}",))
        before = pg_schema_bytes(url, schema)
        with fsync_counter(pg_backend_pids(url, app), count) as fs:
            t0 = time.perf_counter()
            for i in range(n):
                c.execute("INSERT INTO steps (v) VALUES (%s)", (f"step {i}",))
            dt = time.perf_counter() - t0
    return {
        "us_per_step": dt / n * 1e6,
        "fsyncs": fs.get("total"),
        "bytes_per_step": (pg_schema_bytes(url, schema) - before) / n,
    }


# --------------------------------------------------------------------------- torpor


def _torpor_workflows() -> None:
    import torpor

    @torpor.workflow(name="bench.steps")
    def steps(run: Any, n: int) -> int:
        for i in range(n):
            run.step(f"s{i}", int, i)
        return n

    @torpor.workflow(name="bench.effects")
    def effects(run: Any, n: int) -> int:
        for i in range(n):
            run.effect(f"e{i}", int, i)
        return n

    @torpor.workflow(name="bench.resume")
    def resume(run: Any, total: int) -> int:
        kill_at = int(os.environ.get("BENCH_KILL_AT", "-1"))
        stamps = os.environ.get("BENCH_STAMPS", "")
        every = int(os.environ.get("BENCH_CHECKPOINT_EVERY", "10"))

        def work(i: int) -> int:
            if i == kill_at:
                stamp(stamps)
                os.kill(os.getpid(), signal.SIGKILL)
            return i

        st = run.restore({"i": 0})
        while st["i"] < total:
            run.step("s", work, st["i"])
            st["i"] += 1
            if st["i"] % every == 0:
                run.checkpoint(st)
        return total

    @torpor.workflow(name="bench.kill")
    def kill(run: Any, total: int) -> int:
        acks = os.environ["BENCH_ACKS"]
        with open(acks, "a", buffering=1) as f:
            for i in range(total):
                run.step(f"s{i}", int, i)
                f.write(f"{i}\n")  # the engine said step i is recorded: it must never be lost
        return total


def _torpor_pids(rt: Any, url: str, app: str) -> list[int]:
    if url.startswith("sqlite"):
        return [os.getpid()]
    return pg_backend_pids(url, app)


@workload
def torpor_steps(
    n: int,
    url: str,
    schema: str | None = None,
    count: bool = False,
    kind: str = "steps",
    runs: int = 1,
) -> dict[str, Any]:
    """``n`` trivial sequential steps (``run.step``), each one fenced append + commit; with
    ``kind="effects"``, ``n`` effects (``run.effect``). ``runs`` > 1: that many runs of ``n``,
    started before the timed region and executed one after the other inside it; the figures
    are per step over all of them (so a small ``n`` is measured over enough steps, and enough
    bytes, to be read above the timer's noise and the database's page size)."""
    import torpor

    _torpor_workflows()
    app = f"bench-torpor-{os.getpid()}"
    if url.startswith("postgres"):
        url = with_params(url, application_name=app)
    rt = torpor.Runtime(url)
    try:
        # Warm up (imports, prepared statements, pool connections), then measure a fresh run.
        rt.execute(rt.start(f"bench.{kind}", 20, run_id="warm"))
        size = (
            (lambda: sqlite_bytes(rt.store.driver.path))
            if schema is None
            else (lambda: pg_schema_bytes(url, schema))
        )
        rids = [rt.start(f"bench.{kind}", n, run_id=f"measured-{k}") for k in range(runs)]
        before = size()
        with fsync_counter(_torpor_pids(rt, url, app), count) as fs:
            t0 = time.perf_counter()
            results = [rt.execute(rid) for rid in rids]
            dt = time.perf_counter() - t0
        assert all(r.outcome == "succeeded" for r in results), results
        after = size()
    finally:
        rt.close()
    return {
        "us_per_step": dt / (n * runs) * 1e6,
        "fsyncs": fs.get("total"),
        "bytes_per_step": (after - before) / (n * runs),
    }


@workload
def cold_ls_store(url: str, runs: int = 5, steps: int = 3) -> dict[str, Any]:
    """A small store for the cold ``torpor ls``: ``runs`` finished runs of ``steps`` steps."""
    import torpor

    _torpor_workflows()
    rt = torpor.Runtime(url)
    try:
        for k in range(runs):
            rt.run("bench.steps", steps, run_id=f"run-{k}")
    finally:
        rt.close()
    return {"runs": runs, "steps": steps}


@workload
def torpor_resume_build(url: str, steps: int, stamps: str, every: int = 10) -> dict[str, Any]:
    """Run the resume workflow until it has ``steps`` completed steps; it SIGKILLs itself as
    the next one starts (this process never returns normally)."""
    import torpor

    os.environ["BENCH_KILL_AT"] = str(steps)
    os.environ["BENCH_STAMPS"] = stamps
    os.environ["BENCH_CHECKPOINT_EVERY"] = str(every)
    _torpor_workflows()
    rt = torpor.Runtime(url)
    rt.run("bench.resume", 10**9, run_id="resume")
    raise RuntimeError("the resume workflow finished without being killed")


@workload
def torpor_resume(url: str, steps: int, stamps: str, every: int = 10) -> dict[str, Any]:
    """Resume the SIGKILLed run; the first new step writes a timestamp and SIGKILLs again (so
    the history stays as built and the measurement can repeat). Prints the call time first."""
    import torpor

    os.environ["BENCH_KILL_AT"] = str(steps)
    os.environ["BENCH_STAMPS"] = stamps
    os.environ["BENCH_CHECKPOINT_EVERY"] = str(every)
    _torpor_workflows()
    rt = torpor.Runtime(url)
    t_call = time.time()
    print(f"CALL {t_call!r}", flush=True)
    rt.resume("resume")
    raise RuntimeError("resume finished without reaching the new step")


@workload
def torpor_kill(url: str, acks: str, total: int = 10**7) -> dict[str, Any]:
    """The kill test's victim: steps until SIGKILLed, acknowledging each recorded step."""
    import torpor

    os.environ["BENCH_ACKS"] = acks
    _torpor_workflows()
    rt = torpor.Runtime(url)
    print("READY", flush=True)
    rt.run("bench.kill", total, run_id="kill")
    return {}


@workload
def torpor_kill_count(url: str) -> dict[str, Any]:
    """Which steps of the killed run are in the history (resumed history = the record)."""
    from torpor.store import open_store  # (`import torpor` alone loads no submodule)

    store = open_store(url)
    try:
        done = [
            int(e.payload.step_id[1:])  # type: ignore[attr-defined]
            for e in store.iter_events("kill")
            if e.type == "step_completed"
        ]
    finally:
        store.close()
    return {"recorded": done}


# --------------------------------------------------------------------------- DBOS


def _dbos(url: str, schema: str | None, app: str) -> Any:
    from dbos import DBOS

    config: dict[str, Any] = {
        "name": "bench",
        "system_database_url": url,
        "run_admin_server": False,
    }
    if schema:
        config["dbos_system_schema"] = schema
    try:
        return DBOS(config=config)  # type: ignore[arg-type]
    except TypeError:
        config.pop("run_admin_server")
        return DBOS(config=config)  # type: ignore[arg-type]


@workload
def dbos_steps(n: int, url: str, schema: str | None = None, count: bool = False) -> dict:
    """``n`` sequential ``@DBOS.step`` calls in one ``@DBOS.workflow``: DBOS records each
    step's output in its system database before returning it."""
    import logging

    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.WARNING)
    app = f"bench-dbos-{os.getpid()}"
    is_pg = url.startswith("postgres")
    if is_pg:
        url = with_params(url, application_name=app)
    _dbos(url, schema, app)

    @DBOS.step()
    def step(i: int) -> int:
        return i

    @DBOS.workflow()
    def wf(k: int) -> int:
        for i in range(k):
            step(i)
        return k

    DBOS.launch()
    try:
        wf(20)
        if is_pg:
            size = lambda: pg_schema_bytes(url, schema or "dbos")  # noqa: E731
        else:
            size = lambda: sqlite_bytes(url.split("///", 1)[1])  # noqa: E731
        before = size()
        pids = pg_backend_pids(url, app) if is_pg else [os.getpid()]
        with fsync_counter(pids, count) as fs:
            t0 = time.perf_counter()
            wf(n)
            dt = time.perf_counter() - t0
        after = size()
    finally:
        DBOS.destroy()
    return {
        "us_per_step": dt / n * 1e6,
        "fsyncs": fs.get("total"),
        "bytes_per_step": (after - before) / n,
    }


def _dbos_resume_app(url: str, stamps: str, kill_at: int) -> Any:
    from dbos import DBOS

    _dbos(url, None, "bench-dbos")

    @DBOS.step()
    def step(i: int) -> int:
        if i == kill_at:
            stamp(stamps)
            os.kill(os.getpid(), signal.SIGKILL)
        return i

    @DBOS.workflow()
    def resume_wf(total: int) -> int:
        for i in range(total):
            step(i)
        return total

    return resume_wf


@workload
def dbos_resume_build(url: str, steps: int, stamps: str) -> dict[str, Any]:
    import logging

    from dbos import DBOS, SetWorkflowID

    logging.getLogger("dbos").setLevel(logging.WARNING)
    wf = _dbos_resume_app(url, stamps, steps)
    DBOS.launch()
    with SetWorkflowID("resume"):
        wf(10**9)
    raise RuntimeError("not killed")


@workload
def dbos_resume(url: str, steps: int, stamps: str) -> dict[str, Any]:
    """DBOS recovers pending workflows of this executor when it launches: the resume call is
    ``DBOS.launch()``; the recovered workflow replays its recorded steps, then runs the new one."""
    import logging

    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.WARNING)
    _dbos_resume_app(url, stamps, steps)
    t_call = time.time()
    print(f"CALL {t_call!r}", flush=True)
    DBOS.launch()
    time.sleep(120)
    raise RuntimeError("recovery never reached the new step")


# --------------------------------------------------------------------------- LangGraph


class LGState(TypedDict):
    i: int
    n: int


def _lg_graph(checkpointer: Any, on_step: Callable[[int], None] | None = None) -> Any:
    from langgraph.graph import END, START, StateGraph

    def step(s):  # type: ignore[no-untyped-def]  # (no annotation: the graph's state schema)
        if on_step is not None:
            on_step(s["i"])
        return {"i": s["i"] + 1}

    def more(s):  # type: ignore[no-untyped-def]
        return "step" if s["i"] < s["n"] else END

    g = StateGraph(LGState)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", more, ["step", END])
    return g.compile(checkpointer=checkpointer)


@contextmanager
def _lg_saver(url: str) -> Iterator[Any]:
    if url.startswith("postgres"):
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(url) as saver:
            saver.setup()
            yield saver
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(url.split("///", 1)[1], check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        try:
            yield saver
        finally:
            conn.close()


@workload
def langgraph_steps(
    n: int, url: str, schema: str | None = None, durability: str = "sync", count: bool = False
) -> dict[str, Any]:
    """A one-node graph looping ``n`` times (each super-step checkpointed). ``durability``:
    ``sync`` persists each checkpoint before the next step starts; LangGraph's default
    (``async``) persists in the background while the next step runs."""
    app = f"bench-lg-{os.getpid()}"
    is_pg = url.startswith("postgres")
    if is_pg:
        url = with_params(url, application_name=app)
    with _lg_saver(url) as saver:
        graph = _lg_graph(saver)
        cfg: dict[str, Any] = {"recursion_limit": n + 100}
        kw: dict[str, Any] = {} if durability == "default" else {"durability": durability}
        graph.invoke({"i": 0, "n": 20}, {**cfg, "configurable": {"thread_id": "warm"}}, **kw)
        if is_pg:
            size = lambda: pg_schema_bytes(url, schema or "public")  # noqa: E731
            pids = pg_backend_pids(url, app)
        else:
            size = lambda: sqlite_bytes(url.split("///", 1)[1])  # noqa: E731
            pids = [os.getpid()]
        before = size()
        with fsync_counter(pids, count) as fs:
            t0 = time.perf_counter()
            out = graph.invoke(
                {"i": 0, "n": n}, {**cfg, "configurable": {"thread_id": "measured"}}, **kw
            )
            dt = time.perf_counter() - t0
        assert out["i"] == n, out
        after = size()
    return {
        "us_per_step": dt / n * 1e6,
        "fsyncs": fs.get("total"),
        "bytes_per_step": (after - before) / n,
    }


def _lg_config(thread: str) -> dict[str, Any]:
    return {"recursion_limit": 10**9, "configurable": {"thread_id": thread}}


def _stamp_and_die_at(steps: int, stamps: str) -> Callable[[int], None]:
    """A node hook that stamps the time and SIGKILLs this process as step ``steps`` starts."""

    def on_step(i: int) -> None:
        if i == steps:
            stamp(stamps)
            os.kill(os.getpid(), signal.SIGKILL)

    return on_step


@workload
def langgraph_resume_build(url: str, steps: int, stamps: str) -> dict[str, Any]:
    with _lg_saver(url) as saver:
        graph = _lg_graph(saver, _stamp_and_die_at(steps, stamps))
        graph.invoke({"i": 0, "n": 10**9}, _lg_config("resume"), durability="sync")
    raise RuntimeError("not killed")


@workload
def langgraph_resume(url: str, steps: int, stamps: str) -> dict[str, Any]:
    """Resume = ``graph.invoke(None, config)``: continue the thread from its latest checkpoint."""
    with _lg_saver(url) as saver:
        graph = _lg_graph(saver, _stamp_and_die_at(steps, stamps))
        t_call = time.time()
        print(f"CALL {t_call!r}", flush=True)
        graph.invoke(None, _lg_config("resume"), durability="sync")
    raise RuntimeError("not killed")


@workload
def langgraph_kill(url: str, acks: str, durability: str = "default") -> dict[str, Any]:
    """The kill test's victim: node i+1 starting means the engine took step i as done."""
    f = open(acks, "a", buffering=1)  # noqa: SIM115

    def on_step(i: int) -> None:
        if i > 0:
            f.write(f"{i - 1}\n")

    with _lg_saver(url) as saver:
        graph = _lg_graph(saver, on_step)
        print("READY", flush=True)
        kw: dict[str, Any] = {} if durability == "default" else {"durability": durability}
        graph.invoke({"i": 0, "n": 10**9}, _lg_config("kill"), **kw)
    return {}


@workload
def langgraph_kill_count(url: str) -> dict[str, Any]:
    with _lg_saver(url) as saver:
        tup = saver.get_tuple(_lg_config("kill"))
    i = 0 if tup is None else int(tup.checkpoint["channel_values"].get("i", 0))
    return {"recorded": list(range(i))}


# --------------------------------------------------------------------------- Temporal


@workload
def temporal_steps(n: int, address: str, kind: str = "activity") -> dict[str, Any]:
    """A workflow running ``n`` sequential activities (``activity``: each scheduled, started
    and completed through the server's history; ``local``: local activities, recorded in the
    history in batches with the workflow task that follows)."""
    import asyncio
    import concurrent.futures
    import uuid

    from bench_temporal_app import BenchSteps, bench_step
    from temporalio.client import Client
    from temporalio.worker import Worker

    async def main() -> float:
        client = await Client.connect(address)
        queue = f"bench-{uuid.uuid4().hex[:6]}"
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            async with Worker(
                client,
                task_queue=queue,
                workflows=[BenchSteps],
                activities=[bench_step],
                activity_executor=pool,
                max_cached_workflows=10,
            ):
                local = kind == "local"
                await client.execute_workflow(
                    BenchSteps.run, args=[10, local], id=f"warm-{queue}", task_queue=queue
                )
                t0 = time.perf_counter()
                await client.execute_workflow(
                    BenchSteps.run, args=[n, local], id=f"m-{queue}", task_queue=queue
                )
                return time.perf_counter() - t0

    dt = asyncio.run(main())
    return {"us_per_step": dt / n * 1e6}


# --------------------------------------------------------------------------- Restate


@workload
def restate_steps(n: int, ingress: str) -> dict[str, Any]:
    import urllib.request

    def call(k: int) -> Any:
        req = urllib.request.Request(
            f"{ingress}/BenchSteps/steps",
            data=json.dumps(k).encode(),
            headers={"content-type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    call(10)
    t0 = time.perf_counter()
    assert call(n) == n
    dt = time.perf_counter() - t0
    return {"us_per_step": dt / n * 1e6}


# --------------------------------------------------------------------------- main


def main() -> None:
    name, args = sys.argv[1], json.loads(sys.argv[2] if len(sys.argv) > 2 else "{}")
    out = WORKLOADS[name](**args)
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
