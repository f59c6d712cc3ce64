"""Reconcile at takeover: a worker SIGKILLed around an effect's call leaves it intended; the
worker that takes the run over reconciles it — when its reconcile is registered with the
operation (``@torpor.effect(reconcile=...)``) — right after taking the lease and before the
workflow function runs again: the verdict is in the history first, and the effect happens once.
An effect whose reconcile is known only at the call site is reconciled when replay reaches it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from conftest import HANG_S, run_python
from runtime_kit import Lab

#: Real processes killed and resumed: the default tier (SQLite; PostgreSQL in the slow tier).
pytestmark = pytest.mark.proc

FLOWS = """
import os

def charge(what, idempotency_key):
    ledger("effect", key=idempotency_key, what=what)
    return {"charged": what}

def plain_charge(what, idempotency_key):  # not declared: reconciled at the call site only
    return charge(what, idempotency_key)

def find_charge(call):
    hits = ledger_entries("effect", key=call.idempotency_key)
    return torpor.Applied({"charged": hits[-1]["what"]}) if hits else torpor.Absent()

@torpor.effect(reconcile=find_charge)
def registered_charge(what, idempotency_key):
    return charge(what, idempotency_key)

@torpor.workflow(name="takeover.registered")
def registered(run, n):
    ledger("body", run=run.run_id)
    run.step("prep", lambda: n)
    out = run.effect("charge", registered_charge, f"order {n}")
    run.step("after", lambda: n + 1)
    return out

@torpor.workflow(name="takeover.call_site")
def call_site(run, n):
    ledger("body", run=run.run_id)
    run.step("prep", lambda: n)
    out = run.effect("charge", plain_charge, f"order {n}", reconcile=find_charge)
    run.step("after", lambda: n + 1)
    return out
"""

WORKER = """
import importlib, time
import torpor
from torpor.worker import Worker
importlib.import_module("flows")
rt = torpor.Runtime({db!r}, lease_ttl_s=5)
stats = Worker(rt, concurrency=1, poll_s=0.05).run(until_idle=True, max_seconds=30)
print("FINISHED", stats.finished, flush=True)
"""


@pytest.fixture
def lab(tmp_path: Path, db_url: str) -> Lab:
    lab = Lab(tmp_path, db_url, tmp_path / "ledger.jsonl")
    lab.module("flows", FLOWS)
    return lab


def _take_over(lab: Lab) -> None:
    """A second worker, in a process of its own, takes the crashed run over once its lease
    (1 s) expired, and runs it to its end."""
    time.sleep(1.1)
    cp = run_python(WORKER.format(db=lab.db_url), cwd=lab.tmp, timeout=HANG_S)
    assert cp.returncode == 0 and "FINISHED 1" in cp.stdout, cp.stdout + cp.stderr


def _verdicts(lab: Lab, run_id: str) -> list[Any]:
    return [e for e in lab.events(run_id) if e.type == "effect_reconciled"]


@pytest.mark.parametrize(
    ("crash_at", "verdict", "charged_by_first"),
    [("effect.called", "applied", True), ("effect.intended", "absent", False)],
)
def test_a_new_owner_reconciles_before_the_code_runs_again(
    lab: Lab, crash_at: str, verdict: str, charged_by_first: bool
) -> None:
    first = lab.drive(
        "flows",
        "r1",
        workflow="takeover.registered",
        input=7,
        crash_at=crash_at,
        runtime={"lease_ttl_s": 1.0},
    )
    assert first.killed, first.describe()
    assert len(lab.ledger("effect")) == (1 if charged_by_first else 0)
    _take_over(lab)

    [v] = _verdicts(lab, "r1")
    assert v.payload.verdict == verdict  # type: ignore[attr-defined]
    assert "reconciled at takeover" in v.payload.reason  # type: ignore[attr-defined]
    # The verdict was recorded before the workflow function ran again in the new process.
    bodies = lab.ledger("body", run="r1")
    assert len(bodies) == 2
    assert v.at_ms <= bodies[1]["t"] * 1000
    evs = lab.events("r1")
    takeover = max(i for i, e in enumerate(evs) if e.type == "lease_acquired")
    assert evs[takeover + 1].type == "effect_reconciled"
    # One charge in the world, and the run's result is the charge's.
    assert [e["key"] for e in lab.ledger("effect")] == ["r1/charge"]
    st = lab.state("r1")
    assert st.outcome == "succeeded" and st.result == {"charged": "order 7"}


def test_a_call_site_reconcile_waits_for_the_replay(lab: Lab) -> None:
    first = lab.drive(
        "flows",
        "r2",
        workflow="takeover.call_site",
        input=8,
        crash_at="effect.called",
        runtime={"lease_ttl_s": 1.0},
    )
    assert first.killed, first.describe()
    _take_over(lab)
    [v] = _verdicts(lab, "r2")
    assert v.payload.verdict == "applied" and "takeover" not in v.payload.reason  # type: ignore[attr-defined]
    bodies = lab.ledger("body", run="r2")
    assert v.at_ms >= bodies[1]["t"] * 1000 - 1  # reconciled when the replay reached the call
    assert len(lab.ledger("effect")) == 1
