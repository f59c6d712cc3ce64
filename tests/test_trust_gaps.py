"""Issue 34's small trust gaps, each through the public commands and direct writes to files:

- a keyring file or folder others can write is refused like ssh refuses a loose
  ``authorized_keys``, with the one-line fix — by the CLI and by the worker's check of a
  decision (item 4);
- ``keys init --delegate-for`` prints a ``keys add`` line that keeps the delegation, and that
  line, run elsewhere, trusts the key as a delegate (item 7);
- ``keys add NAME @/dev/zero`` is a bounded read with a one-line error (item 7);
- ``hmac-local``'s shared key lives outside ``TORPOR_HOME``: a key planted in
  ``$TORPOR_HOME/signing.key`` approves nothing (item 3).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

import torpor
from torpor import keys
from torpor.cli import main as cli_main
from torpor.errors import KeyringError


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        cli_main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")


def _keyring() -> Path:
    return Path(os.environ["TORPOR_KEYRING"])


@pytest.mark.parametrize("loose", ["file", "folder"])
def test_a_keyring_others_can_write_is_refused_with_the_fix(
    loose: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ring = _keyring()
    assert ring.exists() and keys.Keyring.load(ring).entries  # the suite's keyring loads
    target = ring if loose == "file" else ring.parent
    os.chmod(target, 0o666 if loose == "file" else 0o777)
    try:
        code, _, err = cli(capsys, "keys", "list")
        assert code == 1 and len(err.strip().splitlines()) == 1, err
        assert "writable by others" in err and f"fix: chmod go-w {target}" in err, err
        trust = keys.Trust(ring)
        with pytest.raises(KeyringError, match="writable by others"):
            trust.keyring()
    finally:
        os.chmod(target, 0o644 if loose == "file" else 0o700)
    code, out, _ = cli(capsys, "keys", "list")
    assert code == 0 and "alice" in out


def test_a_sticky_folder_like_tmp_is_accepted(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o1777)
    ring = keys.Keyring(folder / "keyring")
    ring.save()
    assert keys.Keyring.load(folder / "keyring").exists


def test_a_loose_keyring_refuses_the_decision_and_the_run_waits(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with torpor.Runtime(db_url) as rt:
        rt.run(_ship, {"content": "v1\n"}, run_id="loose")
    code, _, err = cli(capsys, "approve", "loose", "--as", "alice")
    assert code == 0, err
    os.chmod(_keyring(), 0o666)
    try:
        with torpor.Runtime(db_url) as rt:
            assert rt.resume("loose").status == "waiting"
            [info] = torpor.Client(rt.store).state("loose").approvals.values()
            assert info.status != "approved"
            reasons = [
                e.payload.reason
                for e in torpor.Client(rt.store).events("loose")
                if e.type == "approval_refused"
            ]
            assert any("writable by others" in r for r in reasons), reasons
    finally:
        os.chmod(_keyring(), 0o644)


@torpor.workflow(name="trustgaps.ship", version="1")
def _ship(run: torpor.Run, cfg: dict[str, str]) -> str:
    ref = run.artifact("patch", cfg["content"])
    run.approval("ship", [ref])
    return "shipped"


def test_keys_init_for_a_delegate_prints_an_add_line_that_keeps_the_delegation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(
        capsys, "keys", "init", "--as", "console@ops", "--delegate-for", "alice,bob"
    )
    assert code == 0, err
    [line] = [x for x in out.splitlines() if "torpor keys add" in x]
    command = line.split("trust it with: ", 1)[1]
    assert "--delegate-for 'alice,bob'" in command, command
    # Run the printed line on "another machine": a fresh keyring.
    monkeypatch.setenv("TORPOR_KEYRING", str(tmp_path / "elsewhere" / "keyring"))
    argv = shlex.split(command)
    assert argv[:3] == ["torpor", "keys", "add"]
    code, _, err = cli(capsys, *argv[1:])
    assert code == 0, err
    [entry] = keys.Keyring.load(tmp_path / "elsewhere" / "keyring").named("console@ops")
    assert entry.delegate_for == ("alice", "bob")


def test_keys_add_from_dev_zero_is_a_bounded_read_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = cli(capsys, "keys", "add", "zed", "@/dev/zero")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "'/dev/zero' is longer than" in err and "not a public key file" in err, err


def test_hmac_local_key_is_outside_torpor_home_so_a_planted_one_approves_nothing(
    torpor_home: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torpor import signing

    monkeypatch.setenv("TORPOR_APPROVALS", "hmac-local")
    monkeypatch.delenv("TORPOR_SIGNING_KEY")
    with torpor.Runtime(db_url) as rt:
        rt.run(_ship, {"content": "v1\n"}, run_id="planted")
        client = torpor.Client(rt.store)
        [(aid, info)] = client.state("planted").approvals.items()
        # A writer of TORPOR_HOME plants its own shared key there and signs with it.
        planted = b"p" * 64
        (torpor_home / "signing.key").write_bytes(planted)
        at = rt.store.now_ms()
        data = signing.hmac_bytes("planted", aid, "approve", "alice", info.hashes, at)
        body = {
            "approval_id": aid,
            "decision": "approve",
            "approver": "alice",
            "hashes": sorted(info.hashes),
            "comment": "",
            "decided_at_ms": at,
            "scheme": "hmac",
            "signature": signing.hmac_sign(planted, data),
        }
        rt.store.post_inbox("planted", "decision", body, message_id="decision:forged")
    with torpor.Runtime(db_url) as rt:
        assert rt.resume("planted").status == "waiting"
        refused = [e.payload for e in client.events("planted") if e.type == "approval_refused"]
        assert refused and "does not verify with the local shared key" in refused[0].reason
        # The one local user's own decision, made with the key in their own folder, counts.
        client = torpor.Client(rt.store)
        client.decide("planted", None, "approve", "alice")
        assert rt.resume("planted").outcome == "succeeded"
    key = Path(os.environ["TORPOR_CONFIG_DIR"]) / "hmac-local.key"
    assert key.exists() and oct(key.stat().st_mode & 0o777) == "0o600"


@torpor.workflow(name="trustgaps.bidi", version="1")
def _bidi(run: torpor.Run, cfg: dict[str, str]) -> str:
    run.artifact("patch", cfg["content"])
    run.artifact("plain", "nothing hidden here\n")
    return "ok"


def test_torpor_artifacts_flags_and_escapes_bidi_and_invisible_characters(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    trick = "if admin:\u202e }\u2066 return\u200b True\n"
    with torpor.Runtime(db_url) as rt:
        assert rt.run(_bidi, {"content": trick}, run_id="bidi").outcome == "succeeded"
    capsys.readouterr()
    code, out, err = cli(capsys, "artifacts", "bidi")
    assert code == 0, err
    flags = [x for x in out.splitlines() if x.startswith("warning:")]
    assert len(flags) == 1 and flags[0].startswith("warning: patch v1"), out
    assert "invisible or bidi characters (U+200B, U+202E, U+2066)" in flags[0]
    code, out, err = cli(capsys, "artifacts", "bidi", "patch", "--escaped")
    assert code == 0 and out == "if admin:<U+202E> }<U+2066> return<U+200B> True\n", out
    assert "invisible or bidi characters" in err
    # Piped without --escaped: the exact bytes (a file or a diff tool needs them), still flagged.
    code, out, err = cli(capsys, "artifacts", "bidi", "patch")
    assert code == 0 and out == trick and "invisible or bidi characters" in err
    code, out, err = cli(capsys, "artifacts", "bidi", "plain")
    assert code == 0 and err == ""


def test_a_decision_refused_before_it_is_sent_is_recorded_on_the_run(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with torpor.Runtime(db_url) as rt:
        rt.run(_ship, {"content": "v1\n"}, run_id="stale")
    # Stale: alice reviewed other content (a hash prefix the approval does not bind).
    code, _, err = cli(capsys, "approve", "stale", "--as", "alice", "--hash", "0000beef")
    assert code != 0 and "not the content '0000beef' you reviewed" in err, err
    # Refused by the local keyring: bob's key was removed.
    assert cli(capsys, "keys", "remove", "bob")[0] == 0
    code, _, err = cli(capsys, "approve", "stale", "--as", "bob")
    assert code != 0 and "refused" in err, err
    with torpor.Runtime(db_url) as rt:
        assert rt.resume("stale").status == "waiting"
        client = torpor.Client(rt.store)
        refused = [e.payload for e in client.events("stale") if e.type == "approval_refused"]
        [info] = client.state("stale").approvals.values()
        assert info.status == "requested" and not info.decisions
    assert [(r.approver, r.decision) for r in refused] == [("alice", "approve"), ("bob", "approve")]
    assert "refused before it was sent" in refused[0].reason and "0000beef" in refused[0].reason
    assert "has no key in the keyring" in refused[1].reason, refused[1].reason
    code, shown, _ = cli(capsys, "show", "stale")
    assert "refused: 2 decision(s)" in shown and "alice: refused before it was sent" in shown
