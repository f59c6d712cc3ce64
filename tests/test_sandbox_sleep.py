"""Sleep and wake (issue 44): a real microVM saved to a snapshot file and restored from it, its
workspace files and its memory (a file in the guest's tmpfs ``/tmp``) back; a tampered snapshot
or a disk changed while asleep refused; the files surviving the VM's kill and a cold boot. One
VM for the whole module (each cold boot costs ~10 s under TCG)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox_kit import vm_image
from torpor.errors import SandboxSnapshotError
from torpor.sandbox import Limits, Sandbox, op_id, sandbox_tools
from torpor.sandbox.snapshot import MANIFEST, SNAPSHOT, disk_digest, footprint

pytestmark = pytest.mark.proc

LIMITS = Limits(cpus=1, memory_mb=128, disk_mb=24, tmp_mb=8)


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


def test_files_and_memory_survive_sleep_and_restore_and_files_a_kill(tmp_path: Path) -> None:
    image = vm_image()
    home = tmp_path / "home"
    sb = Sandbox.for_run("run-sleep", home=home, limits=LIMITS, image=image).start()
    tools = sandbox_tools(sb)
    wrote = tools["sandbox.write"].fn("src/app.py", "print('v1')\n")
    ran = tools["sandbox.exec"].fn(
        ["sh", "-c", "echo built > out.txt; echo in-memory > /tmp/mem"], idempotency_key="k1"
    )
    assert ran["exit_code"] == 0 and wrote["workspace"] != ran["workspace"]
    assert ran["workspace"] == sb.workspace_digest()  # the state the effect left, recorded
    pid = int((sb.workspace / "qemu.pid").read_text())
    manifest = sb.sleep()
    ws = sb.workspace
    assert not Path(f"/proc/{pid}").exists()  # asleep: no process
    assert {SNAPSHOT, MANIFEST, "disk.img"} <= {p.name for p in ws.iterdir()}
    assert manifest["disk_digest"] == sb.workspace_digest()  # taken with the VM stopped
    assert 0 < footprint(ws) < (LIMITS.memory_mb + LIMITS.disk_mb) << 20

    # Tampered: one byte of the stream flipped is refused before QEMU reads it; so is the disk.
    snap = ws / SNAPSHOT
    original = snap.read_bytes()
    at = len(original) // 2
    snap.write_bytes(original[:at] + bytes([original[at] ^ 1]) + original[at + 1 :])
    again = Sandbox.for_run("run-sleep", home=home, limits=LIMITS, image=image)
    with pytest.raises(SandboxSnapshotError, match="does not match its sha256"):
        again.start()
    snap.write_bytes(original)
    disk = ws / "disk.img"
    block = disk.read_bytes()[: 1 << 20]
    with open(disk, "r+b") as f:
        f.write(bytes([block[0] ^ 1]))
    with pytest.raises(SandboxSnapshotError, match=r"disk\.img changed while the sandbox slept"):
        again.start()
    with open(disk, "r+b") as f:
        f.write(block[:1])
    with pytest.raises(SandboxSnapshotError, match="memory_mb=128"):
        Sandbox.for_run("run-sleep", home=home, limits=Limits(memory_mb=160), image=image).start()

    # A new sandbox for the same run (as a new process would make) wakes the snapshot.
    woke = again.start()
    assert woke.restored and not (ws / MANIFEST).exists() and not snap.exists()
    r = woke.exec(["sh", "-c", "cat src/app.py out.txt /tmp/mem"])
    assert r.stdout == b"print('v1')\nbuilt\nin-memory\n"
    assert woke.exec(["false"], op=op_id("k1")).replayed  # the guest's ledger came back too

    # Killed (SIGKILL to QEMU, no snapshot): a cold boot finds the files, not the memory.
    woke.exec(["sh", "-c", "echo after-wake >> out.txt"], op=op_id("k2"))
    woke.kill()
    cold = Sandbox.for_run("run-sleep", home=home, limits=LIMITS, image=image).start()
    try:
        assert not cold.restored
        r = cold.exec(["sh", "-c", "cat out.txt; cat /tmp/mem 2>/dev/null || echo no-mem"])
        assert r.stdout == b"built\nafter-wake\nno-mem\n"
    finally:
        cold.close()
