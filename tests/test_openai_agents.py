"""OpenAI Agents SDK agents on torpor (issue 47): the desk of ``examples/openai_agents`` — a
handoff, a read tool, an effect tool against a local ledger, two guardrails — offline behind the
SDK's ``Model`` interface. In one process: what is recorded, the plain SDK's output equal to the
durable one, a replay paying for nothing, an interruption approved by a person, and what is
refused; ``import torpor`` does not import ``agents``. (Crashes: test_openai_agents_explore.py.)"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig
from agents import Runner as PlainRunner

import torpor
from conftest import run_python
from torpor import Client, Runtime
from torpor.errors import ConfigError
from torpor.integrations.openai_agents import Runner
from torpor.testing import FileLedger

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.openai_agents import desk, make_desk  # noqa: E402

REQUEST = "Please refund my order A-42."


def _steps(client: Client, run_id: str) -> list[str]:
    return [e.payload.step_id for e in client.events(run_id) if e.type == "step_completed"]


def test_the_desk_records_every_decision_and_answers_as_the_plain_sdk(
    store_url: str, tmp_path: Path
) -> None:
    plain = asyncio.run(
        PlainRunner.run(
            make_desk(tmp_path / "plain"), REQUEST, run_config=RunConfig(tracing_disabled=True)
        )
    )
    world = tmp_path / "durable"
    with Runtime(store_url) as rt:
        res = rt.run(desk, {"request": REQUEST, "world": str(world)}, run_id="desk")
        assert res.outcome == "succeeded", res.reason
        assert res.result == plain.final_output == "Refunded order A-42: refund 19.90 for A-42"
        client = Client(rt.store)
        assert _steps(client, "desk") == [
            "oa.guardrail:input:not_empty",
            "oa.model:triage",
            "oa.handoff:triage->billing",
            "oa.model:billing",
            "oa.tool:lookup_order:c1",
            "oa.model:billing#2",
            "oa.tool:refund:c2",
            "oa.model:billing#3",
            "oa.guardrail:output:names_order",
        ]
        called = [e.payload for e in client.events("desk") if e.type == "model_called"]
        assert [c.step_id for c in called] == [
            "oa.model:triage",
            "oa.model:billing",
            "oa.model:billing#2",
            "oa.model:billing#3",
        ]
        assert all(c.model == "DeskModel" and c.input_tokens > 0 for c in called)
        assert [e.payload.key for e in client.events("desk") if e.type == "effect_intended"] == [
            "desk/oa.tool:refund:c2"
        ]
        assert len(FileLedger(world / "model-calls.jsonl").entries()) == 4
        assert FileLedger(world / "ledger.jsonl").counts() == {"desk/oa.tool:refund:c2": 1}


def test_an_interrupted_refund_waits_for_a_person_and_runs_once_approved(
    store_url: str, tmp_path: Path
) -> None:
    world = tmp_path / "w"
    inp = {"request": REQUEST, "world": str(world), "approval": True}
    with Runtime(store_url) as rt:
        client = Client(rt.store)
        res = rt.run(desk, inp, run_id="hitl")
        assert res.status == "waiting"
        pending = client.pending_approvals("hitl")
        assert list(pending) and next(iter(pending)).startswith("oa.tool.refund@")
        assert not FileLedger(world / "ledger.jsonl").entries()  # nothing refunded yet
        bill = FileLedger(world / "model-calls.jsonl")
        assert [e["key"] for e in bill.entries()] == ["triage:1", "billing:3", "billing:5"]
        bound = client.state("hitl").open_approvals()
        ref = next(iter(bound.values())).hashes[0]
        body = client.artifact_bytes(ref)  # what the person approves: this exact call
        assert b'"tool": "refund"' in body and b'\\"amount\\":\\"19.90\\"' in body
        client.decide("hitl", None, "approve", "alice")
        res = rt.resume("hitl")
        assert res.outcome == "succeeded", res.reason
        assert res.result == "Refunded order A-42: refund 19.90 for A-42"
        decided = [e.payload for e in client.events("hitl") if e.type == "approval_decided"]
        assert [d.approver for d in decided] == ["alice"]
        assert FileLedger(world / "ledger.jsonl").counts() == {"hitl/oa.tool:refund:c2": 1}
        # The resume ran the workflow again from its start over the record: the three calls
        # made before the wait were replayed, not paid again; only the last one is new.
        assert [e["key"] for e in bill.entries()][3:] == ["billing:7"]


def test_a_denied_refund_is_rejected_and_the_model_told(db_url: str, tmp_path: Path) -> None:
    world = tmp_path / "w"
    inp = {"request": REQUEST, "world": str(world), "approval": True}
    with Runtime(db_url) as rt:
        assert rt.run(desk, inp, run_id="no").status == "waiting"
        Client(rt.store).decide("no", None, "deny", "bob")
        res = rt.resume("no")
    assert res.outcome == "succeeded", res.reason
    assert "denied by a person" in str(res.result)
    assert not FileLedger(world / "ledger.jsonl").entries()


@torpor.workflow(name="test.oa.refused", version="1")
async def refused(run: torpor.Run, inp: dict[str, str]) -> str:
    agent = make_desk(inp["world"])
    if inp["kind"] == "session":
        await Runner.run(agent, "hi", run=run, session=object())
    else:
        await Runner.run(Agent(name="m", mcp_servers=[object()]), "hi", run=run)  # type: ignore[list-item]
    return "unreachable"


@pytest.mark.parametrize("kind,why", [("session", "sessions"), ("mcp", "issue 41")])
def test_what_is_not_recorded_yet_is_refused_with_the_reason(
    kind: str, why: str, tmp_path: Path
) -> None:
    with Runtime(f"sqlite:///{tmp_path}/t.db") as rt:
        res = rt.run(refused, {"kind": kind, "world": str(tmp_path)}, run_id=kind)
    assert res.outcome == "failed" and why in str(res.reason), res.reason
    with pytest.raises(ConfigError, match="issue 40"):
        Runner.run_streamed(make_desk(tmp_path), "hi")


CRASH_DURING_REFUND = """
import sys, torpor
sys.path.insert(0, {root!r})
from examples.openai_agents import desk
torpor.Runtime({db!r}).run(desk, {inp!r}, run_id="lost")
"""


@pytest.mark.proc
def test_a_refund_killed_mid_call_without_a_reconcile_is_unresolved_not_repeated(
    tmp_path: Path,
) -> None:
    """SIGKILL after the refund reached the ledger, before torpor observed it: with no
    reconcile nothing can say whether it happened, so the run is ``unresolved`` (G2), the
    refund not made again."""
    world = tmp_path / "w"
    db = f"sqlite:///{tmp_path}/t.db"
    inp = {"request": REQUEST, "world": str(world), "reconcile": False}
    code = CRASH_DURING_REFUND.format(root=str(ROOT), db=db, inp=inp)
    first = run_python(code, cwd=tmp_path, env={"TORPOR_CRASH_AT": "effect.called@1"})
    assert first.returncode == -signal.SIGKILL, first.stdout + first.stderr
    with Runtime(db) as rt:
        res = rt.resume("lost")
    assert res.outcome == "unresolved", res.reason
    assert "oa.tool:refund:c2" in str(res.reason)
    assert FileLedger(world / "ledger.jsonl").counts() == {"lost/oa.tool:refund:c2": 1}


@pytest.mark.proc
def test_the_example_runs_as_the_docs_show(torpor_home: Path) -> None:
    """docs/openai-agents.md includes examples/openai_agents/__main__.py: plain and durable."""
    out = subprocess.run(
        [sys.executable, "-m", "examples.openai_agents"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    answer = "Refunded order A-42: refund 19.90 for A-42"
    assert out.stdout.splitlines() == [f"plain:   {answer}", f"durable: succeeded {answer}"]


@pytest.mark.proc
def test_import_torpor_does_not_import_the_sdk() -> None:
    code = (
        "import sys, torpor, torpor.cli, torpor.integrations; "
        "print(sorted(m for m in sys.modules if m == 'agents' or m.startswith('agents.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip() == "[]"
