"""The sandbox without a VM: the doctor's facts, refusing where no VM boundary can be had, the
loudly labelled process isolation, the tools' recovery policies and reconciles, the image's
manifest check and the initramfs archive's determinism."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from torpor.engine.effects import Absent, Applied, EffectCall, Unknown
from torpor.errors import (
    EffectNotApplied,
    IsolationUnavailableError,
    SandboxError,
    SandboxGoneError,
    SandboxImageError,
)
from torpor.history import Policy
from torpor.sandbox import ProcessSandbox, Sandbox, cpio, op_id, open_sandbox, sandbox_tools
from torpor.sandbox.image import load_image
from torpor.sandbox.process import BANNER


@pytest.fixture
def no_qemu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host without QEMU and without a built image."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("TORPOR_SANDBOX_CACHE", str(tmp_path / "cache"))


def test_doctor_says_what_the_host_lacks_one_fact_a_line(no_qemu: None) -> None:
    from torpor.cli import app

    res = CliRunner().invoke(app, ["sandbox", "doctor"])
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    assert [line.split()[0] for line in lines] == ["qemu", "kvm", "accel", "image", "isolation"]
    assert lines[0].split()[1] == "no" and "qemu-system-x86_64 not on PATH" in lines[0]
    assert lines[3].split()[1] == "no" and "torpor sandbox build" in lines[3]
    assert "not probed yet" not in lines[2]  # decided (KVM unusable) or how to probe it
    assert "decided without a boot" in lines[2] or "boots a stock kernel" in lines[2]
    assert (
        "torpor refuses" in lines[4] and "isolation='process' is for development only" in lines[4]
    )
    facts = json.loads(CliRunner().invoke(app, ["sandbox", "doctor", "--json"]).output)
    assert facts[-1] == {"what": "isolation", "ok": False, "detail": lines[4].split(None, 2)[2]}


def test_without_a_vm_boundary_torpor_refuses(no_qemu: None) -> None:
    with pytest.raises(IsolationUnavailableError, match="qemu-system-x86_64 is not installed"):
        Sandbox().start()
    with pytest.raises(ValueError, match="isolation must be 'vm' or 'process'"):
        open_sandbox(isolation="none")


def test_the_image_is_checked_against_its_manifest(tmp_path: Path) -> None:
    root = tmp_path / "img"
    root.mkdir()
    files = {"vmlinuz": b"kernel", "initrd.img": b"initrd", "rootfs.ext4": b"rootfs"}
    for name, data in files.items():
        (root / name).write_bytes(data)
    digests = {n: hashlib.sha256(d).hexdigest() for n, d in files.items()}
    (root / "manifest.json").write_text(json.dumps({"files": digests}))
    image = load_image(root)
    assert image is not None
    image.verify()
    (root / "rootfs.ext4").write_bytes(b"rootfs, tampered")
    with pytest.raises(SandboxImageError, match=r"rootfs\.ext4 does not match its sha256"):
        image.verify()


def test_the_initramfs_archive_is_the_same_bytes_each_build() -> None:
    entries = [
        cpio.directory("bin"),
        cpio.file("bin/x", b"\x7fELF..", 0o755),
        cpio.symlink("bin/sh", "x"),
    ]
    one = cpio.gzipped(entries)
    assert one == cpio.gzipped(list(reversed(entries)))  # sorted by path, mtime 0
    raw = gzip.decompress(one)
    assert raw.startswith(b"070701") and b"TRAILER!!!" in raw and len(raw) % 4 == 0
    names = [
        raw[i + 110 : raw.index(b"\0", i + 110)]
        for i in range(len(raw))
        if raw[i : i + 6] == b"070701"
    ]
    assert names == [b"bin", b"bin/sh", b"bin/x", b"TRAILER!!!"]


def call(key: str, **kwargs: object) -> EffectCall:
    return EffectCall("r1", "s1", key, "sandbox.exec", 1, (), {"idempotency_key": key, **kwargs})


@pytest.mark.proc
def test_process_isolation_is_loud_and_keeps_the_contract(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sb = ProcessSandbox(tmp_path / "ws")
    with pytest.warns(RuntimeWarning, match="WITHOUT a VM boundary"):
        sb.start()
    assert BANNER in capsys.readouterr().err
    r = sb.exec(["sh", "-c", "echo x >> log; wc -l < log; env"], op="op1")
    assert r.isolation == "process" and r.stdout.startswith(b"1\n") and b"TORPOR_" not in r.stdout
    assert sb.exec(["sh", "-c", "echo x >> log"], op="op1").replayed
    assert sb.read_file("log") == b"x\n"
    with pytest.raises(SandboxError, match="outside the workspace"):
        sb.read_file("../ops/op1.json")

    tools = sandbox_tools(sb)
    policies = {t.name: t.policy for t in tools}
    assert policies == {
        "sandbox.exec": Policy.EFFECT,
        "sandbox.exec_readonly": Policy.READ,
        "sandbox.write": Policy.EFFECT,
        "sandbox.read": Policy.READ,
        "sandbox.ls": Policy.READ,
    }
    exec_tool, write_tool = tools["sandbox.exec"], tools["sandbox.write"]
    assert exec_tool.reconcile is not None and write_tool.reconcile is not None
    done = exec_tool.fn(["sh", "-c", "echo hi"], idempotency_key="run/step-1")
    verdict = exec_tool.reconcile(call("run/step-1"))
    assert isinstance(verdict, Applied) and verdict.result["stdout"] == done["stdout"] == "hi\n"
    assert isinstance(exec_tool.reconcile(call("run/step-2")), Absent)
    (sb.ops / f"{op_id('run/step-3')}.json").write_text(json.dumps({"state": "started"}))
    assert isinstance(exec_tool.reconcile(call("run/step-3")), Unknown)
    write_tool.fn("a/b.txt", "content")
    assert isinstance(write_tool.reconcile(call("k", path="a/b.txt", content="content")), Applied)
    assert isinstance(write_tool.reconcile(call("k", path="a/b.txt", content="other")), Absent)
    assert tools["sandbox.ls"].fn("a") == [{"name": "b.txt", "kind": "file", "size": 7}]
    sb.close()


def test_a_runs_sandbox_lives_in_its_own_folder_under_torpor_home(tmp_path: Path) -> None:
    one, again, other = (Sandbox.for_run(r, home=tmp_path) for r in ("run-1", "run-1", "run-2"))
    assert one.workspace == again.workspace != other.workspace
    assert one.workspace.parent == tmp_path / "sandboxes" and "run-1" not in str(one.workspace)


def test_an_effect_on_a_sandbox_that_does_not_start_certainly_did_not_happen(
    tmp_path: Path,
) -> None:
    """A sandbox that does not boot was sent nothing: the effect tools say so
    (EffectNotApplied: recorded absent), where a raised boot error used to be left to a
    reconcile that could not reach the guest either (the run ended ``unresolved``)."""

    class Unbootable(ProcessSandbox):
        def start(self) -> ProcessSandbox:
            raise SandboxGoneError("sandbox did not boot (tcg): QEMU exited at boot")

    tools = sandbox_tools(Unbootable(tmp_path / "ws"))
    with pytest.raises(EffectNotApplied, match="nothing was sent to it: sandbox did not boot"):
        tools["sandbox.exec"].fn(["true"], idempotency_key="run/step-1")
    with pytest.raises(EffectNotApplied, match="did not start"):
        tools["sandbox.write"].fn("a.txt", "x")
