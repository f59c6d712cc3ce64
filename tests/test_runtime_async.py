"""Async workflows (``async def``, ``run.astep`` / ``run.aeffect``) record and recover exactly
like sync ones: killed at the effect boundaries, in a sleep or mid-history, then resumed in a
new process, they end with the crash-free result, one effect and no step rerun once recorded."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import runtime_kit as kit
import torpor
from runtime_kit import Lab

ASYNC = """
import asyncio


async def awork(name, value):
    await asyncio.sleep(0.001)
    ledger("step", name=name, run=None)
    return value


async def asend(what, idempotency_key):
    await asyncio.sleep(0.001)
    ledger("effect", key=idempotency_key, what=what)
    return {"sent": what}


@torpor.workflow(name="a.flow", version="1", criteria=["sum"])
async def flow(run, n):
    a = await run.astep("a", awork, "a", n)
    b = await run.astep("b", work, "b", a + 1)  # a sync function in an async workflow
    ref = run.artifact("note", f"{a} and {b}")
    run.sleep(0.2)
    sent = await run.aeffect("send", asend, ref.sha256[:8], reconcile=find_sent)
    x, y = await asyncio.gather(  # concurrent steps and effects: ids follow the call order
        run.astep("x", awork, "x", 10),
        run.aeffect("fanout", asend, "fanout", reconcile=find_sent),
    )
    c = await run.astep("c", awork, "c", a + b + x, policy="compute")
    run.verify("sum", c == a + b + x)
    return {"a": a, "b": b, "c": c, "sent": sent, "y": y}
"""

CASES = [
    "effect.intended@1",
    "effect.called@1",
    "effect.intended@2",
    "effect.called@2",
    "append.before@2",
    "append.after@3",
    "artifact.stored@1",
    "wait.started@1",
    "lease.acquired@2",
]


@pytest.mark.proc
def test_async_workflow_recovers_from_crashes(tmp_path: Path, db_url: str) -> None:
    lab = Lab(tmp_path, db_url, tmp_path / "ledger.jsonl")
    mod = lab.module("awf", ASYNC)
    base = lab.drive(mod, "base", workflow="a.flow", input=3)
    assert base.result is not None and base.result["outcome"] == "succeeded", base.describe()
    expected = base.result["result"]
    assert expected["c"] == 17

    run_ids = [f"a{i}" for i in range(len(CASES))]
    lab.crash_farm(mod, "a.flow", 3, list(zip(run_ids, CASES, strict=True)))
    results = lab.resume_all(mod, run_ids)
    for point, rid in zip(CASES, run_ids, strict=True):
        assert results[rid]["outcome"] == "succeeded", (point, results[rid])
        assert results[rid]["result"] == expected, point
        assert len(lab.ledger("effect", key=f"{rid}/send")) == 1, point
        assert len(lab.ledger("effect", key=f"{rid}/fanout")) == 1, point
    # Every run's steps: each ran, and the base run's once.
    names = Counter(e["name"] for e in lab.ledger("step"))
    assert set(names) == {"a", "b", "c", "x"}
    assert names["a"] <= 1 + len(CASES) + 1  # base + each run + at most one repeat


# ---------------------------------------------------------------------- in-process


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path) -> None:
    kit.use_ledger(tmp_path / "inproc.jsonl")


async def _aget(x: int) -> int:
    kit.ledger("step", name="aget")
    return x


@torpor.workflow(name="a.waits", version="1")
async def waits(run: torpor.Run, _: Any) -> Any:
    x = await run.astep("x", _aget, 1)
    got = run.wait_for("go")
    try:
        run.step("wrong", _aget, 2)  # an async fn through the sync API inside a running loop
    except torpor.TorporError as exc:
        kit.ledger("refused", error=str(exc))
    return [x, got]


def test_async_waits_and_misuse(runtime: torpor.Runtime, client: torpor.Client) -> None:
    res = runtime.run(waits, None, run_id="aw")
    assert res.status == "waiting"
    client.signal("aw", "go", "ok")
    res = runtime.resume("aw")
    assert res.outcome == "succeeded" and res.result == [1, "ok"], res
    assert len(kit.ledger_entries("step", name="aget")) == 1
    refused = kit.ledger_entries("refused")
    assert refused and "run.astep" in refused[0]["error"]
    # The mistake is the code's, not the step's: nothing is recorded for it, so fixed code
    # can still run that step.
    assert all(e.step_id != "wrong" for e in client.events("aw"))
