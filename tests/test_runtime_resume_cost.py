"""G8: resume cost does not grow with history. A loop of N iterations (two steps each) with
``run.checkpoint`` after every iteration is SIGKILLed near its end, between its two steps; a
resume in this process counts every row it reads from the store until the first new step runs.
2,000 iterations read the same handful of rows (checkpoint + tail) as 100."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

import torpor
from conftest import HANG_S
from runtime_kit import PRELUDE, Lab

LONG = """
def tick(i):
    TICKS.append(i)
    return i


def tock(i):
    if i == int(_os.environ.get("RT_KILL_AT_STEP", "-1")):
        _os.kill(_os.getpid(), 9)  # SIGKILL mid-iteration: tick recorded, tock and checkpoint not
    HOOK(i)
    return i


TICKS = []


def HOOK(i):
    pass


@torpor.workflow(name="g8.long", version="1")
def long(run, n):
    st = run.restore({"i": 0, "acc": 0})
    while st["i"] < n:
        st["acc"] += run.step("tick", tick, st["i"])
        st["acc"] += run.step("tock", tock, st["i"])
        st["i"] += 1
        run.checkpoint(st)
    return st
"""


class RowCounter:
    """Wraps the store driver's reads and counts the rows they return."""

    def __init__(self, store: torpor.store.SQLStore):
        self.rows = 0
        self.queries = 0
        drv = store.driver
        fetchall, fetchone = drv.fetchall, drv.fetchone

        def counted_all(cur: Any, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
            out = fetchall(cur, sql, params)
            self.rows += len(out)
            self.queries += 1
            return out

        def counted_one(cur: Any, sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
            out = fetchone(cur, sql, params)
            self.rows += out is not None
            self.queries += 1
            return out

        drv.fetchall = counted_all  # type: ignore[method-assign]
        drv.fetchone = counted_one  # type: ignore[method-assign]


@pytest.fixture
def long_module(tmp_path: Path) -> types.ModuleType:
    """The same workflow module in this process (to count reads) as in the subprocess."""
    src = PRELUDE.format(ledger=str(tmp_path / "ledger.jsonl")) + LONG
    (tmp_path / "g8wf.py").write_text(src)
    mod = types.ModuleType("g8wf")
    exec(compile(src, str(tmp_path / "g8wf.py"), "exec"), mod.__dict__)
    return mod


def _crash_then_measure(
    tmp_path: Path, mod: types.ModuleType, n: int, kill_at: int
) -> tuple[int, int, int]:
    # synchronous=NORMAL: durable against process crashes (WAL), fast enough for 2,000 steps.
    url = f"sqlite:///{tmp_path}/g8-{n}.db?synchronous=NORMAL"
    lab = Lab(tmp_path, url, tmp_path / "ledger.jsonl")
    p = lab.drive(
        "g8wf",
        f"long{n}",
        workflow="g8.long",
        input=n,
        env={"RT_KILL_AT_STEP": str(kill_at)},
        timeout=HANG_S,
    )
    assert p.killed, p.describe()
    history = len(lab.events(f"long{n}"))
    assert history > 3 * kill_at  # two one-event steps and a checkpoint per iteration

    rt = torpor.Runtime(url)
    try:
        counter = RowCounter(rt.store)
        at_first_step: list[int] = []

        def hook(i: int) -> None:
            if not at_first_step:
                assert i == kill_at, f"resumed at step {i}, not at {kill_at}"
                at_first_step.append(counter.rows)

        mod.HOOK = hook
        mod.TICKS.clear()
        res = rt.resume(f"long{n}")
        assert res.outcome == "succeeded", res
        assert res.result == {"i": n, "acc": n * (n - 1)}
        assert at_first_step, "no step ran on resume"
        # The tick of the interrupted iteration was recorded: replayed from the tail, not rerun.
        assert mod.TICKS[0] == kill_at + 1, mod.TICKS[:3]
        return at_first_step[0], counter.queries, history
    finally:
        rt.close()


@pytest.mark.proc
def test_resume_reads_checkpoint_and_tail_only(
    tmp_path: Path, long_module: types.ModuleType
) -> None:
    short_rows, _, short_history = _crash_then_measure(tmp_path, long_module, 100, 97)
    long_rows, _, long_history = _crash_then_measure(tmp_path, long_module, 2000, 1997)
    assert long_history > 5900 and short_history < 400
    print(
        f"rows read before the first new step: {short_rows} for {short_history} events, "
        f"{long_rows} for {long_history} events"
    )
    assert long_rows <= 40, f"resume read {long_rows} rows of a {long_history}-event history"
    assert long_rows <= short_rows + 5, (short_rows, long_rows)


def test_an_execution_does_not_hold_the_results_it_recorded(tmp_path: Path) -> None:
    """A long run's step results stay in the store, not in the process: 300 steps of 64 KiB
    each (19 MiB of results) leave the executing process's memory about where it was after
    the first ten. (Replaying results are held only until replayed.)"""
    import tracemalloc

    seen: dict[int, int] = {}

    @torpor.workflow(name="mem.results", version="1")
    def results(run: Any, n: int) -> int:
        for i in range(n):
            run.step(f"big{i}", lambda i=i: f"{i:08d}" * 8192)
            if i in (10, n - 1):
                seen[i] = tracemalloc.get_traced_memory()[0]
        return n

    rt = torpor.Runtime(f"sqlite:///{tmp_path}/mem.db?synchronous=OFF")
    tracemalloc.start()
    try:
        res = rt.run("mem.results", 300, run_id="mem")
    finally:
        tracemalloc.stop()
        rt.close()
    assert res.outcome == "succeeded", res
    grown = seen[299] - seen[10]
    assert grown < 4 * 2**20, f"memory grew {grown / 2**20:.1f} MiB over 290 recorded steps"
