"""Issue 42: a Pydantic AI agent run durably by TorporAgent — offline with FunctionModel, two
tools (a read and an effect against a local ledger): its run recorded step by step, killed at
the fault points and resumed (the explorer), an approval through Pydantic AI's own
``requires_approval`` signed by a person, usage under a torpor budget, and ``import torpor``
that never imports Pydantic AI."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import pyai_flows
import torpor
from conftest import run_python
from torpor.history import Budget
from torpor.testing import FileLedger, Target, explore

TESTS = Path(__file__).resolve().parent
DOCS = TESTS.parent / "docs"


@pytest.fixture(autouse=True)
def _world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORPOR_EXPLORE_WORLD", str(tmp_path))
    return tmp_path


def _paid(world: Path) -> Counter[str]:
    return Counter(FileLedger(world / FileLedger.NAME).counts())


def test_the_agents_run_is_a_torpor_run_with_each_request_and_call_a_step(
    store_url: str, _world: Path
) -> None:
    rt = torpor.Runtime(store_url)
    res = rt.run(pyai_flows.flow, "buy tea", run_id="shop-1")
    assert (res.outcome, res.result) == ("succeeded", "charged: tea for 3 (tool:charge:c-charge)")
    events = torpor.Client(rt.store).events("shop-1")
    done = [e.payload.step_id for e in events if e.type == "step_completed"]  # type: ignore[attr-defined]
    assert done == [
        "model",
        "tool:lookup_price:c-price",
        "model#2",
        "tool:charge:c-charge",
        "model#3",
    ]
    called = [e.payload for e in events if e.type == "model_called"]
    assert [c.model for c in called] == ["function:shopkeeper:"] * 3  # type: ignore[attr-defined]
    assert all(c.input_tokens > 0 for c in called)  # type: ignore[attr-defined]
    intent = next(e.payload for e in events if e.type == "effect_intended")
    assert intent.operation == "pydantic-ai:teashop.charge"  # type: ignore[attr-defined]
    assert _paid(_world) == {
        "model:1": 1,
        "model:3": 1,
        "model:5": 1,
        "shop-1/tool:charge:c-charge": 1,
    }
    # Running the finished run again replays nothing and pays for nothing.
    again = rt.run(pyai_flows.flow, "buy tea", run_id="shop-1")
    assert again.result == res.result and _paid(_world)["model:1"] == 1
    rt.close()


def test_an_approval_asked_by_pydantic_ai_is_signed_by_a_person(
    store_url: str, _world: Path
) -> None:
    rt = torpor.Runtime(store_url)
    client = torpor.Client(rt.store)
    res = rt.run(pyai_flows.guarded.workflow, "buy tea", run_id="g-1")
    assert (res.status, res.wait_kind) == ("waiting", "approval")
    assert "g-1/tool:charge:c-charge" not in _paid(_world)  # nothing charged before the decision
    ((aid, hashes),) = client.pending_approvals("g-1").items()
    assert aid.startswith("tool:charge@")
    content = torpor.ArtifactStore(rt.settings.artifacts_url).get(hashes[0])
    assert b'"amount":3' in content and b'"tool":"charge"' in content
    client.decide("g-1", None, "approve", "alice", comment="tea is fine")
    res = rt.resume("g-1")
    assert (res.outcome, res.result) == ("succeeded", "charged: tea for 3 (tool:charge:c-charge)")
    events = client.events("g-1")
    intent = next(e.payload for e in events if e.type == "effect_intended")
    assert intent.approval_id == aid  # type: ignore[attr-defined]  (consumed by the effect)
    decided = [e.payload for e in events if e.type == "approval_decided"]
    assert [d.approver for d in decided] == ["alice"]  # type: ignore[attr-defined]
    assert _paid(_world)["g-1/tool:charge:c-charge"] == 1
    # A denial goes back to the model as Pydantic AI's ToolDenied; nothing is charged.
    rt.run(pyai_flows.guarded.workflow, "buy tea", run_id="g-2")
    client.decide("g-2", None, "deny", "bob", comment="no")
    res = rt.resume("g-2")
    assert res.outcome == "succeeded" and "denied" in res.result, res
    assert "g-2/tool:charge:c-charge" not in _paid(_world)
    rt.close()


def test_usage_is_counted_against_a_torpor_budget(db_url: str, _world: Path) -> None:
    tight = pyai_flows.TorporAgent(
        pyai_flows.make_agent(),
        name="shop-tight",
        reads=["lookup_price"],
        budget=Budget(tokens=60),
    )
    res = torpor.Runtime(db_url).run(tight.workflow, "buy tea", run_id="b-1")
    assert res.outcome == "blocked" and "budget exhausted (tokens" in res.reason, res
    assert "b-1/tool:charge:c-charge" not in _paid(_world)


@pytest.mark.proc
def test_import_torpor_does_not_import_pydantic_ai() -> None:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import torpor, torpor.cli"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert "torpor.cli" in out.stderr  # (the import-time report is there)
    assert "pydantic_ai" not in out.stderr


@pytest.mark.slow
def test_killed_at_the_fault_points_requests_paid_once_effect_once_output_equal(
    tmp_path: Path,
) -> None:
    """A seeded sample of crashes (``PYAI_EXPLORE_ALL=1``: every boundary, every fault kind,
    a second crash during recovery — what docs/pydantic-ai.md's command runs)."""
    every = os.environ.get("PYAI_EXPLORE_ALL") == "1"
    t = Target(
        module="pyai_flows",
        workflow="pydantic-ai.teashop",
        input="buy tea",
        paths=[str(TESTS)],
        ledger="pyai_flows:effect_ledger",
    )
    report = explore(
        t, seed=42, kinds=["crash", "ack", "break"] if every else ["crash"],
        sample=None if every else 10, recovery_crashes=1 if every else 0,
        workdir=tmp_path / "worlds", jobs=2,
    )  # fmt: skip
    print(report.summary())
    # The effect once (or the run unresolved), the outcome and output of the crash-free run.
    assert report.ok, report.summary()
    assert report.baseline["ledger"] == {"explored/tool:charge:c-charge": 1}
    assert pyai_flows.MODEL_PAID["baseline"] == {"model:1": 1, "model:3": 1, "model:5": 1}
    assert every or (len(report.cases) == 10 and all(c.procs[0].killed for c in report.cases))
    for case in report.cases:
        paid = pyai_flows.MODEL_PAID[f"case{case.index:04d}"]
        assert set(paid) == {"model:1", "model:3", "model:5"}, (case.plan, paid)
        # A recorded request is never paid again; only one in flight at a kill may be.
        assert 3 <= sum(paid.values()) <= 3 + case.landed, (case.plan, paid)
        if case.plan.startswith("crash:model.recorded") and case.landed == 1:
            assert sum(paid.values()) == 3, (case.plan, paid)


def test_the_docs_agents_run_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/pydantic-ai.md: the plain agent and the durable one give the same output (TestModel
    calls both tools in one response: two calls side by side, each its own step)."""
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(DOCS / "pydantic_ai_plain.py"), run_name="__main__")
    plain = capsys.readouterr().out.strip()
    runpy.run_path(str(DOCS / "pydantic_ai_durable.py"), run_name="__main__")
    outcome, durable = capsys.readouterr().out.strip().split(" ", 1)
    assert (outcome, durable) == ("succeeded", plain) and '"charge":"charged 0 for a"' in plain
    rows = [json.loads(x) for x in (tmp_path / "payments.jsonl").read_text().splitlines()]
    assert rows[0] == {"item": "a", "amount": 0}  # the plain run's charge: no key
    line = 'shop = TorporAgent(agent, reads=["lookup_price"], effects={"charge": find_charge})'
    assert line in (DOCS / "pydantic_ai_durable.py").read_text()
    readme = " ".join((DOCS.parent / "README.md").read_text().split())
    assert line in readme  # the README's sketch is this line
    assert rows[1]["key"].endswith("/tool:charge:pyd_ai_tool_call_id__charge") and len(rows) == 2


@pytest.mark.proc
def test_an_effect_tool_without_reconcile_killed_mid_call_leaves_the_run_unresolved(
    db_url: str, _world: Path, tmp_path: Path
) -> None:
    code = (
        "import pyai_flows, torpor\n"
        f"torpor.Runtime({db_url!r}).run(pyai_flows.bare.workflow, 'buy tea', run_id='u-1')\n"
    )
    env = {"TORPOR_CRASH_AT": "effect.called@1", "TORPOR_EXPLORE_WORLD": str(_world)}
    cp = run_python(code, cwd=TESTS, env=env)
    assert cp.returncode == -9, cp.stderr  # SIGKILLed after the charge, before its record
    assert _paid(_world)["u-1/tool:charge:c-charge"] == 1
    res = torpor.Runtime(db_url).resume("u-1")
    assert res.outcome == "unresolved" and "tool:charge:c-charge" in res.reason, res
    assert _paid(_world)["u-1/tool:charge:c-charge"] == 1  # never called again blindly
    assert _paid(_world)["model:5"] == 0  # the agent stopped there


def test_an_external_call_waits_durably_for_its_answer(db_url: str, _world: Path) -> None:
    """Pydantic AI's ``CallDeferred``: the run waits for the signal ``pydantic-ai:<call id>``;
    its payload is the call's result, which the model then sees."""
    rt = torpor.Runtime(db_url)
    res = rt.run(pyai_flows.external.workflow, "buy tea", run_id="x-1")
    assert (res.status, res.wait_kind) == ("waiting", "signal"), res
    torpor.Client(rt.store).signal("x-1", "pydantic-ai:c-charge", "paid at the till")
    res = rt.resume("x-1")
    assert (res.outcome, res.result) == ("succeeded", "charged: paid at the till"), res
    assert _paid(_world) == {"model:1": 1, "model:3": 1, "model:5": 1}


def test_a_tools_model_retry_is_recorded_and_replayed(db_url: str, _world: Path) -> None:
    """A tool's ModelRetry is the step's recorded result: resuming after the approval replays
    it (raised again, the same retry prompt: the recorded requests match), paying nothing."""
    rt = torpor.Runtime(db_url)
    client = torpor.Client(rt.store)
    res = rt.run(pyai_flows.retrying.workflow, "buy tea", run_id="r-1")
    assert res.wait_kind == "approval", res
    done = {
        e.payload.step_id: e.payload.result  # type: ignore[attr-defined]
        for e in client.events("r-1") if e.type == "step_completed"
    }  # fmt: skip
    # One tool call id called twice: two steps, the first recorded as the ModelRetry it raised.
    assert done["tool:lookup_price:c-price"]["$pydantic_ai"] == "ModelRetry"
    assert done["tool:lookup_price:c-price~2"] == 3
    client.decide("r-1", None, "approve", "carol")
    res = rt.resume("r-1")
    assert (res.outcome, res.result) == ("succeeded", "charged: tea for 3 (tool:charge:c-charge)")
    assert _paid(_world) == {
        "model:1": 1, "model:3": 1, "model:5": 1, "model:7": 1, "r-1/tool:charge:c-charge": 1
    }  # fmt: skip
