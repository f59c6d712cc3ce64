"""Sleep and wake (issue 44): a run that waits puts its real microVM to sleep (a snapshot file,
no process) and its next sandbox call after the wait wakes it — workspace files and memory (a
file in the guest's tmpfs ``/tmp``) back; a tampered snapshot, a disk changed while asleep or
other limits refused; the files surviving the VM's kill and a cold boot. Two cold boots in all
(each ~10 s under TCG)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import torpor
from sandbox_kit import vm_image
from torpor.errors import SandboxSnapshotError
from torpor.sandbox import Limits, Sandbox, sandbox_tools, sleep_on_wait
from torpor.sandbox.snapshot import MANIFEST, SNAPSHOT, disk_digest, footprint

pytestmark = pytest.mark.proc

LIMITS = Limits(cpus=1, memory_mb=128, disk_mb=24, tmp_mb=8)


def vms_on(disk: Path) -> list[int]:
    """The pids of the processes whose command line names ``disk``."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(disk).encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def test_the_disk_digest_is_of_content_not_of_allocation(tmp_path: Path) -> None:
    sparse, dense = tmp_path / "sparse", tmp_path / "dense"
    with open(sparse, "wb") as f:
        f.truncate(5 << 20)
        f.seek(3 << 20)
        f.write(b"data")
    dense.write_bytes(bytes(3 << 20) + b"data" + bytes((2 << 20) - 4))
    assert os.stat(sparse).st_blocks < os.stat(dense).st_blocks
    assert disk_digest(sparse) == disk_digest(dense)
    with open(dense, "r+b") as f:
        f.seek(4 << 20)
        f.write(b"\1")
    assert disk_digest(sparse) != disk_digest(dense)


def test_a_waiting_run_sleeps_its_vm_and_wakes_it_with_files_and_memory(
    tmp_path: Path, runtime: torpor.Runtime, client: torpor.Client
) -> None:
    image = vm_image()
    home = tmp_path / "home"
    sb = Sandbox.for_run("run-sleep", home=home, limits=LIMITS, image=image)
    tools = sandbox_tools(sb)
    exec_tool = tools["sandbox.exec"]
    build = "mkdir -p src; echo v1 > src/app.py; echo built > out.txt; echo in-memory > /tmp/mem"

    @torpor.workflow(name="test.sandbox.sleep", version="1")
    def flow(run: torpor.Run, _: None) -> dict[str, object]:
        a = run.effect("build", exec_tool.fn, ["sh", "-c", build], reconcile=exec_tool.reconcile)
        with sleep_on_wait(sb):
            run.wait_for("go")
        check = "cat src/app.py out.txt /tmp/mem; echo 2 >> out.txt"
        b = run.effect("check", exec_tool.fn, ["sh", "-c", check], reconcile=exec_tool.reconcile)
        return {"built": a["workspace"], "check": b["stdout"], "restored": sb.restored}

    res = runtime.run("test.sandbox.sleep", None, run_id="run-sleep")
    assert res.status == "waiting"
    ws = sb.workspace
    assert not sb.running and not vms_on(ws / "disk.img")  # asleep: no process
    assert {SNAPSHOT, MANIFEST, "disk.img"} <= {p.name for p in ws.iterdir()}
    manifest = json.loads((ws / MANIFEST).read_text())
    assert manifest["disk_digest"] == sb.workspace_digest()  # taken with the VM stopped
    assert 0 < footprint(ws) < (LIMITS.memory_mb + LIMITS.disk_mb) << 20

    # Tampered: one byte of the stream flipped is refused before QEMU reads it; so is the disk.
    snap = ws / SNAPSHOT
    original = snap.read_bytes()
    at = len(original) // 2
    snap.write_bytes(original[:at] + bytes([original[at] ^ 1]) + original[at + 1 :])
    other = Sandbox.for_run("run-sleep", home=home, limits=LIMITS, image=image)
    with pytest.raises(SandboxSnapshotError, match="does not match its sha256"):
        other.start()
    snap.write_bytes(original)
    disk = ws / "disk.img"
    first = disk.read_bytes()[:1]
    with open(disk, "r+b") as f:
        f.write(bytes([first[0] ^ 1]))
    with pytest.raises(SandboxSnapshotError, match=r"disk\.img changed while the sandbox slept"):
        other.start()
    with open(disk, "r+b") as f:
        f.write(first)
    with pytest.raises(SandboxSnapshotError, match="memory_mb=128"):
        Sandbox.for_run("run-sleep", home=home, limits=Limits(memory_mb=160), image=image).start()

    # The signal wakes the run; its next sandbox call wakes the VM: files and memory are back.
    client.signal("run-sleep", "go")
    res = runtime.resume("run-sleep")
    assert res.outcome == "succeeded", res.reason
    assert res.result["check"] == "v1\nbuilt\nin-memory\n" and res.result["restored"] is True
    assert not (ws / MANIFEST).exists() and not snap.exists()

    # Killed (SIGKILL to QEMU, no snapshot): a cold boot finds the files, not the memory.
    sb.kill()
    cold = Sandbox.for_run("run-sleep", home=home, limits=LIMITS, image=image).start()
    try:
        assert not cold.restored
        r = cold.exec(["sh", "-c", "cat out.txt; cat /tmp/mem 2>/dev/null || echo no-mem"])
        assert r.stdout == b"built\n2\nno-mem\n"
    finally:
        cold.close()
