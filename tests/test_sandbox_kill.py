"""SIGKILL of the host process while a command runs in its sandbox: the VM (its own session)
finishes the command and records it on the workspace disk; the resuming process attaches to
that VM, reconcile asks the guest, and the command's result is used — it ran once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import torpor
from conftest import HANG_S, ROOT
from sandbox_kit import vm_image
from torpor.sandbox import op_id

pytestmark = pytest.mark.proc

MODULE = """
import json, sys
import torpor
from torpor.sandbox import Sandbox, sandbox_tools

sb = Sandbox({ws!r})
tools = sandbox_tools(sb)
exec_tool = tools["sandbox.exec"]

@torpor.workflow(name="sandbox.kill", version="1")
def flow(run, _input):
    return run.effect(
        "build", exec_tool.fn, ["sh", "-c", "echo ran >> count; sleep 3; echo built"],
        reconcile=exec_tool.reconcile,
    )

def main(resume):
    rt = torpor.Runtime({db!r})
    try:
        res = rt.resume("r1") if resume else rt.run("sandbox.kill", None, run_id="r1")
        done = {{"status": res.status, "outcome": res.outcome, "result": res.result}}
        print("RESULT " + json.dumps(done), flush=True)
        print("COUNT " + json.dumps(sb.read_file("count").decode()), flush=True)
    finally:
        sb.close()
        rt.close()

main(sys.argv[1] == "resume")
"""


def _spawn(tmp: Path, mode: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp), str(ROOT / "src")]))
    return subprocess.Popen(
        [sys.executable, str(tmp / "flow_mod.py"), mode], cwd=tmp, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_sigkill_mid_exec_is_reconciled_once_from_the_guests_record(
    tmp_path: Path, db_url: str
) -> None:
    vm_image()
    ws = tmp_path / "ws"
    (tmp_path / "flow_mod.py").write_text(textwrap.dedent(MODULE.format(ws=str(ws), db=db_url)))
    op = op_id("r1/build")
    first = _spawn(tmp_path, "start")
    console = ws / "console.log"
    deadline = time.monotonic() + HANG_S
    # Kill when the guest says the command started (its console line, written after the op
    # is recorded on the workspace disk): mid-exec by construction, not by a sleep.
    while f"op {op} started" not in (
        console.read_text(errors="replace") if console.exists() else ""
    ):
        assert first.poll() is None, f"the first process ended early: {first.communicate()}"
        assert time.monotonic() < deadline, "the command never started in the guest"
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    events = torpor.Client(db_url).events("r1")
    kinds = [e.type for e in events]
    assert "effect_intended" in kinds and "effect_observed" not in kinds  # in flight when killed

    second = _spawn(tmp_path, "resume")
    out, err = second.communicate(timeout=HANG_S)
    assert second.returncode == 0, out + err
    result = next(line for line in out.splitlines() if line.startswith("RESULT "))
    count = next(line for line in out.splitlines() if line.startswith("COUNT "))
    assert count == 'COUNT "ran\\n"', "the command ran exactly once"
    assert '"outcome": "succeeded"' in result and '"replayed": true' in result and "built" in result
    reconciled = [e for e in torpor.Client(db_url).events("r1") if e.type == "effect_reconciled"]
    assert len(reconciled) == 1 and reconciled[0].payload.verdict == "applied"
