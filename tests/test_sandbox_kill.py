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
import torpor.errors
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

RUN = sys.argv[2]

def main(resume):
    rt = torpor.Runtime({db!r})
    try:
        res = rt.resume(RUN) if resume else rt.run("sandbox.kill", None, run_id=RUN)
        done = {{"status": res.status, "outcome": res.outcome, "result": res.result}}
        print("RESULT " + json.dumps(done), flush=True)
        try:
            count = sb.read_file("count").decode()
        except torpor.errors.SandboxError:
            count = None  # the VM was killed before the line reached the disk
        print("COUNT " + json.dumps(count), flush=True)
    finally:
        sb.close()
        rt.close()

main(sys.argv[1] == "resume")
"""


def _spawn(tmp: Path, mode: str, run_id: str = "r1") -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp), str(ROOT / "src")]))
    return subprocess.Popen(
        [sys.executable, str(tmp / "flow_mod.py"), mode, run_id], cwd=tmp, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _wait_started(proc: subprocess.Popen[str], ws: Path, op: str) -> None:
    """Until the guest says the command started (its console line, written after the op is
    recorded on the workspace disk): mid-exec by construction, not by a sleep."""
    console = ws / "console.log"
    deadline = time.monotonic() + HANG_S
    while f"op {op} started" not in (
        console.read_text(errors="replace") if console.exists() else ""
    ):
        assert proc.poll() is None, f"the first process ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, "the command never started in the guest"
        time.sleep(0.05)


def test_sigkill_mid_exec_is_reconciled_once_from_the_guests_record(
    tmp_path: Path, db_url: str
) -> None:
    vm_image()
    ws = tmp_path / "ws"
    (tmp_path / "flow_mod.py").write_text(textwrap.dedent(MODULE.format(ws=str(ws), db=db_url)))
    op = op_id("r1/build")
    first = _spawn(tmp_path, "start")
    _wait_started(first, ws, op)
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


@pytest.mark.slow
def test_host_and_vm_killed_mid_exec_leave_the_run_unresolved(tmp_path: Path, db_url: str) -> None:
    """The VM dies with its host (a machine's crash): the guest's ledger says the op started
    and never ended, so reconcile answers unknown — the run is unresolved, nothing reruns."""
    vm_image()
    ws = tmp_path / "ws"
    (tmp_path / "flow_mod.py").write_text(textwrap.dedent(MODULE.format(ws=str(ws), db=db_url)))
    first = _spawn(tmp_path, "start", "r2")
    _wait_started(first, ws, op_id("r2/build"))
    qemu = int((ws / "qemu.pid").read_text())
    os.kill(first.pid, signal.SIGKILL)
    os.kill(qemu, signal.SIGKILL)
    first.wait()
    second = _spawn(tmp_path, "resume", "r2")  # boots a new VM on the same disk
    out, err = second.communicate(timeout=HANG_S)
    assert second.returncode == 0, out + err
    assert '"status": "finished", "outcome": "unresolved"' in out, out
    count = next(line for line in out.splitlines() if line.startswith("COUNT "))
    assert count in ('COUNT "ran\\n"', "COUNT null"), "never run a second time"
    reconciled = [e for e in torpor.Client(db_url).events("r2") if e.type == "effect_reconciled"]
    assert [e.payload.verdict for e in reconciled] == ["unknown"]
    assert "VM stopped before it ended" in reconciled[0].payload.reason
