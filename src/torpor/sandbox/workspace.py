"""Workspaces as artifacts of their run (issue 44): a sleeping workspace — its disk, the VM's
saved state and the sleep manifest — copied into the run's artifact store and recorded as the
run's artifacts, so retention, ``torpor gc`` and archives cover them, and a run resumed on
another machine (another ``TORPOR_HOME``, the same database and artifact store) finds exactly
the workspace it slept with.

:func:`save_workspace` is one recorded step of the run (``sandbox:save:<name>``):

1. the VM is put to sleep (:meth:`~torpor.sandbox.Sandbox.sleep`; a VM not running is started
   first, so the state saved is always a stopped VM's);
2. the disk is cut into 1 MiB chunks (:data:`torpor.sandbox.snapshot.CHUNK`); a chunk that is a
   hole or all zeros is not stored, every other one is a blob named by its sha256 — a chunk
   stored by an earlier save (of any run) is not written again;
3. the migration stream (``snapshot.bin``) is one blob, and the workspace manifest (JSON: the
   sleep manifest, the disk's size and its chunks' hashes, the stream's hash) another;
4. the step records one ``artifact_created`` per blob that is new to this run: ``<name>`` (the
   manifest), ``<name>/snapshot``, ``<name>/disk/<chunk index>`` (a new version when that chunk
   changed). Every blob is referenced by the run before it is written (the in-flight pin of
   :meth:`~torpor.store.maintenance.MaintenanceStore.pin_blob`).

On replay the step returns what it recorded and tells the sandbox which workspace the run must
continue from (:meth:`~torpor.sandbox.Sandbox.expect`): the next start on a machine whose
workspace is not that one (no workspace, or one that never saved or woke from that manifest:
``checkpoint`` in the workspace folder names the last) rebuilds it from the artifact store
(:func:`materialize`) — every blob hash-checked as it is read (a tampered blob is refused:
CorruptRecordError), then the stream and the disk checked against the sleep manifest before
QEMU reads a byte — and wakes it.
A workspace that did move on from that manifest (it woke from it, here) is used as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..artifacts import ArtifactStore
from ..errors import SandboxSnapshotError
from ..history import ArtifactCreated, Policy
from . import snapshot

if TYPE_CHECKING:
    from ..run import Run

#: The workspace manifest's format tag.
FORMAT = "torpor.workspace/1"
#: The file in a workspace folder naming the workspace manifest it last saved or woke from.
CHECKPOINT = "checkpoint"

Pin = Callable[[str, int], None]


class Sleeper(Protocol):
    """What :func:`save_workspace` needs of a sandbox (:class:`~torpor.sandbox.Sandbox`)."""

    workspace: Path

    def start(self) -> Any: ...
    def sleep(self, timeout_s: float = ...) -> dict[str, object]: ...
    def expect(self, manifest_sha256: str, artifacts: ArtifactStore) -> None: ...


def _put(artifacts: ArtifactStore, data: bytes, pin: Pin) -> str:
    digest = hashlib.sha256(data).hexdigest()
    pin(digest, len(data))
    artifacts.put(data)
    return digest


def pack(workspace: Path, artifacts: ArtifactStore, pin: Pin) -> tuple[bytes, dict[str, Any]]:
    """Copy the sleeping workspace in ``workspace`` into ``artifacts`` (``pin(sha256, size)``
    called before each blob is written). Returns the workspace manifest's JSON bytes (not yet
    stored) and the manifest. SandboxSnapshotError when the workspace is not asleep."""
    sleep = snapshot.load(workspace)
    if sleep is None:
        raise SandboxSnapshotError(f"workspace {workspace}: not asleep, nothing to save")
    disk = workspace / "disk.img"
    chunks: dict[str, str] = {}
    sizes: dict[str, int] = {}
    with open(disk, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        while pos < size:
            try:
                data_at = os.lseek(f.fileno(), pos, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole is left
                break
            first = data_at - data_at % snapshot.CHUNK
            f.seek(first)
            chunk = f.read(snapshot.CHUNK)
            if chunk.count(0) != len(chunk):
                index = str(first // snapshot.CHUNK)
                chunks[index] = _put(artifacts, chunk, pin)
                sizes[index] = len(chunk)
            pos = first + snapshot.CHUNK
    stream = (workspace / snapshot.SNAPSHOT).read_bytes()
    manifest = {
        "format": FORMAT,
        "sleep": sleep,
        "disk_size": size,
        "chunk": snapshot.CHUNK,
        "chunks": chunks,
        "chunk_sizes": sizes,
        "snapshot": _put(artifacts, stream, pin),
        "snapshot_size": len(stream),
    }
    return json.dumps(manifest, sort_keys=True).encode(), manifest


def materialize(workspace: Path, artifacts: ArtifactStore, manifest_sha256: str) -> None:
    """Rebuild a sleeping workspace in ``workspace`` from the workspace manifest
    ``manifest_sha256`` in ``artifacts``: the disk (sparse: zero chunks stay holes), the stream
    and the sleep manifest, each file written under a temporary name first; whatever the folder
    held before is replaced. Every blob is hash-checked as it is read (CorruptRecordError for a
    tampered one, TorporError for a missing one); the next start checks the stream and the disk
    against the sleep manifest (:func:`torpor.sandbox.snapshot.verify`)."""
    manifest = json.loads(artifacts.get(manifest_sha256))
    if manifest.get("format") != FORMAT:
        raise SandboxSnapshotError(
            f"artifact sha256:{manifest_sha256} is not a workspace manifest "
            f"(format {manifest.get('format')!r})"
        )
    workspace.mkdir(parents=True, exist_ok=True)
    for name in (snapshot.MANIFEST, snapshot.SNAPSHOT, CHECKPOINT, "socket", "qemu.pid"):
        (workspace / name).unlink(missing_ok=True)
    tmp = workspace / "disk.img.restore"
    with open(tmp, "wb") as f:
        f.truncate(int(manifest["disk_size"]))
        for index, digest in sorted(manifest["chunks"].items(), key=lambda kv: int(kv[0])):
            f.seek(int(index) * int(manifest["chunk"]))
            f.write(artifacts.get(digest))
    stream = workspace / (snapshot.SNAPSHOT + ".restore")
    stream.write_bytes(artifacts.get(manifest["snapshot"]))
    tmp.replace(workspace / "disk.img")
    stream.replace(workspace / snapshot.SNAPSHOT)
    new = workspace / (snapshot.MANIFEST + ".new")
    new.write_text(json.dumps(manifest["sleep"], indent=1, sort_keys=True) + "\n")
    new.replace(workspace / snapshot.MANIFEST)
    mark_checkpoint(workspace, manifest_sha256)


def checkpoint_of(workspace: Path) -> str | None:
    """The workspace manifest ``workspace`` last saved or woke from, or None."""
    try:
        return (workspace / CHECKPOINT).read_text().strip() or None
    except OSError:
        return None


def mark_checkpoint(workspace: Path, manifest_sha256: str) -> None:
    new = workspace / (CHECKPOINT + ".new")
    new.write_text(manifest_sha256 + "\n")
    new.replace(workspace / CHECKPOINT)


def save_workspace(run: Run, sandbox: Sleeper, name: str = "workspace") -> dict[str, Any]:
    """Put ``sandbox`` to sleep and record its workspace as artifacts of ``run`` (see the module
    docstring): one step, ``sandbox:save:<name>``. Returns (and records) ``{"manifest": sha256,
    "size": bytes, "disk_digest": ..., "snapshot_sha256": ..., "chunks": n, "new_blobs": n}``.
    On replay the recorded value is returned and the sandbox is told to continue from it
    (:meth:`~torpor.sandbox.Sandbox.expect`); nothing is saved again. The next call of a
    sandbox tool wakes the VM (or rebuilds the workspace from the artifact store first, on
    another machine)."""
    j = run.journal
    sid = j.next_id(f"sandbox:save:{name}")
    j.boundary()
    artifacts = j.host.artifacts
    done = j.recorded(sid, Policy.COMPUTE)
    if done is not None:
        result: dict[str, Any] = dict(done.result)
        sandbox.expect(str(result["manifest"]), artifacts)
        return result
    if snapshot.load(sandbox.workspace) is None:
        sandbox.start()  # not running (nor asleep): boots on its disk, so a stopped VM is saved
        sandbox.sleep()

    def pin(digest: str, size: int) -> None:
        j.store.pin_blob(j.run_id, digest, size)

    raw, manifest = pack(sandbox.workspace, artifacts, pin)
    digest = _put(artifacts, raw, pin)
    have = j.state.artifacts
    wanted = {name: (digest, len(raw), "application/json")}
    wanted[f"{name}/snapshot"] = (manifest["snapshot"], manifest["snapshot_size"], "")
    for index, sha in manifest["chunks"].items():
        wanted[f"{name}/disk/{int(index):05d}"] = (sha, manifest["chunk_sizes"][index], "")
    facts = []
    for art, (sha, size, media) in wanted.items():
        prev = have.get(art)
        if prev is not None and prev.sha256 == sha:
            continue  # the run holds this blob already (an unchanged chunk)
        facts.append(
            ArtifactCreated(
                name=art,
                sha256=sha,
                version=(prev.version + 1) if prev else 1,
                size=size,
                media_type=media or "application/octet-stream",
                step_id=sid,
            )
        )
    result = {
        "manifest": digest,
        "size": len(raw),
        "disk_digest": manifest["sleep"]["disk_digest"],
        "snapshot_sha256": manifest["snapshot"],
        "chunks": len(manifest["chunks"]),
        "new_blobs": len(facts),
    }
    purpose = f"save the sandbox workspace as artifacts {name}/*"
    j.append(*j.step_events(sid, Policy.COMPUTE, result, facts, purpose))
    mark_checkpoint(sandbox.workspace, digest)
    sandbox.expect(digest, artifacts)
    return result
