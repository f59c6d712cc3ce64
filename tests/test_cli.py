"""The ``torpor`` CLI, driven as a real subprocess against a real SQLite store.

Each test writes a small workflow module into ``tmp_path`` and passes it with ``--import`` (or
``$TORPOR_IMPORT``); the autouse ``torpor_home`` fixture gives every test its own TORPOR_HOME
and signing key, which the subprocesses inherit.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

import torpor
from conftest import HANG_S
from torpor.cli import app
from torpor.history import RunStarted
from torpor.owners import new_owner_id

#: Real subprocesses (CLI runs, interpreters): the default tier, not the fast one.
pytestmark = pytest.mark.proc

ROOT = Path(__file__).resolve().parents[1]

FLOWS = """
import pathlib

import torpor
from torpor import Unknown


def push(diff: str, idempotency_key: str) -> dict:
    with open("pushes.log", "a") as f:
        f.write(idempotency_key + "\\n")
    return {"ok": True, "key": idempotency_key}


@torpor.workflow("cli.ship", criteria=["shipped"])
def ship(run: torpor.Run, inp: dict) -> dict:
    patch = run.artifact("patch", inp["diff"], media_type="text/x-diff")
    ok = run.approval("ship", [patch], summary="ship the patch")
    res = run.effect("push", push, inp["diff"], approval=ok, artifacts=[patch])
    run.verify("shipped", res["ok"])
    return res


def send(to: str, idempotency_key: str) -> dict:
    raise TimeoutError("smtp server timed out after 30s")


def find_sent(call: torpor.EffectCall) -> Unknown:
    return Unknown("the smtp server keeps no record of " + call.idempotency_key)


@torpor.workflow("cli.mail", criteria=["sent"])
def mail(run: torpor.Run, inp: dict) -> dict:
    res = run.effect("send", send, inp["to"], reconcile=find_sent)
    run.verify("sent", res["id"] > 0)
    return res


@torpor.workflow("cli.gate")
def gate(run: torpor.Run, inp: object) -> list:
    first = run.wait_for("go")
    second = run.wait_for("go")
    return [first, second]
"""

COMMANDS = [
    "start",
    "resume",
    "ls",
    "show",
    "events",
    "fork",
    "doctor",
    "init",
    "context",
    "approve",
    "deny",
    "revoke",
    "signal",
    "cancel",
    "resolve",
    "steer",
    "respond",
    "watch",
    "artifacts",
    "worker",
    "budget",
    "retry",
    "keys",
    "schedule",
    "queue",
    "session",
    "explore",
    "console",
    "storage",
    "gc",
    "retention",
    "archive",
    "memory",
    "store",
    "sandbox",
]
KEYS_COMMANDS = ["init", "add", "remove", "list"]
STORE_COMMANDS = ["mark", "accept-restore"]
MEMORY_COMMANDS = ["search", "show", "sync", "prune"]
SANDBOX_COMMANDS = ["doctor", "build"]


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    (tmp_path / "cli_flows.py").write_text(FLOWS)
    return tmp_path


def _env(cwd: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)  # TORPOR_HOME and TORPOR_SIGNING_KEY from the autouse fixture
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = "200"
    env.update(extra or {})
    return env


def cli(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m torpor.cli ARGS`` in ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "torpor.cli", *args],
        cwd=cwd,
        env=_env(cwd, env),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )


def ok(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run the CLI; assert success; return stdout."""
    proc = cli(cwd, *args, env=env)
    assert proc.returncode == 0, f"torpor {' '.join(args)}: {proc.stderr}\n{proc.stdout}"
    assert "Traceback" not in proc.stderr
    return proc.stdout


def js(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    """Run the CLI with --json; return the parsed output."""
    return json.loads(ok(cwd, *args, "--json", env=env))


def js_outcome(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    """Run start/resume with --json for a run expected to end other than succeeded: exit 3."""
    proc = cli(cwd, *args, "--json", env=env)
    assert proc.returncode == 3, f"torpor {' '.join(args)}: {proc.stderr}\n{proc.stdout}"
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Assert a failed run printed exactly one ``error:`` line and no traceback."""
    assert proc.returncode != 0, proc.stdout
    err = proc.stderr
    assert "Traceback" not in err, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for f in fragments:
        assert f in err, err
    return err


def test_approval_flow_shows_and_checks_the_hash(flows: Path) -> None:
    diff = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old\n+new\n"
    start = js(
        flows, "start", "cli.ship", "--import", "cli_flows",
        "--input", json.dumps({"diff": diff}), "--run-id", "ship-1",
    )  # fmt: skip
    assert start["run_id"] == "ship-1"
    assert (start["status"], start["wait_kind"]) == ("waiting", "approval")
    sha = hashlib.sha256(diff.encode()).hexdigest()

    shown = ok(flows, "show", "ship-1")
    assert f"sha256:{sha}" in shown  # the content to review, in full
    assert "requested" in shown and "waiting" in shown
    assert "establishing" in shown and "next" in shown
    # Piped (not a terminal): no line padded with blanks to the 240 columns tables may use.
    assert not [line for line in shown.splitlines() if line.endswith(" ")], shown

    wrong = cli(flows, "approve", "ship-1", "--as", "alice", "--hash", "0000beef")
    one_line_error(wrong, "0000beef", "review it again")
    assert not (flows / "pushes.log").exists()

    approved = ok(flows, "approve", "ship-1", "--as", "alice", "--hash", f"sha256:{sha[:10]}")
    assert f"sha256:{sha}" in approved and "alice" in approved
    # The run recorded its workflow's module: resuming needs no --import.
    assert "torpor resume ship-1" in approved and "--import" not in approved

    done = js(flows, "--import", "cli_flows", "resume", "ship-1")
    assert (done["status"], done["outcome"]) == ("finished", "succeeded")
    assert done["result"] == {"ok": True, "key": "ship-1/push"}
    assert (flows / "pushes.log").read_text().splitlines() == ["ship-1/push"]

    state = js(flows, "show", "ship-1")
    assert state["outcome"] == "succeeded"
    assert [(a["status"], a["approver"], a["hashes"]) for a in state["approvals"].values()] == [
        ("consumed", "alice", [sha])
    ]
    assert [a["sha256"] for a in state["artifacts"]] == [sha]
    assert {s["step_id"]: s["status"] for s in state["steps"]}["push"] == "completed"
    assert [(e["key"], e["status"]) for e in state["effects"]] == [("ship-1/push", "observed")]

    listed = ok(flows, "artifacts", "ship-1")
    assert "patch" in listed and sha in listed and "text/x-diff" in listed
    assert ok(flows, "artifacts", "ship-1", "patch") == diff  # the bytes, on stdout
    out = flows / "out.diff"
    ok(flows, "artifacts", "ship-1", sha[:8], "--out", str(out))
    assert out.read_text() == diff


def test_hints_for_a_run_started_by_a_script_say_to_import_its_module(flows: Path) -> None:
    """A workflow defined in a script run as ``python file.py`` is recorded under module
    ``__main__``, which a later ``torpor resume`` cannot import: the hint says --import."""
    (flows / "nightly.py").write_text(
        "import torpor\n\n"
        "@torpor.workflow(name='cli.nightly')\n"
        "def nightly(run, inp):\n"
        "    return run.wait_for('go')\n\n"
        "if __name__ == '__main__':\n"
        "    rt = torpor.Runtime()\n"
        "    print(rt.run(nightly, None, run_id='n1').status)\n"
    )
    proc = subprocess.run(
        [sys.executable, "nightly.py"], cwd=flows, env=_env(flows), capture_output=True, text=True
    )
    assert proc.stdout.strip() == "waiting", proc.stderr
    out = ok(flows, "cancel", "n1", "--reason", "not tonight")
    assert "torpor resume n1 --import MODULE" in out, out


def test_revoke_before_consumption_stops_the_effect(flows: Path) -> None:
    env = {"TORPOR_IMPORT": "cli_flows"}
    js(flows, "start", "cli.ship", "-i", '{"diff": "patch"}', "--run-id", "r1", env=env)
    decided = js(flows, "approve", "r1", "--as", "alice")
    (aid,) = [decided["approval_id"]]
    revoked = ok(flows, "revoke", "r1", aid, "--as", "bob", "--reason", "wrong branch")
    assert f"sha256:{decided['hashes'][0]}" in revoked
    done = js_outcome(flows, "resume", "r1", env=env)
    assert done["outcome"] == "blocked", done
    assert not (flows / "pushes.log").exists()


def test_signal_with_the_same_id_is_consumed_once(flows: Path, tmp_path: Path) -> None:
    db = ["--db", f"sqlite:///{tmp_path}/other.db", "--import", "cli_flows"]
    assert js(flows, *db, "start", "cli.gate", "--run-id", "g1")["wait_kind"] == "signal"
    first = js(flows, *db, "signal", "g1", "go", "--payload", '{"n": 1}', "--id", "msg-1")
    again = js(flows, *db, "signal", "g1", "go", "--payload", '{"n": 1}', "--id", "msg-1")
    assert (first["delivered"], again["delivered"]) == (True, False)
    (res,) = js(flows, *db, "resume", "--all")["resumed"]
    # One delivery woke the first wait; the duplicate did not satisfy the second one.
    assert (res["run_id"], res["status"], res["wait_kind"]) == ("g1", "waiting", "signal")
    history = js(flows, *db, "events", "g1", "--after", "1", "--limit", "100")
    assert history[0]["seq"] == 2
    assert [e["payload"]["signal_id"] for e in history if e["type"] == "signal_received"] == [
        "msg-1"
    ]
    assert (tmp_path / "other.db").exists()  # --db was honoured


def test_cancel_a_waiting_run_then_a_worker_ends_it(flows: Path) -> None:
    env = {"TORPOR_IMPORT": "cli_flows"}
    js(flows, "start", "cli.gate", "--run-id", "c1", env=env)
    text = ok(flows, "cancel", "c1", "--reason", "superseded")
    assert "cancel" in text
    lines = ok(flows, "worker", "--until-idle", "--max-seconds", "20", "--json", env=env)
    *results, stats = [json.loads(line) for line in lines.splitlines()]
    assert [(r["run_id"], r["outcome"]) for r in results] == [("c1", "cancelled")]
    assert stats["stats"]["errors"] == 0


def test_unresolved_effect_is_listed_explained_and_resolved(flows: Path) -> None:
    res = js_outcome(flows, "--import", "cli_flows", "start", "cli.mail", "-i",
                     '{"to": "ops@x.org"}', "--run-id", "m1")  # fmt: skip
    assert res["outcome"] == "unresolved"

    listed = js(flows, "ls", "--outcome", "unresolved")
    assert [(r["run_id"], r["outcome"]) for r in listed] == [("m1", "unresolved")]

    shown = ok(flows, "show", "m1")
    assert "smtp server timed out" in shown  # why the effect is in doubt
    assert "keeps no record of m1/send" in shown  # what reconcile said
    assert "torpor resolve m1 m1/send" in shown  # and how a person settles it

    settled = ok(flows, "resolve", "m1", "m1/send", "--applied", "--result", '{"id": 42}',
                 "--as", "bob", "--reason", "found it in the outbox")  # fmt: skip
    assert "applied" in settled
    done = js(flows, "--import", "cli_flows", "resume", "m1")
    assert (done["outcome"], done["result"]) == ("succeeded", {"id": 42})
    effects = js(flows, "show", "m1")["effects"]
    assert [(e["status"], e["reason"]) for e in effects] == [
        ("applied", "found it in the outbox (by bob)")
    ]


def test_bad_input_is_one_line_and_nonzero(flows: Path, db_url: str) -> None:
    one_line_error(cli(flows, "show", "no-such-run"), "no torpor store at", "nothing was created")
    torpor.open_store(db_url).close()
    one_line_error(cli(flows, "show", "no-such-run"), "run 'no-such-run'")
    bad_json = cli(flows, "start", "cli.gate", "--import", "cli_flows", "--input", "{oops")
    assert bad_json.returncode == 2
    one_line_error(bad_json, "--input is not valid JSON")
    one_line_error(cli(flows, "start", "nope", "--import", "cli_flows"), "'nope'", "--import")
    one_line_error(cli(flows, "start", "cli.gate", "--import", "no_such_module"), "no_such_module")
    one_line_error(cli(flows, "approve", "x"), "--as")  # a usage error is one line too
    one_line_error(cli(flows, "resolve", "x", "k", "--as", "b"), "--applied or --absent")

    # A run leased by another live process: a clear message, exit 75 (retry later).
    store = torpor.open_store(db_url)
    try:
        store.create_run("held", RunStarted(workflow="cli.gate", version="1"))
        owner = new_owner_id()
        store.acquire_lease("held", owner, ttl_s=60)
        held = cli(flows, "resume", "held", "--import", "cli_flows")
        one_line_error(held, "run 'held' is being executed by", owner, "until")
        assert held.returncode == 75
    finally:
        store.close()


HELP_DRIVER = """
import contextlib, io, json, sys
from torpor.cli import main
seen = {}
for args in json.loads(sys.argv[1]):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code
    seen[" ".join(args)] = [code, buf.getvalue()]
print(json.dumps(seen))
"""


def test_help_for_every_command(flows: Path) -> None:
    registered = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert registered == sorted(COMMANDS)
    # One interpreter runs the real entry point for each --help (a process each costs ~1 s).
    invocations = [
        ["--help"],
        *([c, "--help"] for c in COMMANDS),
        *(["keys", c, "--help"] for c in KEYS_COMMANDS),
        *(["memory", c, "--help"] for c in MEMORY_COMMANDS),
        *(["store", c, "--help"] for c in STORE_COMMANDS),
        *(["sandbox", c, "--help"] for c in SANDBOX_COMMANDS),
    ]
    proc = subprocess.run(
        [sys.executable, "-c", HELP_DRIVER, json.dumps(invocations)],
        cwd=flows,
        env=_env(flows),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    seen = json.loads(proc.stdout)
    for args in invocations:
        code, out = seen[" ".join(args)]
        assert code == 0, (args, out)
        assert "Usage: torpor" in out and "Example: torpor" in out, (args, out)


def test_ls_tells_a_dead_holder_from_a_live_one(flows: Path) -> None:
    """After kill -9 the lease is still unexpired, but `ls` says its holder is dead (a local
    resume takes it over at once) instead of implying someone is still working on it."""
    from torpor.owners import new_owner_id

    env = {"TORPOR_IMPORT": "cli_flows"}
    js(flows, "start", "cli.ship", "-i", '{"diff": "patch"}', "--run-id", "d1", env=env)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host, _, rest = new_owner_id().split(":", 2)
    owner = f"{host}:{gone.pid}:{rest}"
    with torpor.Client() as client:
        client.store.acquire_lease("d1", owner, 300)
        listed = ok(flows, "ls")
        assert "(holder dead)" in listed, listed
        client.store.acquire_lease("d1", new_owner_id(), 300)  # this live process
        assert "(leased)" in ok(flows, "ls")
