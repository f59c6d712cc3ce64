"""G6 with keys per person, on both backends: a revoked key is refused (also for a decision
already recorded) and the run waits for another approver; N-of-M waits for N distinct named
approvers; a delegate signs only for the people the keyring lists; --auto-approve is a policy
decision honoured only by a process with the flag and labelled so; the local HMAC mode is
explicit, labelled "not attributable" and needs 32 bytes; a keyring in TORPOR_HOME is refused
or ignored; a missing key names the command to run; the signed bytes are the documented ones.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import runtime_kit as kit
import torpor
from torpor import keys, signing
from torpor.cli import main as cli_main
from torpor.errors import (
    ConfigError,
    DecisionRefusedError,
    InboxError,
    KeyringError,
    TransitionError,
)
from torpor.history import (
    ApprovalDecided,
    ApprovalRefused,
    ApprovalRequested,
    Event,
    Payload,
    RunStarted,
    apply,
    fold,
    type_of,
)
from torpor.store import SQLStore


def push(sha: str, idempotency_key: str) -> dict[str, Any]:
    kit.ledger("effect", key=idempotency_key, sha=sha)
    return {"pushed": sha}


@torpor.workflow(name="g6keys.ship", version="1")
def ship(run: torpor.Run, cfg: dict[str, Any]) -> Any:
    ref = run.artifact("patch", cfg["content"])
    appr = run.approval(
        "ship", [ref], approvers=cfg.get("approvers", ()), required=cfg.get("required", 1)
    )
    if cfg.get("pause"):
        run.wait_for("go")
    return run.effect("push", push, ref.sha256, approval=appr, artifacts=[ref])


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kit.use_ledger(tmp_path / "ledger.jsonl")
    monkeypatch.setenv("COLUMNS", "400")  # the CLI's lines unwrapped, whatever the terminal


@pytest.fixture
def rt(store_url: str) -> Any:
    with torpor.Runtime(store_url) as runtime:
        yield runtime


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the ``torpor`` command in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    try:
        cli_main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def only_approval(client: torpor.Client, rid: str) -> Any:
    [info] = client.state(rid).approvals.values()
    return info


def write_into_history(store: SQLStore, run_id: str, payload: Payload) -> None:
    """What a writer of the database can do: take the lease and append any event the fold
    accepts (the fold checks transitions, not signatures)."""
    lease = store.acquire_lease(run_id, "mallory", 30)
    state = store.load(run_id)
    ev = Event(
        run_id=run_id,
        seq=state.seq + 1,
        type=type_of(payload),
        payload=payload,
        at_ms=store.now_ms(),
        epoch=lease.epoch,
    )
    apply(state, ev)
    store.append(lease, [ev], state)
    store.release_lease(lease)


def test_a_revoked_key_is_refused_and_the_run_waits_for_another_approver(
    rt: torpor.Runtime, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client = torpor.Client(rt.store)
    rt.run(ship, {"content": "patch v1\n", "pause": True}, run_id="rvk")
    client.decide("rvk", None, "approve", "alice")
    assert rt.resume("rvk").wait_kind == "signal"  # approved; the effect waits for "go"
    code, out, err = cli(capsys, "keys", "remove", "alice")
    assert code == 0 and "removed alice's key SHA256:" in out, err

    client.signal("rvk", "go")
    res = rt.resume("rvk")  # checked again before the effect: refused, withdrawn, waiting
    assert (res.status, res.wait_kind) == ("waiting", "approval"), res
    assert kit.ledger_entries("effect") == []
    [refused] = [e.payload for e in client.events("rvk") if e.type == "approval_refused"]
    assert isinstance(refused, ApprovalRefused) and refused.withdrawn
    assert refused.approver == "alice" and "has no key in the keyring" in refused.reason
    assert only_approval(client, "rvk").status == "requested"
    with pytest.raises(DecisionRefusedError, match="'alice' has no key in the keyring"):
        client.decide("rvk", None, "approve", "alice")  # refused before it is sent
    assert [m.kind for m in client.inbox("rvk")] == ["refused"]  # no decision: its refusal

    client.decide("rvk", None, "approve", "bob")
    res = rt.resume("rvk")
    assert res.outcome == "succeeded", res
    assert only_approval(client, "rvk").approver == "bob"
    assert len(kit.ledger_entries("effect")) == 1


def test_a_refused_decision_is_refused_by_the_folds_own_rule(rt: torpor.Runtime) -> None:
    """Client.decide does not keep its own copy of the approval rules (G4): what it refuses —
    someone not named, someone deciding twice, a decision on an approval already decided — it
    refuses with the words of the fold's rule for that decision folded onto the run's state."""
    client = torpor.Client(rt.store)
    cfg = {"content": "patch v1\n", "approvers": ["alice", "bob", "carol"], "required": 2}
    assert rt.run(ship, cfg, run_id="rules").wait_kind == "approval"

    def fold_says(approver: str) -> str:
        st = client.state("rules")
        [(aid, info)] = st.approvals.items()
        p = ApprovalDecided(
            approval_id=aid, decision="approve", approver=approver, hashes=info.hashes,
            signature="", scheme="ed25519",
        )  # fmt: skip
        ev = Event(run_id="rules", seq=st.seq + 1, type="approval_decided", payload=p,
                   at_ms=0, epoch=st.epoch)  # fmt: skip
        with pytest.raises(TransitionError) as refused:
            fold([ev], st)
        return refused.value.rule

    def client_says(approver: str) -> str:
        with pytest.raises(InboxError) as refused:
            client.decide("rules", None, "approve", approver)
        return str(refused.value)

    assert client_says("mallory") == fold_says("mallory")
    assert "decided by alice, bob, carol, not 'mallory'" in client_says("mallory")
    client.decide("rules", None, "approve", "alice")
    assert rt.resume("rules").status == "waiting"
    [aid] = client.state("rules").approvals
    assert (
        client_says("alice") == fold_says("alice") == f"'alice' already decided on approval {aid!r}"
    )


def test_n_of_m_waits_for_n_distinct_named_approvers(rt: torpor.Runtime, tmp_path: Path) -> None:
    client = torpor.Client(rt.store)
    cfg = {"content": "patch v1\n", "approvers": ["alice", "bob", "carol"], "required": 2}
    assert rt.run(ship, cfg, run_id="nm").wait_kind == "approval"
    client.decide("nm", None, "approve", "alice")
    [delivered] = client.inbox("nm")
    res = rt.resume("nm")
    assert (res.status, res.wait_kind) == ("waiting", "approval"), res
    assert "1 more of alice, bob, carol" in res.reason
    with pytest.raises(InboxError, match="already decided"):
        client.decide("nm", None, "approve", "alice")
    # The same signed decision delivered again (a writer of the database replays it): it does
    # not count twice.
    rt.store.post_inbox("nm", "decision", delivered.body, message_id="replayed-alice")
    assert rt.resume("nm").status == "waiting"
    early, dup = [e.payload for e in client.events("nm") if e.type == "approval_refused"]
    assert isinstance(early, ApprovalRefused) and "refused before it was sent" in early.reason
    assert isinstance(dup, ApprovalRefused) and "'alice' already decided" in dup.reason
    assert "before it was sent" not in dup.reason
    # Someone with a valid key who is not named cannot be one of the N.
    _, public = keys.generate(Path(os.environ["TORPOR_CONFIG_DIR"]), "erin")
    ring = keys.Keyring.load(Path(os.environ["TORPOR_KEYRING"]))
    ring.add(keys.KeyEntry("erin", keys.parse_public(public)[0]))
    ring.save()
    with pytest.raises(InboxError, match="decided by alice, bob, carol, not 'erin'"):
        client.decide("nm", None, "approve", "erin")
    assert kit.ledger_entries("effect") == []

    client.decide("nm", None, "approve", "bob")
    res = rt.resume("nm")
    assert res.outcome == "succeeded", res
    info = only_approval(client, "nm")
    assert info.approver == "alice, bob" and [d.approver for d in info.decisions] == [
        "alice",
        "bob",
    ]
    assert len(kit.ledger_entries("effect")) == 1

    # Any named approver denying denies.
    rt.run(ship, {**cfg, "content": "patch v2\n"}, run_id="nm-deny")
    client.decide("nm-deny", None, "approve", "alice")
    client.decide("nm-deny", None, "deny", "carol", comment="not this one")
    res = rt.resume("nm-deny")
    assert res.outcome == "blocked" and "denied by carol" in res.reason, res


def test_a_delegate_signs_only_for_the_people_it_lists(
    rt: torpor.Runtime, capsys: pytest.CaptureFixture[str], store_url: str
) -> None:
    client = torpor.Client(rt.store)
    code, out, err = cli(
        capsys, "keys", "init", "--as", "console@ops", "--delegate-for", "alice", "--json"
    )
    assert code == 0, err
    rt.run(ship, {"content": "patch v1\n"}, run_id="dlg")
    with pytest.raises(DecisionRefusedError, match="may not sign for 'bob'"):
        client.decide("dlg", None, "approve", "bob", delegate="console@ops")
    with pytest.raises(DecisionRefusedError, match="is a delegate key"):
        client.decide("dlg", None, "approve", "console@ops")
    client.decide("dlg", None, "approve", "alice", delegate="console@ops")
    assert rt.resume("dlg").outcome == "succeeded"
    [d] = only_approval(client, "dlg").decisions
    assert (d.approver, d.delegate, d.key) == (
        "alice",
        "console@ops",
        json.loads(out)["fingerprint"],
    )
    code, shown, err = cli(capsys, "--db", store_url, "show", "dlg")
    assert "approved by alice via delegate console@ops" in shown, shown + err


def test_auto_approve_is_a_policy_decision_only_a_flagged_process_honours(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with torpor.Runtime(store_url, auto_approve="bot") as flagged:
        assert flagged.run(ship, {"content": "patch v1\n"}, run_id="auto").outcome == "succeeded"
        [d] = only_approval(torpor.Client(flagged.store), "auto").decisions
    assert (d.scheme, d.approver, d.signature) == ("policy", "bot", "")
    assert d.comment.startswith("approved by the start flag (--auto-approve) of run auto, given by")
    _, shown, _ = cli(capsys, "--db", store_url, "show", "auto")
    assert "approved by policy (bot)" in shown and "not a signature" in shown, shown

    # A writer of the database records a policy decision for a run no flag approved.
    with torpor.Runtime(store_url) as rt:
        client = torpor.Client(rt.store)
        rt.run(ship, {"content": "patch v2\n"}, run_id="forged-policy")
        [(aid, hashes)] = client.pending_approvals("forged-policy").items()
        policy = ApprovalDecided(
            approval_id=aid,
            decision="approve",
            approver="auto-approve",
            hashes=hashes,
            signature="",
            scheme="policy",
            given_by="mallory@evil",
        )
        write_into_history(rt.store, "forged-policy", policy)
        res = rt.resume("forged-policy")
        assert (res.status, res.wait_kind) == ("waiting", "approval"), res
        [refused] = [
            e.payload for e in client.events("forged-policy") if e.type == "approval_refused"
        ]
        assert isinstance(refused, ApprovalRefused) and refused.withdrawn
        assert "holds only in a process started with that flag" in refused.reason
        assert kit.ledger_entries("effect", key="forged-policy/push") == []


def test_hmac_local_mode_is_explicit_not_attributable_and_needs_32_bytes(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TORPOR_APPROVALS", "hmac")
    with pytest.raises(ConfigError, match="TORPOR_APPROVALS='hmac': expected one of"):
        torpor.Runtime(db_url)
    monkeypatch.setenv("TORPOR_APPROVALS", "hmac-local")
    with pytest.raises(ConfigError, match="at least 32 bytes; the one in TORPOR_SIGNING_KEY has"):
        torpor.Runtime(db_url)  # the fixture's key is 16 bytes
    monkeypatch.setenv("TORPOR_SIGNING_KEY", "k" * 32)
    with torpor.Runtime(db_url) as rt:
        client = torpor.Client(rt.store)
        rt.run(ship, {"content": "patch v1\n"}, run_id="local")
        client.decide("local", None, "approve", "alice")
        assert rt.resume("local").outcome == "succeeded"
        assert only_approval(client, "local").decisions[0].scheme == "hmac"
    _, shown, _ = cli(capsys, "show", "local")
    assert "approved by alice" in shown and "not attributable" in shown, shown


def test_a_keyring_in_torpor_home_is_refused_or_ignored(
    torpor_home: Path,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    torpor_home.mkdir(parents=True, exist_ok=True)
    mallory = Ed25519PrivateKey.generate()
    blob = base64.b64decode(_openssh_public(mallory).split()[1])
    planted = f"alice {signing.public_line(blob)}\n"
    (torpor_home / "keyring").write_text(planted)

    # A setting that points into TORPOR_HOME is refused, loudly.
    monkeypatch.setenv("TORPOR_KEYRING", str(torpor_home / "keyring"))
    with pytest.raises(KeyringError, match="is inside TORPOR_HOME"):
        torpor.Runtime(db_url)
    code, _, err = cli(capsys, "keys", "list")
    assert code == 1 and err.startswith("error: the keyring") and "inside TORPOR_HOME" in err
    monkeypatch.setenv("TORPOR_KEYRING", str(torpor_home / "sub" / ".." / "keyring"))
    with pytest.raises(KeyringError, match="is inside TORPOR_HOME"):
        torpor.Runtime(db_url)
    monkeypatch.delenv("TORPOR_KEYRING")
    monkeypatch.setenv("TORPOR_CONFIG_DIR", str(torpor_home / "config"))
    code, _, err = cli(capsys, "keys", "init", "--as", "mallory")
    assert code == 1 and "the key folder" in err and "inside TORPOR_HOME" in err, err
    assert not (torpor_home / "config").exists()

    # With no setting at all, the keyring file in TORPOR_HOME is simply not the keyring.
    monkeypatch.setenv("TORPOR_CONFIG_DIR", str(torpor_home.parent / "fresh-config"))
    with torpor.Runtime(db_url) as rt:
        assert not rt.trust.path.is_relative_to(torpor_home.resolve())
        assert rt.trust.keyring().entries == []


def _openssh_public(key: Ed25519PrivateKey) -> str:
    from cryptography.hazmat.primitives import serialization

    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )


def test_a_missing_key_names_the_command_to_run(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with torpor.Runtime(db_url) as rt:
        rt.run(ship, {"content": "patch v1\n"}, run_id="nokey")
        code, _, err = cli(capsys, "approve", "nokey", "--as", "zoe")
        assert code == 1 and err.count("\n") == 1, err
        assert "no private key for 'zoe'" in err and "torpor keys init --as zoe" in err
        code, out, err = cli(capsys, "keys", "init", "--as", "zoe")
        assert code == 0 and out.splitlines()[1].startswith("ssh-ed25519 AAAA"), err
        key = Path(os.environ["TORPOR_CONFIG_DIR"]) / "keys" / "zoe"
        assert key.stat().st_mode & 0o777 == 0o600
        code, _, err = cli(capsys, "keys", "init", "--as", "zoe")
        assert code == 1 and "exists already" in err
        code, out, err = cli(capsys, "approve", "nokey", "--as", "zoe")
        assert code == 0, err
        assert rt.resume("nokey").outcome == "succeeded"
        code, out, _ = cli(capsys, "keys", "list", "--json")
        assert [k["name"] for k in json.loads(out)["keys"]] == ["alice", "bob", "carol", "zoe"]
        code, _, err = cli(capsys, "keys", "add", "rsa-user", "ssh-rsa AAAAB3NzaC1yc2E= x")
        assert code == 1 and "key type 'ssh-rsa' is not accepted" in err


def test_the_signed_bytes_are_the_documented_ones() -> None:
    """The canonical bytes, byte for byte, and an Ed25519 signature over them that any
    RFC 8032 implementation checks; changing any signed field breaks it."""
    data = signing.decision_bytes(
        "r1", "ship@abc", "approve", "alice", ["bb", "aa"], 1700000000000, key="SHA256:x"
    )
    assert data == (
        b"torpor-approval-decision-v1\n"
        b'{"approval_id":"ship@abc","approver":"alice","comment":"","decided_at_ms":1700000000000,'
        b'"decision":"approve","delegate":"","hashes":["aa","bb"],"key":"SHA256:x","run_id":"r1"}'
    )
    key = Ed25519PrivateKey.generate()
    blob = base64.b64decode(_openssh_public(key).split()[1])
    sig = signing.encode_signature(key.sign(data))
    assert signing.ed25519_verify(blob, data, sig)
    key.public_key().verify(base64.b64decode(sig), data)  # the library's own check agrees
    for field, value in [
        ("run_id", "r2"),
        ("approval_id", "ship@abd"),
        ("decision", "deny"),
        ("approver", "mallory"),
        ("hashes", ["aa"]),
        ("decided_at_ms", 1700000000001),
    ]:
        args: dict[str, Any] = {
            "run_id": "r1",
            "approval_id": "ship@abc",
            "decision": "approve",
            "approver": "alice",
            "hashes": ["aa", "bb"],
            "decided_at_ms": 1700000000000,
        }
        args[field] = value
        assert not signing.ed25519_verify(
            blob, signing.decision_bytes(**args, key="SHA256:x"), sig
        ), field
    assert not signing.ed25519_verify(blob, data, "not base64!")
    assert signing.fingerprint(blob).startswith("SHA256:") and "=" not in signing.fingerprint(blob)


def test_the_fold_counts_each_named_approver_once() -> None:
    h = "a" * 64

    def decided(approver: str, decision: str = "approve") -> ApprovalDecided:
        return ApprovalDecided(
            approval_id="ap", decision=decision, approver=approver, hashes=[h], signature="s"
        )

    def history(*payloads: Payload) -> Any:
        ps = [RunStarted(workflow="w", version="1"), *payloads]
        return fold(
            [
                Event(run_id="r", seq=i, type=type_of(p), payload=p, at_ms=0, epoch=0)
                for i, p in enumerate(ps, 1)
            ]
        )

    ask = ApprovalRequested(
        approval_id="ap", name="ship", hashes=[h], approvers=["alice", "bob"], required=2
    )
    assert history(ask, decided("alice")).approvals["ap"].status == "requested"
    assert history(ask, decided("alice"), decided("bob")).approvals["ap"].status == "approved"
    with pytest.raises(TransitionError, match="already decided"):
        history(ask, decided("alice"), decided("alice"))
    with pytest.raises(TransitionError, match="not one of the approvers"):
        history(ask, decided("mallory"))
    with pytest.raises(TransitionError, match="requires 3 of 2"):
        history(ask.model_copy(update={"required": 3}))
    withdrawn = ApprovalRefused(approval_id="ap", approver="bob", reason="r", withdrawn=True)
    st = history(ask, decided("alice"), decided("bob"), withdrawn).approvals["ap"]
    assert (st.status, st.approver, st.refused) == ("requested", None, 1)
    with pytest.raises(TransitionError, match="no decision by 'bob'"):
        history(ask, decided("alice"), withdrawn)
