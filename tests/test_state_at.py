"""A run as it was at any seq of its history (issue 45 item 1): ``Client.state_at`` and
``torpor show RUN --at SEQ`` fold events 1..SEQ with the same pure fold as the live state.
Every seq of a real run with a step, an artifact, an approval wait and an effect folds; each
later state extends the earlier one; the last equals the live state; a seq outside the history
is one error naming the run and its range; an agent's past state names the context its latest
model call up to then was sent."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import runtime_kit as kit
import torpor
from conftest import HANG_S, ROOT
from torpor.agents.models import ScriptedModel, say, use
from torpor.cli import app
from torpor.errors import BadInputError
from torpor.report.past import gather_at
from torpor.report.run import RunReport


def push(sha: str, idempotency_key: str) -> dict[str, Any]:
    kit.ledger("effect", key=idempotency_key, sha=sha)
    return {"pushed": sha}


def find_push(call: torpor.EffectCall) -> torpor.Applied | torpor.Absent:
    hits = kit.ledger_entries("effect", key=call.idempotency_key)
    return torpor.Applied({"pushed": hits[-1]["sha"]}) if hits else torpor.Absent()


@torpor.workflow(name="past.ship", version="1")
def ship(run: torpor.Run, cfg: dict[str, Any]) -> Any:
    text = run.step("read", lambda: cfg["content"])
    ref = run.artifact("patch", text)
    ok = run.approval("ship", [ref], summary="push the patch")
    return run.effect("push", push, ref.sha256, approval=ok, artifacts=[ref], reconcile=find_push)


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path) -> None:
    kit.use_ledger(tmp_path / "ledger.jsonl")


def _shipped(url: str) -> tuple[torpor.Runtime, torpor.Client]:
    rt = torpor.Runtime(url)
    client = torpor.Client(rt.store)
    assert rt.run(ship, {"content": "patch v1\n"}, run_id="s1").wait_kind == "approval"
    client.decide("s1", None, "approve", "alice", comment="fine")
    assert rt.resume("s1").outcome == "succeeded"
    return rt, client


def _extends(before: RunReport, after: RunReport) -> None:
    """``after`` is ``before`` carried on: nothing recorded by then is gone."""
    b, a = before.state, after.state
    assert a.seq == b.seq + 1
    assert a.steps_completed >= b.steps_completed and a.effects_applied >= b.effects_applied
    assert [s.step_id for s in before.steps] == [s.step_id for s in after.steps][
        : len(before.steps)
    ]
    assert [e.key for e in before.effects] == [e.key for e in after.effects][: len(before.effects)]
    assert before.artifacts == after.artifacts[: len(before.artifacts)]
    assert set(b.approvals) <= set(a.approvals)


def test_every_seq_folds_and_extends_the_one_before(store_url: str) -> None:
    rt, client = _shipped(store_url)
    try:
        events = client.events("s1")
        last = events[-1].seq
        states = [client.state_at("s1", seq) for seq in range(1, last + 1)]
        assert [s.seq for s in states] == list(range(1, last + 1))
        assert states[-1].model_dump() == client.state("s1").model_dump()

        at = {e.type: e.seq for e in reversed(events)}  # each type's first seq
        assert states[at["run_started"] - 1].status.value == "pending"
        waiting = states[at["wait_started"] - 1]
        assert waiting.wait is not None and waiting.wait.kind == "approval"
        assert states[at["approval_decided"] - 1].approvals != {}
        assert "push" not in " ".join(states[at["wait_started"] - 1].effects)
        intended = states[at["effect_intended"] - 1]
        (key,) = intended.effects
        assert intended.effects[key].status in ("intended", "observed")
        assert intended.status.value != "finished" and states[-1].outcome is not None

        # The report folds at every seq too, each extending the one before; nothing of the
        # future leaks into the past.
        reports = [gather_at(client, "s1", seq) for seq in range(1, last + 1)]
        for seq, rep in enumerate(reports, 1):
            assert rep.as_of == (seq, last) and rep.rec.last_seq == seq
            assert rep.rec.lease_owner is None and rep.inbox == []
            assert rep.state.model_dump() == states[seq - 1].model_dump()
            assert {a.name for a in rep.artifacts} == set(states[seq - 1].artifacts)
        for before, after in itertools.pairwise(reports):
            _extends(before, after)
        assert reports[at["wait_started"] - 1].effects == []
        assert [e.status for e in reports[-1].effects] == ["observed"]

        for bad in (0, -3, last + 1):
            with pytest.raises(BadInputError) as err:
                client.state_at("s1", bad)
            assert str(err.value) == (
                f"run 's1' has no event at seq {bad}: its history is seq 1..{last}"
            )
        with pytest.raises(torpor.errors.RunNotFoundError):
            client.state_at("nope", 1)
    finally:
        rt.close()


def _show(db_url: str, *args: str) -> Any:
    out = CliRunner().invoke(app, ["--db", db_url, "show", *args])
    return out


def test_show_at_every_seq_says_it_is_a_past_state(db_url: str) -> None:
    rt, client = _shipped(db_url)
    try:
        last = client.get("s1").last_seq
        wait_seq = next(e.seq for e in client.events("s1") if e.type == "wait_started")
    finally:
        rt.close()
    for seq in range(1, last + 1):
        out = _show(db_url, "s1", "--at", str(seq))
        assert out.exit_code == 0, out.output
        assert f"seq {seq} of {last}" in out.output, out.output
    text = _show(db_url, "s1", "--at", str(wait_seq)).output
    assert "a past state" in text and "Waiting" in text and "approval" in text, text
    assert "Effects" not in text  # the push came later
    assert "torpor approve" not in text  # a past state: no hints to act on it
    js = json.loads(_show(db_url, "s1", "--at", str(wait_seq), "--json").output)
    assert js["as_of"] == {"seq": wait_seq, "of": last}
    assert (js["status"], js["wait"]["kind"], js["effects"]) == ("waiting", "approval", [])
    live = json.loads(_show(db_url, "s1", "--json").output)
    assert "as_of" not in live and live["status"] == "finished"
    bad = _show(db_url, "s1", "--at", str(last + 1))
    assert bad.exit_code != 0
    assert f"run 's1' has no event at seq {last + 1}: its history is seq 1..{last}" in (
        bad.output + str(bad.exception or "")
    )


def test_an_agents_past_state_names_the_context_its_model_call_was_sent(
    runtime: torpor.Runtime, client: torpor.Client, db_url: str
) -> None:
    tools = torpor.Tools()

    @tools.tool
    def add(a: int, b: int) -> int:
        return a + b

    model = ScriptedModel([use(("add", {"a": 1, "b": 2})), say("3")])
    agent = torpor.Agent(
        "past.agent", goal="add 1 and 2", tools=tools, planner=torpor.ReActPlanner(model)
    )
    assert runtime.run(agent, None, run_id="a1").outcome == "succeeded"
    built = [e for e in client.events("a1") if e.type == "context_built"]
    assert len(built) == 2
    before = gather_at(client, "a1", built[0].seq - 1)
    first = gather_at(client, "a1", built[0].seq)
    assert before.context is None
    assert first.context is not None and first.context.context_hash == built[0].payload.context_hash  # type: ignore[attr-defined]
    assert gather_at(client, "a1", client.get("a1").last_seq).context == built[1].payload
    out = _show(db_url, "a1", "--at", str(built[0].seq)).output
    assert "Context" in out and built[0].payload.context_hash in out, out  # type: ignore[attr-defined]


@pytest.mark.proc
def test_the_cli_docs_section_runs_as_written(tmp_path: Path) -> None:
    """docs/cli.md, "A run as it was at any point": the script, then its commands, in real
    processes against one SQLite store; then a seq past the end is one line, exit 2."""
    text = (ROOT / "docs" / "cli.md").read_text().split("## A run as it was at any point", 1)[1]
    (tmp_path / "ship.py").write_text(text.split("```python\n# ship.py\n", 1)[1].split("```")[0])
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(ln.split("#", 1)[0]) for ln in block.strip().splitlines()]

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200")
        if argv[0] == "torpor":
            argv = [sys.executable, "-m", "torpor.cli", *argv[1:]]
        elif argv[0] == "python":
            argv = [sys.executable, *argv[1:]]
        return subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_S
        )

    outs = [run(c) for c in commands]
    assert [o.returncode for o in outs] == [0, 0, 0], [o.stderr for o in outs]
    assert outs[0].stdout.splitlines() == ["approval", "wait_started", "{}"]
    assert "wait_started" in outs[1].stdout
    shown = outs[2].stdout
    assert "as of" in shown and "seq 3 of" in shown and "a past state" in shown, shown
    assert "read" in shown and "Artifacts" not in shown, shown
    bad = run(["torpor", "show", "ship-1", "--at", "99"])
    assert bad.returncode == 2 and bad.stdout == ""
    (line,) = bad.stderr.strip().splitlines()
    assert re.fullmatch(
        r"error: run 'ship-1' has no event at seq 99: its history is seq 1\.\.\d+", line
    )


def test_every_seq_of_the_recorded_effects_fixture_folds(tmp_path: Path) -> None:
    """Histories written by an older torpor (tests/fixtures/legacy/effects-v3: effects
    intended, observed, in doubt, reconciled; signal, timer and approval waits): every seq of
    every run folds, each report extending the one before, the last equal to the live state."""
    shutil.copy(ROOT / "tests" / "fixtures" / "legacy" / "effects-v3.sqlite", tmp_path / "old.db")
    with torpor.Client(f"sqlite:///{tmp_path}/old.db") as client:
        runs = client.runs(limit=100)
        assert len(runs) >= 9
        for r in runs:
            reps = [gather_at(client, r.run_id, seq) for seq in range(1, r.last_seq + 1)]
            for before, after in itertools.pairwise(reps):
                _extends(before, after)
            assert reps[-1].state.model_dump() == client.state(r.run_id).model_dump(), r.run_id
