"""Fork a run at a step or a seq without repeating its effects (issue 45 item 2):
``Client.fork`` and ``torpor fork``. Every effect goes to an outside ledger (a file written by
the effect itself, read back by the test), so "performed once" is checked in the world, not in
torpor's records. Both backends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import runtime_kit as kit
import torpor
from torpor.agents.models import ScriptedModel, say, use
from torpor.cli import app
from torpor.errors import BadInputError


def push(sha: str, idempotency_key: str) -> dict[str, Any]:
    kit.ledger("push", key=idempotency_key, sha=sha)
    return {"pushed": sha}


def find_push(call: torpor.EffectCall) -> torpor.Applied | torpor.Absent:
    hits = kit.ledger_entries("push", key=call.idempotency_key)
    return torpor.Applied({"pushed": hits[-1]["sha"]}) if hits else torpor.Absent()


def notify(text: str, idempotency_key: str) -> str:
    kit.ledger("notify", key=idempotency_key, text=text)
    return "sent"


def find_notify(call: torpor.EffectCall) -> torpor.Applied | torpor.Absent:
    hits = kit.ledger_entries("notify", key=call.idempotency_key)
    return torpor.Applied("sent") if hits else torpor.Absent()


@torpor.workflow(name="fork.ship", version="1")
def ship(run: torpor.Run, cfg: dict[str, Any]) -> Any:
    text = run.step("read", lambda: cfg["content"])
    run.effect("notify", notify, f"about to ship {len(text)} bytes", reconcile=find_notify)
    ref = run.artifact("patch", text)
    ok = run.approval("ship", [ref], summary="push the patch")
    return run.effect("push", push, ref.sha256, approval=ok, artifacts=[ref], reconcile=find_push)


@torpor.workflow(name="fork.ship.fixed", version="2", criteria=["pushed"])
def ship_fixed(run: torpor.Run, cfg: dict[str, Any]) -> Any:
    """The fixed code: the same path up to the patch, then another patch and another push."""
    text = run.step("read", lambda: cfg["content"])
    run.effect("notify", notify, f"about to ship {len(text)} bytes", reconcile=find_notify)
    ref = run.artifact("patch", text.replace("v1", "v2 (fixed)"))
    ok = run.approval("ship", [ref], summary="push the fixed patch")
    out = run.effect(
        "push-fixed", push, ref.sha256, approval=ok, artifacts=[ref], reconcile=find_push
    )
    run.verify("pushed", bool(out))
    return out


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path) -> None:
    kit.use_ledger(tmp_path / "ledger.jsonl")


def _shipped(url: str, run_id: str = "o1") -> tuple[torpor.Runtime, torpor.Client]:
    rt = torpor.Runtime(url)
    client = torpor.Client(rt.store)
    assert rt.run(ship, {"content": "patch v1\n"}, run_id=run_id).wait_kind == "approval"
    client.decide(run_id, None, "approve", "alice", comment="fine")
    assert rt.resume(run_id).outcome == "succeeded"
    assert [e["kind"] for e in kit.ledger_entries()] == ["notify", "push"]
    return rt, client


def _first(events: list[torpor.Event], etype: str, **match: Any) -> torpor.Event:
    return next(
        e
        for e in events
        if e.type == etype and all(getattr(e.payload, k) == v for k, v in match.items())
    )


def test_a_fork_after_the_effects_performs_none_of_them_again(store_url: str) -> None:
    rt, client = _shipped(store_url)
    try:
        origin = client.events("o1")
        at = _first(origin, "step_completed", step_id="push").seq  # both effects settled
        fork = client.fork("o1", at, fork_id="f1", by="alice", reason="replay the end")
        assert (fork.run_id, fork.origin, fork.at_seq, fork.created) == ("f1", "o1", at, True)
        assert fork.renewed == []  # the one approval was consumed: settled history
        copied = client.events("f1")
        assert [(e.seq, e.type, e.payload, e.at_ms) for e in copied[:at]] == [
            (e.seq, e.type, e.payload, e.at_ms) for e in origin[:at]
        ]
        head = copied[at]
        assert head.type == "run_forked" and head.payload.origin == "o1"  # type: ignore[attr-defined]
        assert (client.fork_origin("f1"), [r.run_id for r in client.forks("o1")]) == (
            ("o1", at),
            ["f1"],
        )
        assert client.fork("o1", at, fork_id="f1").created is False  # idempotent by run id
        # The fork refers to the artifacts its copied events name (retention keeps them for it).
        assert client.storage("f1").artifact_bytes == client.storage("o1").artifact_bytes > 0

        res = rt.resume("f1")
        assert res.outcome == "succeeded", res.reason
        assert [e["kind"] for e in kit.ledger_entries()] == ["notify", "push"]  # nothing twice
        after = [e.type for e in client.events("f1")[at + 1 :]]
        assert "effect_intended" not in after and after[-1] == "run_finished"
        assert client.state("f1").fork.origin == "o1"  # type: ignore[union-attr]
    finally:
        rt.close()


def test_an_effect_the_origin_performed_is_refused_unless_redo_effects(store_url: str) -> None:
    rt, client = _shipped(store_url)
    try:
        origin = client.events("o1")
        signed = _first(origin, "approval_decided").payload
        client.fork("o1", "push", fork_id="f-no")
        res = rt.resume("f-no")
        # Refused before anything is asked of a person: the origin pushed after this point.
        assert res.outcome == "blocked" and "'o1/push'" in res.reason, res
        assert "--redo-effects" in res.reason
        assert client.pending_approvals("f-no") == {}
        assert [e["kind"] for e in kit.ledger_entries()] == ["notify", "push"]

        fork = client.fork("o1", "push", fork_id="f-redo", redo_effects=True)
        assert [x.key for x in fork.performed] == ["o1/push"]
        # The approval of the copied history is raised again: the fork waits for its own.
        assert rt.resume("f-redo").wait_kind == "approval"
        (aid,) = client.pending_approvals("f-redo")
        assert aid == signed.approval_id  # type: ignore[attr-defined]
        nonce = client.state("f-redo").approvals[aid].nonce
        assert nonce and nonce != client.state("o1").approvals[aid].nonce
        # The origin's signed decision, delivered to the fork, is refused there (G6, G16).
        body = signed.model_dump(exclude={"arrived_at_ms"})  # type: ignore[attr-defined]
        client.store.post_inbox("f-redo", "decision", body, message_id="replayed")
        assert rt.resume("f-redo").wait_kind == "approval"
        refused = _first(client.events("f-redo"), "approval_refused")
        assert refused.payload.approver == "alice", refused  # type: ignore[attr-defined]
        assert [e["kind"] for e in kit.ledger_entries()] == ["notify", "push"]
        client.decide("f-redo", aid, "approve", "bob")
        assert rt.resume("f-redo").outcome == "succeeded"
        pushes = kit.ledger_entries("push")
        assert [p["key"] for p in pushes] == ["o1/push", "f-redo/push"]
        intent = _first(client.events("f-redo"), "effect_intended", step_id="push")
        assert intent.payload.redoes == "o1/push"  # type: ignore[attr-defined]
        head = _first(client.events("f-redo"), "run_forked")
        assert head.payload.redo_effects is True  # type: ignore[attr-defined]
        assert [e["kind"] for e in kit.ledger_entries("notify")] == ["notify"]
        # A fork of the fork knows both pushes: its origin's and the one before that.
        again = client.fork("f-redo", "push", fork_id="f-again")
        assert [x.key for x in again.performed] == ["o1/push", "f-redo/push"]
        assert rt.resume("f-again").outcome == "blocked"
        assert len(kit.ledger_entries("push")) == 2
    finally:
        rt.close()


def test_a_fork_with_new_code_asks_again_for_changed_content(store_url: str) -> None:
    rt, client = _shipped(store_url)
    try:
        origin = client.events("o1")
        at = _first(origin, "step_started", step_id="artifact:patch").seq - 1
        fork = client.fork("o1", "artifact:patch", fork_id="f2", workflow=ship_fixed)
        assert rt.resume("f2").wait_kind == "approval"
        pending = client.pending_approvals("f2")
        old = client.state("o1").artifacts["patch"].sha256
        (aid,) = pending
        assert aid not in client.state("o1").approvals and old not in pending[aid]
        new = client.state("f2").artifacts["patch"].sha256
        assert pending[aid] == [new]
        client.decide("f2", aid, "approve", "alice")
        assert rt.resume("f2").outcome == "succeeded"
        assert [(p["key"], p["sha"]) for p in kit.ledger_entries("push")] == [
            ("o1/push", old),
            ("f2/push-fixed", new),
        ]
        assert len(kit.ledger_entries("notify")) == 1  # before the fork point: never again
        st = client.state("f2")
        assert (st.workflow, st.version, fork.at_seq) == ("fork.ship.fixed", "2", at)
        assert st.criteria == ["pushed"] and st.verifications["pushed"].passed
    finally:
        rt.close()


def test_a_fork_with_another_model_pays_only_for_the_calls_after_its_point(
    store_url: str,
) -> None:
    tools = torpor.Tools()

    @tools.tool
    def add(a: int, b: int) -> int:
        return a + b

    def agent(model: ScriptedModel) -> torpor.Agent:
        return torpor.Agent(
            "fork.agent", goal="add 1 and 2", tools=tools, planner=torpor.ReActPlanner(model)
        )

    first = ScriptedModel([use(("add", {"a": 1, "b": 2})), say("3")], model_id="model-a")
    rt = torpor.Runtime(store_url)
    client = torpor.Client(rt.store)
    try:
        assert rt.run(agent(first), None, run_id="a1").outcome == "succeeded"
        calls = [e for e in client.events("a1") if e.type == "model_called"]
        assert [c.payload.model for c in calls] == ["model-a", "model-a"]  # type: ignore[attr-defined]
        second_step = calls[1].payload.step_id  # type: ignore[attr-defined]
        other = ScriptedModel([use(("add", {"a": 1, "b": 2})), say("three")], model_id="model-b")
        agent(other)  # the new code: same agent, another model
        client.fork("a1", second_step, fork_id="a1-b", workflow="fork.agent")
        res = rt.resume("a1-b")
        assert res.outcome == "succeeded", res.reason
        forked = client.events("a1-b")
        models = [e.payload.model for e in forked if e.type == "model_called"]  # type: ignore[attr-defined]
        assert models == ["model-a", "model-b"]  # the first call is settled, not paid twice
        assert len(other.calls) == 1 and len(first.calls) == 2
    finally:
        rt.close()


def test_fork_points_that_are_not_at_rest_are_refused(store_url: str) -> None:
    rt, client = _shipped(store_url)
    try:
        events = client.events("o1")
        last = events[-1].seq
        intended = _first(events, "effect_intended", step_id="push").seq
        with pytest.raises(BadInputError) as err:
            client.fork("o1", intended)
        msg = str(err.value)
        assert msg.startswith(f"run 'o1' cannot be forked at seq {intended}:"), msg
        assert "may be happening" in msg and "nearest points" in msg
        with pytest.raises(BadInputError, match="had its outcome"):
            client.fork("o1", last)
        for bad in (0, "-2"):
            with pytest.raises(BadInputError, match=rf"has no event at seq {bad}: its history"):
                client.fork("o1", bad)
        with pytest.raises(BadInputError, match=r"has no step 'nope' \(its steps: read, notify"):
            client.fork("o1", "nope")
        client.fork("o1", "push", fork_id="o1-other")
        with pytest.raises(torpor.errors.ConfigError, match="exists already"):
            client.fork("o1", "read", fork_id="o1-other")
        assert client.forks("o1")[0].run_id == "o1-other"
    finally:
        rt.close()


def test_the_cli_forks_runs_and_show_names_the_origin(db_url: str) -> None:
    rt, _ = _shipped(db_url)
    rt.close()
    runner = CliRunner()
    argv = ["--db", db_url, "fork", "o1", "--at", "push", "--run-id"]
    refused = runner.invoke(app, [*argv, "c0"])
    assert refused.exit_code == 3 and "would repeat effect 'o1/push'" in refused.output
    out = runner.invoke(app, [*argv, "c1", "--redo-effects", "--as", "bob", "--json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert (got["fork"]["run_id"], got["fork"]["origin"]) == ("c1", "o1")
    assert got["result"]["wait_kind"] == "approval" and got["fork"]["renewed"] != []
    shown = runner.invoke(app, ["--db", db_url, "show", "c1"]).output
    assert "forked from" in shown and "o1 at seq" in shown, shown
    origin = runner.invoke(app, ["--db", db_url, "show", "o1"]).output
    assert "Forks" in origin and "c0" in origin and "c1" in origin, origin
    with torpor.Client(db_url) as client:  # a workflow defined in a script run as __main__
        client.store.create_run("m0", torpor.history.RunStarted(workflow="x", version="1"))
    nowhere = runner.invoke(app, ["--db", db_url, "fork", "m0", "--at", "1", "--run-id", "m0f"])
    assert isinstance(nowhere.exception, torpor.errors.UnknownWorkflowError)
    with torpor.Client(db_url) as client:
        assert client.forks("m0") == []  # refused before the fork was made
    bad = runner.invoke(app, ["--db", db_url, "fork", "o1", "--at", "999"])
    assert bad.exit_code != 0
    assert "run 'o1' has no event at seq 999: its history is seq 1.." in str(bad.exception)


def test_a_fork_keeps_the_fact_ledger_of_its_copied_compactions(store_url: str) -> None:
    """The ledger rows of a compaction are written with its event (issue 30): the fork's
    copied compactions come with theirs, so its agent recalls what the origin had learnt."""
    from torpor.history import (
        ContextCompacted,
        Event,
        Policy,
        RunStarted,
        StepCompleted,
        StepStarted,
        fold,
        type_of,
    )

    with torpor.Client(store_url) as client:
        store = client.store
        store.create_run("m1", RunStarted(workflow="fork.mem", version="1"))
        lease = store.acquire_lease("m1", "tester", 30)
        record = {"key": "k1", "kind": "identifier", "text": "release rel-7", "ids": ["rel-7"]}
        payloads = [
            StepStarted(step_id="model", policy=Policy.READ),
            ContextCompacted(
                step_id="model",
                number=1,
                summary_hash="0" * 64,
                summary_tokens=3,
                buffer_tokens_before=9,
                buffer_tokens_after=3,
                ledger=[record],
            ),
            StepCompleted(step_id="model", result="ok"),
        ]
        first = store.read_events("m1")
        events = [
            Event(run_id="m1", seq=i, type=t, payload=p, at_ms=store.now_ms(), epoch=lease.epoch)
            for i, p in enumerate(payloads, start=2)
            for t in [type_of(p)]
        ]
        store.append(lease, events, fold([*first, *events]))
        store.release_lease(lease)
        client.fork("m1", 4, fork_id="m1-f")
        assert [(e.key, e.text, e.seq) for e in client.ledger("m1-f")] == [
            ("k1", "release rel-7", 3)
        ]
        assert client.ledger("m1-f")[0].ids == client.ledger("m1")[0].ids


def test_the_cli_docs_section_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_url: str
) -> None:
    """docs/cli.md, "Fork a run without repeating its effects": the script, then its commands
    (in this process: the script by runpy, the commands by the CLI app), against one store; the
    outside world (pushes.txt) has the origin's push and the redone one, nothing else."""
    import runpy
    import shlex

    from conftest import ROOT

    text = (ROOT / "docs" / "cli.md").read_text()
    text = text.split("## Fork a run without repeating its effects", 1)[1]
    script = text.split("```python\n# forked.py\n", 1)[1].split("```")[0]
    (tmp_path / "forked.py").write_text(script)
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(ln.split("#", 1)[0]) for ln in block.strip().splitlines()]
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert commands[0] == ["python", "forked.py"]
    runpy.run_path("forked.py", run_name="__main__")
    outs = []
    for argv in commands[1:]:
        if argv[0] == "cat":
            outs.append((tmp_path / argv[1]).read_text())
            continue
        assert argv[0] == "torpor"
        res = CliRunner().invoke(app, ["--db", db_url, *argv[1:]])
        outs.append(res.output)
        assert res.exit_code == (3 if "ship-2" in argv else 0), res.output
    assert "would repeat effect 'ship-1/push'" in outs[0]
    assert [ln.split()[0] for ln in outs[2].splitlines()] == ["ship-1/push", "ship-3/push"]
    assert "forked from" in outs[3] and "ship-1 at seq 6" in outs[3], outs[3]


def test_an_origin_that_goes_on_after_the_fork_is_still_not_repeated(store_url: str) -> None:
    """Forked while the origin waited for its approval; the origin is approved and pushes
    after the fork was made: the fork's push is refused all the same (the origin's history is
    asked at the intent, not only the record made at the fork)."""
    rt = torpor.Runtime(store_url)
    client = torpor.Client(rt.store)
    try:
        assert rt.run(ship, {"content": "patch v1\n"}, run_id="w1").wait_kind == "approval"
        fork = client.fork("w1", client.get("w1").last_seq, fork_id="w1-f")
        assert fork.performed == [] and len(fork.renewed) == 1
        assert client.get("w1-f").status == "waiting"
        client.decide("w1", None, "approve", "alice")
        assert rt.resume("w1").outcome == "succeeded"
        client.decide("w1-f", None, "approve", "bob")
        res = rt.resume("w1-f")
        assert res.outcome == "blocked" and "'w1/push'" in res.reason, res
        assert [p["key"] for p in kit.ledger_entries("push")] == ["w1/push"]
        assert len(kit.ledger_entries("notify")) == 1
    finally:
        rt.close()


def test_whichever_of_a_family_pushes_first_the_others_do_not_repeat_it(store_url: str) -> None:
    """Found by an attack: the check was one-way and one level deep. (1) The fork pushes
    first, then its origin resumes: the origin is refused (it used to push too, under its own
    key). (2) A fork of a fork made before the first origin pushed: the first origin pushes,
    then the grandchild is refused (it used to ask its own origin alone)."""
    rt = torpor.Runtime(store_url)
    client = torpor.Client(rt.store)
    try:
        assert rt.run(ship, {"content": "patch v1\n"}, run_id="a1").wait_kind == "approval"
        client.fork("a1", client.get("a1").last_seq, fork_id="a1-f")
        client.decide("a1-f", None, "approve", "bob")
        assert rt.resume("a1-f").outcome == "succeeded"  # the fork pushes first
        client.decide("a1", None, "approve", "alice")
        res = rt.resume("a1")
        assert res.outcome == "blocked" and "'a1-f/push'" in res.reason, res
        assert "a fork of this run" in res.reason, res
        assert [p["key"] for p in kit.ledger_entries("push")] == ["a1-f/push"]

        assert rt.run(ship, {"content": "patch v1\n"}, run_id="b1").wait_kind == "approval"
        client.fork("b1", client.get("b1").last_seq, fork_id="b1-f")  # not run
        client.decide("b1", None, "approve", "alice")
        assert rt.resume("b1").outcome == "succeeded"  # the first origin pushes
        client.fork("b1-f", client.get("b1-f").last_seq, fork_id="b1-ff")
        client.decide("b1-ff", None, "approve", "bob")
        res = rt.resume("b1-ff")
        assert res.outcome == "blocked" and "'b1/push'" in res.reason, res
        pushes = [p["key"] for p in kit.ledger_entries("push")]
        assert pushes == ["a1-f/push", "b1/push"], pushes
    finally:
        rt.close()


def test_keys_in_a_fork_are_its_own() -> None:
    """Pure: outside a fork a key is as asked; in one, the default key is the fork's and an
    explicit one is derived from the fork; an effect of the origin's operation identity (the
    same operation at the same step, or under the same explicit key) is refused, or — with
    redo_effects — performed under the fork's key, naming the origin's."""
    from torpor.engine.forked import fork_key
    from torpor.history import ForkedEffect, ForkInfo, RunState

    plain = RunState(run_id="r")
    assert fork_key(plain, "s", "op", None) == ("r/s", None)
    assert fork_key(plain, "s", "op", "K") == ("K", None)
    done = [ForkedEffect(step_id="pay", operation="charge", key="inv-7", seq=9)]
    st = RunState(run_id="f", fork=ForkInfo(origin="r", at_seq=5, seq=6, performed=done))
    assert fork_key(st, "s", "op", None) == ("f/s", None)
    assert fork_key(st, "s", "op", "K") == ("f/fork:K", None)
    assert fork_key(st, "pay", "refund", None) == ("f/pay", None)  # another operation
    for sid, key in (("pay", None), ("pay#2", "inv-7")):
        with pytest.raises(torpor.errors.RunStopped) as stop:
            fork_key(st, sid, "charge", key)
        assert stop.value.outcome == "blocked" and "'inv-7'" in stop.value.reason
    redo = st.model_copy(update={"fork": st.fork.model_copy(update={"redo_effects": True})})  # type: ignore[union-attr]
    assert fork_key(redo, "pay#2", "charge", "inv-7") == ("f/fork:inv-7", "inv-7")


@torpor.workflow(name="fork.leaf", version="1")
def leaf(run: torpor.Run, n: int) -> int:
    return n + 1


@torpor.workflow(name="fork.tree", version="1")
def tree(run: torpor.Run, _: Any) -> Any:
    run.step("before", lambda: 1)
    child = run.spawn(leaf, 1)
    return [r.result for r in run.wait_children([child])]


def test_a_run_that_started_children_is_not_forked_after_that(runtime: torpor.Runtime) -> None:
    client = torpor.Client(runtime.store)
    assert runtime.run(tree, None, run_id="t1").outcome == "succeeded"
    events = client.events("t1")
    spawn = next(e for e in events if (e.step_id or "").startswith("child:"))
    with pytest.raises(BadInputError, match="a tree of runs is not forked") as err:
        client.fork("t1", spawn.seq)
    assert f"fork at seq {spawn.seq - 1} or before" in str(err.value)
    before = next(e.seq for e in events if e.step_id == "before") - 1
    assert client.fork("t1", "before", fork_id="t1-f").at_seq == before  # before the spawn


def test_every_seq_is_forked_or_refused_in_one_line(store_url: str) -> None:
    """Every seq of a run with a step, an effect, an artifact, an approval wait and a push:
    forked when it is at rest — the fork's history is the origin's up to it, its state the
    origin's state then, but for what a fork changes — or refused in one line naming the seq
    and the nearest seqs that can be forked."""
    from torpor.history import fork_point_problem

    rt, client = _shipped(store_url)
    try:
        last = client.get("o1").last_seq
        forked, refused = [], []
        for seq in range(1, last + 1):
            then = client.state_at("o1", seq)
            if fork_point_problem(then) is not None:
                with pytest.raises(BadInputError) as err:
                    client.fork("o1", seq)
                (line,) = str(err.value).splitlines()
                assert line.startswith(f"run 'o1' cannot be forked at seq {seq}: at seq {seq}")
                refused.append(seq)
                continue
            fid = client.fork("o1", seq, fork_id=f"o1-at-{seq}").run_id
            st = client.state(fid)
            assert (st.seq, st.fork.at_seq) == (seq + 1, seq)  # type: ignore[union-attr]
            changed = {"run_id", "seq", "approvals", "owner", "status", "fork"}
            mine, theirs = st.model_dump(exclude=changed), then.model_dump(exclude=changed)
            assert mine == theirs, {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}
            assert set(st.approvals) == set(then.approvals)
            forked.append(seq)
        assert forked and refused and last in refused  # (the outcome is never forked)
        assert [r.run_id for r in client.forks("o1")] == [f"o1-at-{s}" for s in forked]
    finally:
        rt.close()


def test_an_agents_fork_that_makes_the_same_tool_call_again_is_refused(store_url: str) -> None:
    """A fork of an agent on another model that calls the same effect tool with the same
    arguments under another call id: the same operation, refused (the world has one email);
    the same tool with other arguments is another operation, performed under the fork's key."""
    from torpor.agents.models import ToolCall

    tools = torpor.Tools()

    @tools.tool
    def look() -> str:
        return "ops is on call"

    @tools.tool(policy="effect")
    def email(to: str, idempotency_key: str) -> str:
        kit.ledger("email", key=idempotency_key, to=to)
        return "sent"

    def agent(model: ScriptedModel) -> torpor.Agent:
        return torpor.Agent(
            "fork.mailer", goal="tell ops", tools=tools, planner=torpor.ReActPlanner(model)
        )

    def call(call_id: str, to: str) -> Any:
        return use(ToolCall(id=call_id, name="email", arguments={"to": to}))

    looked = use(("look", {}))

    rt = torpor.Runtime(store_url)
    client = torpor.Client(rt.store)
    try:
        first = ScriptedModel([looked, call("c1", "ops"), say("done")], model_id="a")
        assert rt.run(agent(first), None, run_id="e1").outcome == "succeeded"
        calls = [e for e in client.events("e1") if e.type == "model_called"]
        point = calls[1].payload.step_id  # type: ignore[attr-defined]
        agent(ScriptedModel([looked, call("other", "ops"), say("done")], model_id="b"))
        client.fork("e1", point, fork_id="e1-same", workflow="fork.mailer")
        res = rt.resume("e1-same")
        assert res.outcome == "blocked" and "'e1/tool:c1@v" in res.reason, res
        agent(ScriptedModel([looked, call("c1", "dev"), say("done")], model_id="b"))
        client.fork("e1", point, fork_id="e1-dev", workflow="fork.mailer")
        assert rt.resume("e1-dev").outcome == "succeeded"
        sent = [(e["key"].split("/")[0], e["to"]) for e in kit.ledger_entries("email")]
        assert sent == [("e1", "ops"), ("e1-dev", "dev")]
    finally:
        rt.close()
