"""G6 under attack, with real processes, on both backends: a process that can write the
database and ``TORPOR_HOME`` — but holds no approver's private key and cannot write the
keyring — tries to approve a run. It forges a decision, replays an old one, signs with the
shared key in ``TORPOR_HOME`` and with a key it planted there (trusting itself in a keyring
file it writes into ``TORPOR_HOME``), delivers a policy decision, and writes decisions straight
into the history under a lease it takes. No effect happens, every attempt is recorded as
refused, nothing is shown as "approved by", and the run keeps waiting for a valid decision,
which then goes through. An approver on another machine (their own key folder and
``TORPOR_HOME``) approves once the operator trusts their key; a key trusted through ssh-agent
signs too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import runtime_kit as kit
import torpor
from conftest import HANG_S, ROOT
from torpor.cli import main as cli_main

pytestmark = pytest.mark.slow


def push(sha: str, idempotency_key: str) -> dict[str, Any]:
    kit.ledger("effect", key=idempotency_key, sha=sha)
    return {"pushed": sha}


def find_push(call: torpor.EffectCall) -> torpor.Applied | torpor.Absent:
    hits = kit.ledger_entries("effect", key=call.idempotency_key)
    return torpor.Applied({"pushed": hits[-1]["sha"]}) if hits else torpor.Absent()


@torpor.workflow(name="g6k.ship", version="1")
def ship(run: torpor.Run, content: str) -> Any:
    ref = run.artifact("patch", content)
    appr = run.approval("ship", [ref], summary="push the patch")
    return run.effect("push", push, ref.sha256, approval=appr, artifacts=[ref], reconcile=find_push)


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kit.use_ledger(tmp_path / "ledger.jsonl")
    monkeypatch.setenv("COLUMNS", "400")  # the CLI's lines unwrapped, whatever the terminal


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORPOR_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


#: The attacker: full write access to the database and to TORPOR_HOME, no approver's private
#: key, no write access to the keyring. argv: store URL, TORPOR_HOME, victim run, old run.
ATTACKER = r"""
import base64, json, os, sys
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import torpor
from torpor.history import ApprovalDecided, Event, apply, type_of
from torpor.store import open_store

url, home, victim, old = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
store = open_store(url)
attempts = []

state = store.load(victim)
[(aid, info)] = [(k, v) for k, v in state.approvals.items() if v.status == "requested"]
hashes = sorted(info.hashes)
[old_decision] = [
    e.payload.model_dump() for e in store.read_events(old, 0, 10_000)
    if e.type == "approval_decided"
]
now = store.now_ms()

def deliver(label, body):
    store.post_inbox(victim, "decision", body, message_id=f"mallory:{label}")
    attempts.append(label)

def body(**kw):
    b = {"approval_id": aid, "decision": "approve", "approver": "alice", "hashes": hashes,
         "comment": "", "decided_at_ms": now, "signature": ""}
    b.update(kw)
    return b

# 1. A forged signature, naming alice's real key (copied from her old decision).
deliver("forged", body(scheme="ed25519", key=old_decision.get("key", ""),
                       signature=base64.b64encode(os.urandom(64)).decode()))
# 2. Alice's old, valid decision on another run, replayed onto this one.
deliver("replayed", {**old_decision, "approval_id": aid, "hashes": hashes})

# 3. The shared key in TORPOR_HOME (HMAC, the scheme every decision used before keys per person).
shared = (home / "signing.key").read_text().strip().encode()
try:
    from torpor.signing import hmac_bytes, hmac_sign
    hmac_sig = hmac_sign(shared, hmac_bytes(victim, aid, "approve", "alice", hashes, now))
except ImportError:  # torpor before keys per person
    from torpor import signing
    hmac_sig = signing.sign(shared, signing.decision_body(victim, aid, "approve", "alice",
                                                          hashes, now))
deliver("shared-key", body(signature=hmac_sig))

# 4. A key it planted in TORPOR_HOME, trusted by a keyring file and a settings file it writes
#    there too (adding itself to the keyring through TORPOR_HOME).
planted = Ed25519PrivateKey.generate()
pub = planted.public_key().public_bytes(
    serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
(home / "keys").mkdir(exist_ok=True)
(home / "keys" / "alice").write_bytes(planted.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
    serialization.NoEncryption()))
(home / "keyring").write_text(f"alice {pub}\nmallory {pub}\n")
(home / "torpor.env").write_text(f"TORPOR_KEYRING={home / 'keyring'}\n")
try:
    from torpor.signing import decision_bytes, encode_signature, fingerprint
    blob = base64.b64decode(pub.split()[1])
    fp = fingerprint(blob)
    sig = encode_signature(planted.sign(decision_bytes(
        victim, aid, "approve", "alice", hashes, now, key=fp)))
    deliver("planted-key", body(scheme="ed25519", key=fp, signature=sig))
    # 5. A policy decision (what --auto-approve records), delivered as a message.
    deliver("policy", body(scheme="policy", approver="auto-approve", given_by="mallory@evil"))
except ImportError:
    fp = sig = None

# 6. Straight into the history under a lease it takes, bypassing the inbox: a decision signed
#    with the planted key (with the shared key before keys per person).
lease = store.acquire_lease(victim, "mallory", 30)
state = store.load(victim)
p = ApprovalDecided(**(body(signature=hmac_sig) if sig is None else body(
    scheme="ed25519", key=fp, signature=sig)))
ev = Event(run_id=victim, seq=state.seq + 1, type=type_of(p), payload=p, at_ms=now,
           epoch=lease.epoch)
apply(state, ev)
store.append(lease, [ev], state)
store.release_lease(lease)
attempts.append("history")
print(json.dumps(attempts))
"""


def test_a_writer_of_the_database_and_home_cannot_approve(
    store_url: str, torpor_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # The shared key lives in TORPOR_HOME, as in a default deployment.
    monkeypatch.delenv("TORPOR_SIGNING_KEY")
    keyring = Path(os.environ["TORPOR_KEYRING"])
    trusted = keyring.read_bytes()
    with torpor.Runtime(store_url) as rt:
        client = torpor.Client(rt.store)
        rt.run(ship, "patch v0\n", run_id="old")
        client.decide("old", None, "approve", "alice")
        assert rt.resume("old").outcome == "succeeded"
        assert rt.run(ship, "patch v1\n", run_id="victim").wait_kind == "approval"

        cp = subprocess.run(
            [sys.executable, "-c", ATTACKER, store_url, str(torpor_home), "victim", "old"],
            env=_env(TORPOR_HOME=str(torpor_home), TORPOR_CONFIG_DIR=str(torpor_home)),
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        assert cp.returncode == 0, cp.stderr
        attempts = json.loads(cp.stdout)
        assert len(attempts) == 6, attempts

        res = rt.resume("victim")
        assert (res.status, res.wait_kind) == ("waiting", "approval"), res
        assert [e["sha"] for e in kit.ledger_entries("effect")] == [
            client.state("old").artifacts["patch"].sha256
        ]  # only the old run's push: nothing for the victim
        refused = [e.payload for e in client.events("victim") if e.type == "approval_refused"]
        reasons = [r.reason for r in refused]  # type: ignore[attr-defined]
        assert len(refused) == len(attempts), reasons
        assert sum(r.withdrawn for r in refused) == 1  # type: ignore[attr-defined]
        assert sum("signature does not verify" in r for r in reasons) == 2  # forged, replayed
        assert sum("HMAC decision" in r for r in reasons) == 1
        assert sum("is not in the keyring" in r for r in reasons) == 2  # planted, both ways
        assert sum("policy decision" in r for r in reasons) == 1
        info = client.state("victim").approvals[next(iter(client.state("victim").approvals))]
        assert (info.status, info.approver, info.decisions) == ("requested", None, [])
        assert info.refused == len(attempts)
        # Nothing the attacker wrote made it into the trusted keyring or the worker's view.
        assert keyring.read_bytes() == trusted
        assert rt.trust.path == keyring.resolve()
        assert [e.name for e in rt.trust.keyring().entries] == ["alice", "bob", "carol"]

        capsys.readouterr()
        with pytest.raises(SystemExit):
            cli_main(["--db", store_url, "show", "victim"])
        shown = capsys.readouterr().out
        assert "approved by" not in shown and "refused: 6 decision(s)" in shown, shown

        client.decide("victim", None, "approve", "alice", comment="reviewed v1")
        res = rt.resume("victim")
        assert res.outcome == "succeeded", res
        assert len(kit.ledger_entries("effect", key="victim/push")) == 1


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torpor.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )


def test_an_approver_on_another_machine_approves_once_trusted(
    store_url: str, tmp_path: Path
) -> None:
    """Dave has his own key folder, keyring and TORPOR_HOME; only the database is shared. His
    decision is refused until the operator trusts his public key (the run keeps waiting);
    then his approval goes through."""
    dave = tmp_path / "dave"
    dave_env = _env(
        TORPOR_HOME=str(dave / "home"),
        TORPOR_CONFIG_DIR=str(dave / "config"),
        TORPOR_KEYRING=str(dave / "config" / "keyring"),
        TORPOR_DATABASE_URL=store_url,
    )
    made = _cli(dave_env, "keys", "init", "--as", "dave", "--json")
    assert made.returncode == 0, made.stderr
    public = json.loads(made.stdout)["public_key"]
    assert not (dave / "home").exists()  # nothing of his key under any TORPOR_HOME

    with torpor.Runtime(store_url) as rt:
        client = torpor.Client(rt.store)
        rt.run(ship, "patch v1\n", run_id="remote")
        [hashes] = client.pending_approvals("remote").values()
        approve = ("approve", "remote", "--as", "dave", "--hash", hashes[0][:10])
        first = _cli(dave_env, *approve)
        assert first.returncode == 0, first.stderr  # his own keyring trusts his key...
        res = rt.resume("remote")  # ...the worker's does not (yet)
        assert (res.status, res.wait_kind) == ("waiting", "approval"), res
        assert "'dave' has no key in the keyring" in res.reason
        assert kit.ledger_entries("effect") == []

        with pytest.raises(SystemExit) as added:  # the operator, on the workers' machine
            cli_main(["keys", "add", "dave", public])
        assert added.value.code == 0
        second = _cli(dave_env, *approve)
        assert second.returncode == 0, second.stderr
        res = rt.resume("remote")
        assert res.outcome == "succeeded", res
        info = client.state("remote").approvals[next(iter(client.state("remote").approvals))]
        assert (
            info.approver == "dave"
            and info.decisions[0].key == json.loads(made.stdout)["fingerprint"]
        )
        assert len(kit.ledger_entries("effect", key="remote/push")) == 1


@pytest.mark.skipif(shutil.which("ssh-agent") is None, reason="needs OpenSSH's ssh-agent")
def test_a_key_held_by_ssh_agent_signs(db_url: str, tmp_path: Path) -> None:
    """``torpor approve --agent``: the private key is only in ssh-agent (its file deleted)."""
    agent = subprocess.Popen(
        ["ssh-agent", "-D", "-a", str(tmp_path / "agent.sock")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        kit.wait_for_file(tmp_path / "agent.sock")
        key = Path(os.environ["TORPOR_CONFIG_DIR"]) / "keys" / "alice"
        env = _env(
            **{k: v for k, v in os.environ.items() if k.startswith("TORPOR_")},
            SSH_AUTH_SOCK=str(tmp_path / "agent.sock"),
        )
        added = subprocess.run(["ssh-add", str(key)], env=env, capture_output=True, text=True)
        assert added.returncode == 0, added.stderr
        key.unlink()
        with torpor.Runtime(db_url) as rt:
            rt.run(ship, "patch v1\n", run_id="agent")
            missing = _cli(env, "approve", "agent", "--as", "alice")
            assert missing.returncode == 1
            assert "torpor keys init --as alice" in missing.stderr  # no file: says what to run
            signed = _cli(env, "approve", "agent", "--as", "alice", "--agent")
            assert signed.returncode == 0, signed.stderr
            assert rt.resume("agent").outcome == "succeeded"
    finally:
        agent.terminate()
        agent.wait(10)
