"""Sleep and wake for a sandbox (issue 44): the VM's memory and device state saved to a file
with QEMU's migration (``migrate "exec:cat > snapshot.bin"`` over QMP, QEMU's documented way to
save a VM to a file) and started again from it (``-incoming "exec:cat snapshot.bin"``), next to
its workspace disk. A sleeping sandbox is two files in its workspace and no process:

- ``snapshot.bin`` — the migration stream (zero pages are sent as a flag, so it holds about as
  much as the guest has touched; keep ``Limits.memory_mb`` small);
- ``snapshot.json`` — the manifest: the stream's sha256, the workspace disk's digest taken while
  the VM was stopped (:func:`disk_digest`), and what the VM must be started with to take the
  stream (the image's key, accelerator, memory, cpus, network).

Waking checks both hashes before QEMU reads a byte: a snapshot or a disk changed while asleep is
refused (SandboxSnapshotError, naming which). The manifest is removed before the VM is resumed,
so a stale snapshot is never restored onto a disk that has moved on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from ..errors import SandboxGoneError, SandboxSnapshotError

SNAPSHOT = "snapshot.bin"
MANIFEST = "snapshot.json"
#: Chunk size of :func:`disk_digest`, bytes.
CHUNK = 1 << 20
_ZERO = bytes(CHUNK)
_ZERO_MARK = b"\0" * 32


def disk_digest(path: Path) -> str:
    """A content digest of the (sparse) file ``path``: sha256 over the sha256 of each 1 MiB
    chunk, where a chunk that is a hole or all zeros counts as 32 zero bytes — the same for the
    same bytes however the file is allocated, and read only where it holds data (SEEK_DATA/
    SEEK_HOLE). Prefixed ``c1m:`` (the chunking)."""
    outer = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        outer.update(f"{size}\n".encode())
        pos = 0
        while pos < size:
            try:
                data_at = os.lseek(f.fileno(), pos, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole is left
                data_at = size
            first = data_at - data_at % CHUNK
            for _ in range(pos, first, CHUNK):
                outer.update(_ZERO_MARK)
            if first >= size:
                break
            f.seek(first)
            chunk = f.read(CHUNK)
            outer.update(_ZERO_MARK if chunk == _ZERO[: len(chunk)] else _sha(chunk))
            pos = first + CHUNK
    return "c1m:" + outer.hexdigest()


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


class QMP:
    """A minimal client of QEMU's machine protocol on a unix socket (JSON lines; the greeting,
    then ``qmp_capabilities``). Raises SandboxGoneError when QEMU is not there."""

    def __init__(self, path: Path, timeout_s: float = 30.0):
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        try:
            self._sock.connect(str(path))
        except OSError as exc:
            self._sock.close()
            raise SandboxGoneError(f"QMP socket {path}: {exc}") from None
        self._file = self._sock.makefile("rb")
        self._next()  # the greeting
        self.call("qmp_capabilities")

    def _next(self) -> dict[str, Any]:
        while True:
            try:
                line = self._file.readline()
            except OSError as exc:
                raise SandboxGoneError(f"QMP: {exc}") from None
            if not line:
                raise SandboxGoneError("QMP: QEMU closed the socket")
            msg: dict[str, Any] = json.loads(line)
            if "event" not in msg:
                return msg

    def call(self, command: str, **arguments: object) -> Any:
        """Run ``command``; its ``return`` value, or SandboxSnapshotError with QEMU's error."""
        msg: dict[str, object] = {"execute": command}
        if arguments:
            msg["arguments"] = arguments
        try:
            self._sock.sendall(json.dumps(msg).encode() + b"\n")
        except OSError as exc:
            raise SandboxGoneError(f"QMP: {exc}") from None
        reply = self._next()
        if "error" in reply:
            raise SandboxSnapshotError(f"QMP {command}: {reply['error'].get('desc', reply)}")
        return reply.get("return")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
            self._sock.close()


def migrate_out(qmp_path: Path, workspace: Path, timeout_s: float) -> None:
    """Stop the VM behind ``qmp_path``, migrate its state to ``<workspace>/snapshot.bin.new``
    and make QEMU quit (:func:`seal` then hashes it). Raises SandboxSnapshotError when the
    migration fails or does not end in ``timeout_s`` (the VM is continued)."""
    tmp = workspace / (SNAPSHOT + ".new")
    qmp = QMP(qmp_path, timeout_s)
    try:
        qmp.call("stop")
        qmp.call("migrate", uri=f"exec:cat > {tmp}")
        deadline = time.monotonic() + timeout_s
        while True:
            state = qmp.call("query-migrate").get("status")
            if state == "completed":
                break
            if state in ("failed", "cancelled") or time.monotonic() > deadline:
                qmp.call("cont")
                tmp.unlink(missing_ok=True)
                raise SandboxSnapshotError(f"snapshot of {workspace}: migration {state}")
            time.sleep(0.01)
        with contextlib.suppress(SandboxGoneError):
            qmp.call("quit")
    finally:
        qmp.close()


def resume(qmp_path: Path, deadline: float) -> None:
    """Continue a VM started with ``-incoming`` once its state is in: a VM saved stopped stays
    paused after the migration (QEMU migrates the run state), so ``cont`` it. Raises
    SandboxGoneError when QEMU is not there or the stream is not in by ``deadline``
    (``time.monotonic()``)."""
    while not qmp_path.exists():
        if time.monotonic() > deadline:
            raise SandboxGoneError(f"QMP socket {qmp_path} did not appear")
        time.sleep(0.005)
    while True:  # the socket exists from QEMU's bind(), it answers from its listen()
        try:
            qmp = QMP(qmp_path, max(1.0, deadline - time.monotonic()))
            break
        except SandboxGoneError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    try:
        while qmp.call("query-status").get("status") == "inmigrate":
            if time.monotonic() > deadline:
                raise SandboxGoneError("the snapshot was not read in time")
            time.sleep(0.005)
        state = qmp.call("query-migrate").get("status")
        if state != "completed":
            raise SandboxGoneError(f"restoring the snapshot: migration {state}")
        qmp.call("cont")
    finally:
        qmp.close()


#: Run states of a VM stopped by :func:`migrate_out` or not yet continued by :func:`resume`.
PAUSED = frozenset({"paused", "postmigrate", "finish-migrate", "prelaunch"})


def unpause(qmp_path: Path, workspace: Path, timeout_s: float) -> str | None:
    """Continue the VM behind ``qmp_path`` if a host that died left it paused: in
    :meth:`~torpor.sandbox.Sandbox.sleep` (stopped, its state being or already written, never
    sealed: the outgoing migration is cancelled, its unsealed stream deleted) or in a wake
    (``-incoming`` read in, never continued). Returns the run state it found (None: no QMP
    socket, or QEMU did not answer — the caller's ping decides). A VM that runs is left alone."""
    if not qmp_path.exists():
        return None
    try:
        qmp = QMP(qmp_path, timeout_s)
    except (SandboxGoneError, OSError):
        return None
    deadline = time.monotonic() + timeout_s
    try:
        status = str(qmp.call("query-status").get("status"))
        while status == "inmigrate" and time.monotonic() < deadline:  # a wake still reading
            time.sleep(0.01)
            status = str(qmp.call("query-status").get("status"))
        outgoing = (qmp.call("query-migrate") or {}).get("status")
        if status != "inmigrate" and outgoing in ("setup", "active", "device", "pre-switchover"):
            qmp.call("migrate_cancel")
            while (qmp.call("query-migrate") or {}).get("status") not in (
                "cancelled",
                "failed",
                "completed",
            ) and time.monotonic() < deadline:
                time.sleep(0.01)
            status = str(qmp.call("query-status").get("status"))
        if status in PAUSED:
            qmp.call("cont")
        (workspace / (SNAPSHOT + ".new")).unlink(missing_ok=True)
        if load(workspace) is None:  # a wake's stream, spent once the VM runs
            (workspace / SNAPSHOT).unlink(missing_ok=True)
        return status
    except (SandboxGoneError, SandboxSnapshotError, OSError, ValueError):
        return None
    finally:
        qmp.close()


def seal(workspace: Path, facts: dict[str, object]) -> dict[str, object]:
    """After QEMU has gone: hash the stream and the disk, move the stream into place and write
    the manifest (atomically, last). Returns the manifest."""
    tmp = workspace / (SNAPSHOT + ".new")
    manifest = {
        **facts,
        "format": 1,
        "snapshot_sha256": file_sha256(tmp),
        "disk_digest": disk_digest(workspace / "disk.img"),
        "saved_at": time.time(),
    }
    tmp.replace(workspace / SNAPSHOT)
    new = workspace / (MANIFEST + ".new")
    new.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    new.replace(workspace / MANIFEST)
    return manifest


def load(workspace: Path) -> dict[str, Any] | None:
    """The manifest of a sleeping sandbox in ``workspace``, or None (not asleep)."""
    try:
        manifest: dict[str, Any] = json.loads((workspace / MANIFEST).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SandboxSnapshotError(f"{workspace / MANIFEST}: unreadable ({exc})") from None
    return manifest


def verify(workspace: Path, manifest: dict[str, Any], facts: dict[str, object]) -> None:
    """Refuse (SandboxSnapshotError, naming what differs) a snapshot whose stream or disk does
    not match its manifest, or that needs another image, accelerator or machine than ``facts``."""
    for key, want in facts.items():
        if manifest.get(key) != want:
            raise SandboxSnapshotError(
                f"snapshot in {workspace}: saved with {key}={manifest.get(key)!r}, "
                f"this sandbox has {want!r}"
            )
    snap = workspace / SNAPSHOT
    if not snap.is_file() or file_sha256(snap) != manifest.get("snapshot_sha256"):
        raise SandboxSnapshotError(f"snapshot {snap}: does not match its sha256 (tampered?)")
    if disk_digest(workspace / "disk.img") != manifest.get("disk_digest"):
        raise SandboxSnapshotError(
            f"snapshot in {workspace}: disk.img changed while the sandbox slept"
        )


def footprint(workspace: Path) -> int:
    """Bytes on disk (allocated blocks) of a workspace folder."""
    return sum(p.lstat().st_blocks * 512 for p in workspace.rglob("*") if p.is_file())
