"""Approve with edit, or respond (issue 39), on both backends: an edited approval executes
exactly the edited bytes (the signed decision binds their sha256; the record keeps the proposed
and the edited content), a database writer cannot swap them (in the inbox or in the history),
and a reply reaches the model while nothing runs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import torpor
from torpor import Agent, Client, CodePlanner, PlanView, ReActPlanner, Runtime, Tools
from torpor.agents.models import Message, ScriptedModel, ToolSpec, say, use
from torpor.cli import main as cli_main
from torpor.client_steer import edit_diff
from torpor.serde import sha256_hex
from torpor.store import open_store

_n = 0


def fresh(name: str) -> str:
    global _n
    _n += 1
    return f"test.edit.{name}.{_n}"


def _sql(store_url: str, sql: str) -> int:
    """A writer of the database: raw SQL, bypassing torpor."""
    store = open_store(store_url)
    try:
        with store.driver.transaction() as cur:
            store.driver.execute(cur, sql, {})
            return int(getattr(cur, "rowcount", 0) or 0)
    finally:
        store.close()


def deploy_agent(ran: list[dict[str, Any]], planner: Any, name: str) -> Agent:
    tools = Tools()

    @tools.tool(policy="effect", requires_approval=lambda a: a["env"] == "prod")
    def deploy(env: str, version: str, idempotency_key: str) -> dict[str, Any]:
        """Deploy a version."""
        ran.append({"env": env, "version": version})
        return {"deployed": version, "env": env}

    return Agent(fresh(name), goal="ship", tools=tools, planner=planner)


def test_an_edited_approval_runs_exactly_the_edited_bytes(
    store_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ran: list[dict[str, Any]] = []

    def plan(view: PlanView) -> Any:
        if view.steps:
            return None
        return [
            torpor.ProposedStep(call_id="d1", tool="deploy", args={"env": "prod", "version": "2.0"})
        ]

    agent = deploy_agent(ran, CodePlanner(plan), "runs")
    with Runtime(store_url) as rt:
        client = Client(rt.store)
        assert rt.run(agent, {}, run_id="e1").wait_kind == "approval"
        proposed = client.proposed("e1")
        assert json.loads(proposed) == {"tool": "deploy", "args": {"env": "prod", "version": "2.0"}}
        edited = proposed.replace('"2.0"', '"2.1"')
        diff = edit_diff(proposed, edited)
        assert '-    "version": "2.0"' in diff and '+    "version": "2.1"' in diff

        # The CLI: prints the proposed content to start from, then the diff, then signs.
        capsys.readouterr()
        with pytest.raises(SystemExit) as out:
            cli_main(["--db", store_url, "approve", "e1", "--as", "alice", "--edit", "-"])
        assert out.value.code == 0 and json.loads(capsys.readouterr().out) == json.loads(proposed)
        edit_file = tmp_path / "edit.json"
        # An edit that is not JSON (the proposed content is): refused before anything is signed.
        edit_file.write_text(edited[:-3])
        with pytest.raises(SystemExit) as out:
            cli_main(
                ["--db", store_url, "approve", "e1", "--as", "alice", "--edit", str(edit_file)]
            )
        err = capsys.readouterr().err
        assert out.value.code == 2 and "the edit is not (" in err and err.count("\n") == 1, err
        assert client.state("e1").wait is not None and not client.store.pending_inbox("e1")
        edit_file.write_text(edited)
        with pytest.raises(SystemExit) as out:
            cli_main(
                ["--db", store_url, "approve", "e1", "--as", "alice", "--edit", str(edit_file)]
            )
        shown = capsys.readouterr().out
        assert out.value.code == 0, shown
        assert '+    "version": "2.1"' in shown
        # The hash printed for what runs is the edit's (it printed the proposal's alone).
        assert f"sha256:{sha256_hex(edited)} (the edited content: what runs)" in shown, shown

        res = rt.resume("e1")
        assert res.outcome == "succeeded", res
        assert ran == [{"env": "prod", "version": "2.1"}]  # the edit, not the proposal
        # The record keeps both: the proposed arguments (an artifact the approval binds) and
        # the edited bytes with the sha256 the signature binds.
        st = client.state("e1")
        [decided] = [e.payload for e in client.events("e1") if e.type == "approval_decided"]
        assert decided.edited == sha256_hex(edited)  # type: ignore[attr-defined]
        assert decided.edited_content == edited  # type: ignore[attr-defined]
        [info] = st.approvals.values()
        proposed_doc = [a for a in st.artifacts.values() if a.sha256 in info.hashes]
        assert json.loads(client.artifact_bytes(proposed_doc[0].sha256))["args"]["version"] == "2.0"
        [settled] = [e.payload for e in client.events("e1") if e.type == "tool_call_settled"]
        assert settled.outcome == "succeeded"  # type: ignore[attr-defined]
        assert settled.observation == {"deployed": "2.1", "env": "prod"}  # type: ignore[attr-defined]


# ---------------------------------------------------------------- a writer of the database


@torpor.workflow(name="test.edit.ship", version="1")
def ship(run: torpor.Run, content: str) -> Any:
    ref = run.artifact("patch", content)
    appr = run.approval("ship", [ref], summary="push the patch")
    run.wait_for("go")
    body = appr.edited_content or content
    return run.effect("push", _push, body, approval=appr, artifacts=[ref])


pushed: list[str] = []


def _push(body: str) -> dict[str, str]:
    pushed.append(body)
    return {"pushed": sha256_hex(body)}


def test_a_database_writer_cannot_swap_the_edited_bytes(store_url: str) -> None:
    pushed.clear()
    with Runtime(store_url) as rt:
        client = Client(rt.store)
        assert rt.run(ship, "patch v1\n", run_id="w1").wait_kind == "approval"
        good = "patch v1, reviewed\n"

        # 1. In the inbox, before the run takes it: other bytes under the signed hash.
        client.approve_edited("w1", None, good, "alice")
        assert _sql(store_url, "UPDATE inbox SET body = replace(body, 'reviewed', 'EVIL') "
                    "WHERE run_id = 'w1' AND kind = 'decision'") == 1  # fmt: skip
        res = rt.resume("w1")
        assert (res.status, res.wait_kind) == ("waiting", "approval"), res
        # 2. Other bytes with their own hash: the signature no longer verifies.
        client.approve_edited("w1", None, good, "bob")
        evil = "patch v1, EVIL\n"
        _sql(store_url, f"UPDATE inbox SET body = replace(replace(body, 'reviewed', 'EVIL'), "
             f"'{sha256_hex(good)}', '{sha256_hex(evil)}') WHERE run_id = 'w1' AND kind = "
             "'decision' AND consumed_seq IS NULL")  # fmt: skip
        res = rt.resume("w1")
        assert (res.status, res.wait_kind) == ("waiting", "approval"), res
        refused = [e.payload for e in client.events("w1") if e.type == "approval_refused"]
        reasons = [r.reason for r in refused]  # type: ignore[attr-defined]
        assert len(reasons) == 2, reasons
        assert "edited content does not match" in reasons[0]
        assert "signature does not verify" in reasons[1]
        assert pushed == []

        # 3. In the history, after a valid edit was recorded: the bytes swapped in the event
        #    (and in the engine's checkpoint, so the forgery is self-consistent).
        client.approve_edited("w1", None, good, "carol")
        assert rt.resume("w1").wait_kind == "signal"  # decided; waits for "go"
        n = _sql(store_url, "UPDATE events SET payload = replace(payload, 'reviewed', 'EVIL') "
                 "WHERE run_id = 'w1' AND type = 'approval_decided'")  # fmt: skip
        assert n == 1
        _sql(store_url, "UPDATE runs SET checkpoint = replace(checkpoint, 'reviewed', 'EVIL') "
             "WHERE run_id = 'w1'")  # fmt: skip
        client.signal("w1", "go")
        res = rt.resume("w1")
        assert (res.status, res.wait_kind) == ("waiting", "approval"), res
        assert "edited content does not match" in res.reason
        assert pushed == []  # no effect ran, with either bytes
        last = [e.payload for e in client.events("w1") if e.type == "approval_refused"][-1]
        assert last.withdrawn and last.approver == "carol"  # type: ignore[attr-defined]

        # A valid edit again: the effect runs exactly those bytes, once.
        client.approve_edited("w1", None, good, "alice")
        res = rt.resume("w1")
        assert res.outcome == "succeeded", res
        assert pushed == [good]


# ---------------------------------------------------------------- respond


def test_a_reply_reaches_the_model_and_nothing_runs(store_url: str) -> None:
    ran: list[dict[str, Any]] = []

    def turn1(messages: Sequence[Message], specs: Sequence[ToolSpec]) -> Message:
        text = "\n".join(m.content for m in messages)
        assert "deploy 2.1 to staging first" in text
        return say("will do staging first")

    model = ScriptedModel([use(("deploy", {"env": "prod", "version": "2.1"})), turn1])
    agent = deploy_agent(ran, ReActPlanner(model), "respond")
    with Runtime(store_url) as rt:
        client = Client(rt.store)
        assert rt.run(agent, {}, run_id="r1").wait_kind == "approval"
        aid, _ = client.respond("r1", None, "deploy 2.1 to staging first", "alice")
        res = rt.resume("r1")
        assert res.outcome == "succeeded", res  # a reply is not a denial: the run goes on
        assert ran == []  # nothing ran
        assert len(model.calls) == 2
        [settled] = [e.payload for e in client.events("r1") if e.type == "tool_call_settled"]
        assert settled.outcome == "responded"  # type: ignore[attr-defined]
        assert settled.observation == {  # type: ignore[attr-defined]
            "reply": "deploy 2.1 to staging first",
            "replied_by": "alice",
        }
        info = client.state("r1").approvals[aid]
        assert info.status == "denied" and info.decisions[0].decision == "respond"
        assert not [e for e in client.events("r1") if e.type == "effect_intended"]
