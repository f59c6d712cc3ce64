"""G6: an approval authorizes exactly the content approved, can be revoked until consumed, and
is signed and attributable. Every refusal leaves the outside world (the ledger) untouched and
the run ``blocked`` with the reason."""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import runtime_kit as kit
import torpor
import torpor.keys
from runtime_kit import Lab


def push(sha: str, idempotency_key: str) -> dict[str, Any]:
    kit.ledger("effect", key=idempotency_key, sha=sha)
    return {"pushed": sha}


def find_push(call: torpor.EffectCall) -> torpor.Applied | torpor.Absent:
    hits = kit.ledger_entries("effect", key=call.idempotency_key)
    return torpor.Applied({"pushed": hits[-1]["sha"]}) if hits else torpor.Absent()


@torpor.workflow(name="g6.ship", version="1")
def ship(run: torpor.Run, cfg: dict[str, Any]) -> Any:
    content = cfg["content"]
    if cfg.get("source"):
        content = run.step("read source", lambda: Path(cfg["source"]).read_text())
    ref = run.artifact("patch", content)
    appr = run.approval("ship", [ref], summary="push the patch")
    if cfg.get("pause"):
        run.wait_for("go")
    if cfg.get("change"):
        ref = run.artifact("patch", content + "\n# one more line after approval\n")
    return run.effect("push", push, ref.sha256, approval=appr, artifacts=[ref], reconcile=find_push)


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path) -> None:
    kit.use_ledger(tmp_path / "ledger.jsonl")


def decide(client: torpor.Client, rid: str, decision: str = "approve") -> tuple[str, list[str]]:
    return client.decide(rid, None, decision, "alice", comment="looked at it")


def test_approved_content_is_pushed_once(runtime: torpor.Runtime, client: torpor.Client) -> None:
    res = runtime.run(ship, {"content": "patch v1\n"}, run_id="ok")
    assert res.status == "waiting" and res.wait_kind == "approval"
    (aid, hashes) = next(iter(client.pending_approvals("ok").items()))
    assert hashes == [torpor.ArtifactStore(runtime.settings.artifacts_url).put(b"patch v1\n")]
    got_id, got_hashes = decide(client, "ok")
    assert (got_id, got_hashes) == (aid, hashes)
    res = runtime.resume("ok")
    assert res.outcome == "succeeded", res
    assert [e["sha"] for e in kit.ledger_entries("effect")] == hashes
    consumed = [e.payload for e in client.events("ok") if e.type == "approval_consumed"]
    assert len(consumed) == 1 and consumed[0].hashes == hashes  # type: ignore[attr-defined]
    intent = next(e.payload for e in client.events("ok") if e.type == "effect_intended")
    assert intent.approval_id == aid  # type: ignore[attr-defined]


def test_content_changed_after_approval_requests_a_new_approval(
    runtime: torpor.Runtime, client: torpor.Client
) -> None:
    """Field card C24 (issue 36): the approval of the old content does not authorize the new
    one, and the run is not left at a dead end (before: blocked "a new approval is needed",
    with no request anyone could decide): the approval of the new content is requested, the
    run waits for it saying why, and once it is decided the new content is pushed, once."""
    runtime.run(ship, {"content": "patch v1\n", "change": True}, run_id="chg")
    old_id, old_hashes = decide(client, "chg")
    res = runtime.resume("chg")
    assert res.status == "waiting" and res.wait_kind == "approval", res
    assert "content changed after approval" in res.reason and "new approval" in res.reason
    assert kit.ledger_entries("effect") == []
    types = [e.type for e in client.events("chg")]
    assert "effect_intended" not in types and "approval_consumed" not in types
    state = client.state("chg")
    assert state.artifacts["patch"].version == 2
    pending = client.pending_approvals("chg")
    assert list(pending.values()) == [[state.artifacts["patch"].sha256]]
    new_id, new_hashes = decide(client, "chg")
    assert new_id != old_id and new_hashes != old_hashes
    res = runtime.resume("chg")
    assert res.outcome == "succeeded", res
    assert [e["sha"] for e in kit.ledger_entries("effect")] == new_hashes
    consumed = [e.payload for e in client.events("chg") if e.type == "approval_consumed"]
    assert [c.approval_id for c in consumed] == [new_id]  # type: ignore[attr-defined]


def test_content_changed_on_resume_needs_a_new_approval(
    runtime: torpor.Runtime, client: torpor.Client, tmp_path: Path
) -> None:
    """The approved content is recomputed from a source that changed meanwhile: the approval
    of the old content does not carry over; a new one (for the new hash) is requested."""
    src = tmp_path / "patch.diff"
    src.write_text("patch v1\n")
    cfg = {"content": "", "source": str(src)}
    runtime.run(ship, cfg, run_id="src")
    old_id, old_hashes = decide(client, "src")
    # The step that reads the source is a read step: recorded, so the change is not seen...
    src.write_text("patch v2\n")
    assert runtime.resume("src").outcome == "succeeded"
    assert [e["sha"] for e in kit.ledger_entries("effect")] == old_hashes

    # ...but a run whose source changes *before* it is read approves the new content only.
    src.write_text("patch v3\n")
    runtime.run(ship, cfg, run_id="src2")
    (new_id, new_hashes) = next(iter(client.pending_approvals("src2").items()))
    assert new_hashes != old_hashes and new_id != old_id


def test_revoke_before_consumption_stops_the_effect(
    runtime: torpor.Runtime, client: torpor.Client
) -> None:
    runtime.run(ship, {"content": "patch v1\n", "pause": True}, run_id="rev")
    aid, _ = decide(client, "rev")
    res = runtime.resume("rev")
    assert res.status == "waiting" and res.wait_kind == "signal"  # approved, waiting for "go"
    assert client.state("rev").approvals[aid].status == "approved"
    client.revoke("rev", aid, "carol", reason="found a bug in the patch")
    client.signal("rev", "go")
    res = runtime.resume("rev")
    assert res.outcome == "blocked", res
    assert "revoked" in res.reason
    assert kit.ledger_entries("effect") == []
    assert "effect_intended" not in [e.type for e in client.events("rev")]


def test_revoke_racing_the_consumption_wins(
    runtime: torpor.Runtime, client: torpor.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A revocation that lands between the approval check and the consuming append: the
    append is refused (guarded against pending inbox messages), the revocation applied, and
    the effect does not happen."""
    runtime.run(ship, {"content": "patch v1\n", "pause": True}, run_id="race")
    aid, _ = decide(client, "race")
    runtime.resume("race")
    client.signal("race", "go")

    store = runtime.store
    real_append = store.append

    def append_with_a_revocation_landing_first(*a: Any, **kw: Any) -> None:
        if kw.get("if_inbox_empty") and client.state("race").approvals[aid].status == "approved":
            client.revoke("race", aid, "carol", reason="stop")
        real_append(*a, **kw)

    monkeypatch.setattr(store, "append", append_with_a_revocation_landing_first)
    res = runtime.resume("race")
    assert res.outcome == "blocked", res
    assert "revoked" in res.reason
    assert kit.ledger_entries("effect") == []


def test_deny_blocks(runtime: torpor.Runtime, client: torpor.Client) -> None:
    runtime.run(ship, {"content": "patch v1\n"}, run_id="deny")
    decide(client, "deny", "deny")
    res = runtime.resume("deny")
    assert res.outcome == "blocked", res
    assert "denied by alice" in res.reason and "looked at it" in res.reason
    assert kit.ledger_entries("effect") == []


def test_tampered_signature_in_the_database_is_refused(
    runtime: torpor.Runtime, client: torpor.Client, db_url: str
) -> None:
    """A decision changed in the database is refused when the effect is about to rely on it:
    recorded as refused and withdrawn, nothing pushed, and the run waits for a valid decision
    (G6: a writer of the database can delay a run, never approve for it)."""
    runtime.run(ship, {"content": "patch v1\n", "pause": True}, run_id="tam")
    aid, _ = decide(client, "tam")
    runtime.resume("tam")  # the decision is now in the history; the run waits for "go"

    # Someone with write access to the database changes who approved (keeping the signature):
    # in the event and in the engine checkpoint both, so the forgery is self-consistent.
    path = db_url.removeprefix("sqlite:///")
    con = sqlite3.connect(path)
    with con:
        n = con.execute(
            'UPDATE events SET payload = replace(payload, \'"approver":"alice"\', '
            "'\"approver\":\"mallory\"') WHERE run_id = 'tam' AND type = 'approval_decided'"
        ).rowcount
        assert n == 1
        con.execute(
            'UPDATE runs SET checkpoint = replace(checkpoint, \'"approver":"alice"\', '
            "'\"approver\":\"mallory\"') WHERE run_id = 'tam'"
        )
    con.close()
    assert client.state("tam").approvals[aid].approver == "mallory"
    client.signal("tam", "go")
    res = runtime.resume("tam")
    assert (res.status, res.wait_kind) == ("waiting", "approval"), res
    assert "'mallory' has no key in the keyring" in res.reason
    assert kit.ledger_entries("effect") == []
    refused = [e.payload for e in client.events("tam") if e.type == "approval_refused"]
    assert [(r.approver, r.withdrawn) for r in refused] == [("mallory", True)]  # type: ignore[attr-defined]
    info = client.state("tam").approvals[aid]
    assert (info.status, info.approver) == ("requested", None)  # never "approved by mallory"

    decide(client, "tam")  # a valid decision: the run goes on and pushes once
    res = runtime.resume("tam")
    assert res.outcome == "succeeded", res
    assert len(kit.ledger_entries("effect")) == 1


def test_decision_signed_with_another_key_is_refused(
    runtime: torpor.Runtime,
    client: torpor.Client,
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A decision signed "as alice" with a key that is not alice's in the keyring (made in
    another key folder, trusted by another keyring) is refused where it is delivered; the run
    keeps waiting and a valid decision then goes through."""
    runtime.run(ship, {"content": "patch v1\n"}, run_id="forge")
    forger_dir = tmp_path / "forger-config"
    _, public = torpor.keys.generate(forger_dir, "alice")
    with pytest.raises(torpor.errors.DecisionRefusedError, match="is not in the keyring"):
        # Checked against this machine's keyring before anything is sent.
        client.decide("forge", None, "approve", "alice", key=forger_dir / "keys" / "alice")
    assert [m.kind for m in client.inbox("forge")] == ["refused"]  # its refusal, no decision
    (forger_dir / "keyring").write_text(f"alice {public}\n")
    with monkeypatch.context() as env:
        env.setenv("TORPOR_CONFIG_DIR", str(forger_dir))
        env.setenv("TORPOR_KEYRING", str(forger_dir / "keyring"))
        forger = torpor.Client(db_url)
        forger.decide("forge", None, "approve", "alice")  # its own keyring trusts it
        forger.close()
    res = runtime.resume("forge")
    assert (res.status, res.wait_kind) == ("waiting", "approval"), res
    assert "'alice''s key SHA256:" in res.reason and "is not in the keyring" in res.reason
    assert kit.ledger_entries("effect") == []
    early, refused = [
        e.payload for e in client.events("forge") if e.type == "approval_refused"
    ]  # the one the client refused before sending (recorded), then the forged one
    assert "refused before it was sent" in early.reason
    assert refused.approver == "alice" and not refused.withdrawn  # type: ignore[attr-defined]
    assert client.state("forge").approvals[next(iter(client.state("forge").approvals))].status == (
        "requested"
    )
    decide(client, "forge")
    assert runtime.resume("forge").outcome == "succeeded"
    assert len(kit.ledger_entries("effect")) == 1


SHIP_MODULE = """
def push(sha, idempotency_key):
    ledger("effect", key=idempotency_key, sha=sha)
    return {"pushed": sha}


def find_push(call):
    hits = ledger_entries("effect", key=call.idempotency_key)
    return torpor.Applied({"pushed": hits[-1]["sha"]}) if hits else torpor.Absent()


@torpor.workflow(name="g6.ship", version="1")
def ship(run, content):
    ref = run.artifact("patch", content)
    appr = run.approval("ship", [ref])
    return run.effect("push", push, ref.sha256, approval=appr, artifacts=[ref], reconcile=find_push)
"""


@pytest.mark.proc
@pytest.mark.parametrize("point", ["effect.intended", "effect.called"])
def test_killed_while_consuming_an_approval(tmp_path: Path, db_url: str, point: str) -> None:
    """The approval was consumed with the intent; the process dies before/after the call. On
    resume the effect is reconciled under that same consumption and happens exactly once."""
    lab = Lab(tmp_path / "sub", db_url, tmp_path / "sub-ledger.jsonl")
    lab.tmp.mkdir()
    lab.module("g6wf", SHIP_MODULE)
    p = lab.drive("g6wf", "k", workflow="g6.ship", input="patch v1\n")
    assert p.result is not None and p.result["status"] == "waiting", p.describe()
    c = lab.client()
    c.decide("k", None, "approve", "alice")
    c.close()
    p = lab.drive("g6wf", "k", resume=True, crash_at=point)
    assert p.killed, p.describe()
    done = lab.resume_until_finished("g6wf", "k")
    assert done.result is not None
    assert done.result["outcome"] == "succeeded", done.result
    assert len(lab.ledger("effect")) == 1
    assert [e.type for e in lab.events("k")].count("approval_consumed") == 1


@torpor.workflow(name="g6.hurry", version="1")
def hurry(run: torpor.Run, _: Any) -> Any:
    ref = run.artifact("patch", "patch v1\n")
    appr = run.approval("ship", [ref], timeout=timedelta(seconds=0.2))
    return run.effect("push", push, ref.sha256, approval=appr, artifacts=[ref])


def test_approval_deadline_passes_without_a_decision(
    runtime: torpor.Runtime, client: torpor.Client
) -> None:
    res = runtime.run(hurry, None, run_id="late")
    assert res.status == "waiting" and res.wait_kind == "approval" and res.wake_at_ms
    time.sleep(max(0.0, res.wake_at_ms / 1000 - time.time()) + 0.05)
    res = runtime.resume("late")
    assert res.outcome == "blocked", res
    assert "timed out" in res.reason
    assert kit.ledger_entries("effect") == []
    with pytest.raises(torpor.TorporError):  # too late to approve now
        client.decide("late", None, "approve", "alice")


APPROVED_FLOW = (
    SHIP_MODULE
    + """

@torpor.workflow(name="g6.flow", version="1", criteria=["pushed"])
def flow(run, content):
    ref = run.artifact("patch", content)
    appr = run.approval("ship", [ref])
    out = run.effect("push", push, ref.sha256, approval=appr, artifacts=[ref], reconcile=find_push)
    after = run.step("after", lambda: ledger("step", name="after") or "ok")
    run.verify("pushed", out == {"pushed": ref.sha256})
    return [out, after]
"""
)


@pytest.mark.slow
def test_approved_push_killed_at_every_boundary(tmp_path: Path, db_url: str) -> None:
    """Auto-approved (signed, attributed to 'bot') and killed at every boundary in turn: each
    run pushes exactly once, consumes its approval once, and succeeds."""
    lab = Lab(tmp_path / "farm", db_url, tmp_path / "farm-ledger.jsonl")
    lab.tmp.mkdir()
    mod = lab.module("g6flow", APPROVED_FLOW)
    rt = {"auto_approve": "bot"}
    trace = lab.tmp / "trace"
    base = lab.drive(mod, "base", workflow="g6.flow", input="p\n", runtime=rt, trace=trace)
    assert base.result is not None and base.result["outcome"] == "succeeded", base.describe()
    seen = Counter(trace.read_text().split())
    cases = [f"{p}@{n}" for p, count in sorted(seen.items()) for n in range(1, count + 1)]
    run_ids = [f"f{i:02d}" for i in range(len(cases))]
    lab.crash_farm(mod, "g6.flow", "p\n", list(zip(run_ids, cases, strict=True)), runtime=rt)
    results = lab.resume_all(mod, run_ids, runtime=rt)
    for point, rid in zip(cases, run_ids, strict=True):
        assert results[rid]["outcome"] == "succeeded", (point, results[rid])
        assert results[rid]["result"] == base.result["result"], point
        assert len(lab.ledger("effect", key=f"{rid}/push")) == 1, point
        types = [e.type for e in lab.events(rid)]
        assert types.count("approval_consumed") == 1, point
        decided = [e.payload for e in lab.events(rid) if e.type == "approval_decided"]
        assert [d.approver for d in decided] == ["bot"], point  # type: ignore[attr-defined]


def test_a_request_another_person_already_decided_says_so(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """bob approves after alice's approval was sent but before the run applied it: he is told
    who decided (the CLI exits 1 and names alice), nothing of his is sent, and the run applies
    alice's decision alone; one person deciding twice is told so too."""
    from torpor.cli import main as cli_main

    with torpor.Runtime(store_url) as rt:
        assert rt.run(ship, {"content": "patch v1\n"}, run_id="two").wait_kind == "approval"
        client = torpor.Client(rt.store)
        client.decide("two", None, "approve", "alice")

        def cli(*args: str) -> tuple[int, str]:
            capsys.readouterr()
            try:
                cli_main(["--db", store_url, *args])
                code = 0
            except SystemExit as exc:
                code = int(exc.code or 0)
            out = capsys.readouterr()
            return code, out.out + out.err

        code, text = cli("approve", "two", "--as", "bob")
        assert code == 1 and "already decided by 'alice'" in text, text
        assert "approved" not in text.replace("already decided", "")
        code, text = cli("approve", "two", "--as", "alice")
        assert code == 1 and "'alice' already decided" in text, text
        sent = [m for m in client.inbox("two") if m.kind == "decision"]
        assert len(sent) == 1  # only alice's (and the two refusals, recorded: issue 34)
        assert rt.resume("two").outcome == "succeeded"
        [info] = client.state("two").approvals.values()
        assert info.approver == "alice" and info.refused == 2  # bob's and alice's, recorded
        assert all("refused before it was sent" in r for r in info.refusals)
