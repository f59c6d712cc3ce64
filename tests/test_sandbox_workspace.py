"""Workspaces as artifacts of their run (issue 44), on one real microVM boot: the run saves its
workspace before a wait (disk chunks, saved state and manifest in the artifact store, recorded as
the run's artifacts: gc keeps them, an archive brings the references back); a resume on "another
machine" (another TORPOR_HOME, only the database and the artifact store in common) rebuilds the
workspace from the artifact store and wakes it with its files and memory; a tampered blob there
is refused; and a VM a dead host left paused (mid-sleep) is continued when a new host attaches.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

import torpor
from conftest import run_python
from sandbox_kit import vm_image
from torpor.artifacts import ArtifactStore
from torpor.errors import CorruptRecordError
from torpor.retention import archive_run, collect, restore_archive
from torpor.sandbox import Limits, Sandbox, sandbox_tools, sleep_on_wait
from torpor.sandbox.snapshot import MANIFEST, SNAPSHOT
from torpor.store import open_store

pytestmark = pytest.mark.proc

LIMITS = Limits(cpus=1, memory_mb=128, disk_mb=16, tmp_mb=8)
RUN = "run-ws-artifacts"
DIES_IN_SLEEP = """
import os, signal
from pathlib import Path
from torpor.sandbox import Limits, Sandbox, snapshot
from torpor.sandbox.image import load_image
sb = Sandbox({ws!r}, limits=Limits(cpus=1, memory_mb=128, disk_mb=16, tmp_mb=8),
             image=load_image(Path({image!r})))
sb.start()
sb.exec(["sh", "-c", "echo before > /tmp/paused"])
call = snapshot.QMP.call
def dies_after_migrate(self, command, **kw):
    out = call(self, command, **kw)
    if command == "migrate":
        os.kill(os.getpid(), signal.SIGKILL)
    return out
snapshot.QMP.call = dies_after_migrate
sb.sleep()
"""
#: The sandbox the workflow uses: the test swaps it to play "another machine".
HERE: dict[str, Sandbox] = {}


def sh(name: str, run: torpor.Run, script: str) -> dict[str, Any]:
    tool = sandbox_tools(HERE["sb"])["sandbox.exec"]
    out: dict[str, Any] = run.effect(name, tool.fn, ["sh", "-c", script], reconcile=tool.reconcile)
    return out


@torpor.workflow(name="test.sandbox.workspace", version="1")
def flow(run: torpor.Run, _: None) -> dict[str, object]:
    sh("build", run, "mkdir -p src; echo v1 > src/app.py; echo warm > /tmp/mem")
    with sleep_on_wait(HERE["sb"], run):
        run.wait_for("go")
    check = sh("check", run, "cat src/app.py /tmp/mem; echo shipped >> src/app.py")
    return {"check": check["stdout"], "restored": HERE["sb"].restored}


def test_a_saved_workspace_is_the_runs_artifacts_and_wakes_on_another_machine(
    tmp_path: Path,
) -> None:
    image = vm_image()
    db = f"sqlite:///{tmp_path}/torpor.db"
    shared = str(tmp_path / "artifacts")
    home_a, home_b = tmp_path / "machine-a", tmp_path / "machine-b"
    sb = HERE["sb"] = Sandbox.for_run(RUN, home=home_a, limits=LIMITS, image=image)
    ws = sb.workspace

    # A host SIGKILLed in sleep() (just after it asked QEMU to migrate the stopped VM to its
    # snapshot file) leaves the VM paused, unsealed. The next start attaches and continues it
    # (QMP cont), where it used to wait, kill it and cold-boot.
    killed = run_python(DIES_IN_SLEEP.format(ws=str(ws), image=str(image.root)), cwd=tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (ws / MANIFEST).exists()
    sb.start()
    assert sb.attached and not sb.restored
    assert sb.exec(["cat", "/tmp/paused"], timeout_s=30).stdout == b"before\n"
    assert not (ws / (SNAPSHOT + ".new")).exists()

    # Machine A: the run builds, saves its workspace before the wait and suspends.
    rt_a = torpor.Runtime(db, shared)
    try:
        res = rt_a.run("test.sandbox.workspace", None, run_id=RUN)
        assert res.status == "waiting"
        arts = {a.name: a for a in torpor.Client(rt_a.store).artifacts(RUN)}
        assert {"workspace", "workspace/snapshot"} <= set(arts)
        chunks = [n for n in arts if n.startswith("workspace/disk/")]
        assert chunks  # only chunks holding data: a 16 MiB disk is not 16 blobs
        assert len(chunks) < LIMITS.disk_mb
        store = ArtifactStore(shared)
        manifest = json.loads(store.get(arts["workspace"].sha256))
        assert manifest["snapshot"] == arts["workspace/snapshot"].sha256
        assert set(manifest["chunks"].values()) == {arts[n].sha256 for n in chunks}

        # gc (no grace) keeps every blob the waiting run refers to; an archive restored into
        # another database refers to the same blobs again.
        report = collect(rt_a.store, store, grace_s=0)
        assert report.artifacts == 0
        wanted = {a.sha256 for a in arts.values()}
        assert wanted <= rt_a.store.referenced_artifacts()
        url = archive_run(rt_a.store, RUN, str(tmp_path / "archive"))
        elsewhere = open_store(f"sqlite:///{tmp_path}/restored.db")
        try:
            restore_archive(elsewhere, url)
            assert wanted <= elsewhere.referenced_artifacts()
        finally:
            elsewhere.close()
    finally:
        rt_a.close()
    sb.kill()

    # Machine B: its own TORPOR_HOME (no workspace there), the same database and artifacts.
    # A tampered snapshot blob in the shared store is refused before anything boots.
    sb_b = HERE["sb"] = Sandbox.for_run(RUN, home=home_b, limits=LIMITS, image=image)
    assert not sb_b.workspace.exists()
    blob = Path(shared) / "sha256" / manifest["snapshot"][:2] / manifest["snapshot"]
    good = blob.read_bytes()
    blob.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    probe = Sandbox.for_run(RUN, home=home_b, limits=LIMITS, image=image)
    probe.expect(arts["workspace"].sha256, ArtifactStore(shared))
    with pytest.raises(CorruptRecordError, match="does not match its hash"):
        probe.start()
    assert not (sb_b.workspace / MANIFEST).exists()
    blob.write_bytes(good)

    rt_b = torpor.Runtime(db, shared)
    try:
        torpor.Client(rt_b.store).signal(RUN, "go")
        res = rt_b.resume(RUN)
        assert res.outcome == "succeeded", res.reason
        assert res.result == {"check": "v1\nwarm\n", "restored": True}
        got = sb_b.exec(["cat", "src/app.py"]).stdout
        assert got == b"v1\nshipped\n"
    finally:
        rt_b.close()
        sb_b.close()
