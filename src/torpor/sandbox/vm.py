"""A sandbox on QEMU's ``microvm`` machine: the guest runs its own kernel (KVM where a stock
kernel boots under it, TCG otherwise; :mod:`torpor.sandbox.host`) and a guest agent on a
virtio-serial port (:mod:`torpor.sandbox.channel`, ``guest/agent.sh``).

What the guest gets from the host: the read-only root disk of the image, its own workspace disk
(``<workspace>/disk.img``, an ext4 filesystem of ``Limits.disk_mb``), the agent's port, and a
network only when :class:`~torpor.sandbox.Network` allows named services. No shared folder, no
environment (QEMU itself starts with only ``PATH``), nothing on the kernel command line but
boot settings. Commands run as an unprivileged user in ``/work``.

Lifetime: QEMU runs in its own session, so a host process killed with SIGKILL does not kill it:
the command it was running finishes and its result is recorded on the workspace disk
(``/ws/ops/<op>``), where a new host process attached to the same workspace asks for it
(:meth:`Sandbox.status`) — how an effect is reconciled after a crash. A VM whose agent has had
no request for ``idle_s`` powers itself off; :meth:`Sandbox.close` stops it at once.

Timeouts: the guest kills a command's process group at ``timeout_s`` (``timed_out``); if the
guest has not answered ``grace_s`` after that, the host kills the VM (SandboxGoneError).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

from ..artifacts import ArtifactStore
from ..errors import IsolationUnavailableError, SandboxError, SandboxGoneError
from . import host, snapshot
from .api import Entry, ExecResult, Limits, Network, OpStatus
from .channel import Channel, b64
from .image import Image, current_image
from .workspace import checkpoint_of, materialize

_KINDS = {"f": "file", "d": "dir", "l": "link", "o": "other"}
#: How long a KVM boot may take before the probe calls KVM unusable.
KVM_PROBE_S = 30.0


def op_id(idempotency_key: str) -> str:
    """The guest's name for an op: sha256 of the idempotency key, 32 hex digits."""
    return hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]


def _quote(argv: Sequence[str]) -> str:
    """argv as one line the guest's shell ``eval``s back: POSIX single quotes, a quote as
    ``'\\''``, a newline as ``'"$NL"'`` (the guest agent sets ``NL``)."""
    return " ".join("'" + a.replace("'", "'\\''").replace("\n", "'\"$NL\"'") + "'" for a in argv)


def _arg(value: str | bytes) -> str:
    # "x" first: an empty argument still makes a token; the guest strips it.
    return b64(b"x" + (value.encode() if isinstance(value, str) else value))


class Sandbox:
    """A microVM sandbox for one workspace (see the module docstring).

    ``workspace`` is a folder of the host that holds this sandbox's disk (made on first use)
    and its VM's pid and socket; None: a temporary one, removed at :meth:`close`. Starting
    (``with Sandbox() as sb`` or :meth:`start`) attaches to the VM already running on that
    workspace, else boots one; it raises IsolationUnavailableError when no VM boundary can be
    had (no QEMU, no image), SandboxGoneError when the VM does not answer within
    ``boot_timeout_s``."""

    isolation = "vm"

    def __init__(
        self,
        workspace: str | os.PathLike[str] | None = None,
        *,
        limits: Limits = Limits(),
        network: Network | None = None,
        accel: str = "auto",
        image: Image | None = None,
        boot_timeout_s: float = 180.0,
        grace_s: float = 30.0,
        idle_s: int = 600,
    ):
        if accel not in ("auto", "kvm", "tcg"):
            raise ValueError(f"accel must be auto, kvm or tcg, got {accel!r}")
        self._temp = workspace is None
        self.workspace = (
            Path(tempfile.mkdtemp(prefix="torpor-ws-"))
            if workspace is None
            else Path(workspace).absolute()  # (QEMU runs in it: its paths are not relative)
        )
        self.limits, self.network, self.accel_wanted = limits, network, accel
        self._image, self.boot_timeout_s, self.grace_s, self.idle_s = (
            image,
            boot_timeout_s,
            grace_s,
            idle_s,
        )
        self.accel: host.Accel | None = None
        self.boot_s: float | None = None
        self.attached = False
        #: True when :meth:`start` woke this sandbox from a snapshot (:meth:`sleep`).
        self.restored = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._chan: Channel | None = None
        self._sockdir: Path | None = None
        self._finalizer: weakref.finalize[..., Sandbox] | None = None
        self._expected: tuple[str, ArtifactStore] | None = None

    @classmethod
    def for_run(
        cls, run_id: str, home: str | os.PathLike[str] | None = None, **kwargs: object
    ) -> Sandbox:
        """The sandbox whose workspace belongs to ``run_id``: ``<home>/sandboxes/<sha256>``
        (``home`` defaults to ``$TORPOR_HOME``, else ``./.torpor``)."""
        base = Path(home if home is not None else os.environ.get("TORPOR_HOME", ".torpor"))
        name = hashlib.sha256(run_id.encode()).hexdigest()[:24]
        return cls(base / "sandboxes" / name, **kwargs)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Sandbox:
        if self._chan is not None:
            return self
        try:
            image = self._image or current_image()
            reason = host.refusal_reason()
            if reason is not None or image is None:
                raise IsolationUnavailableError(reason or "the guest image is not built")
            image.verify()
            self._image = image
            self.workspace.mkdir(parents=True, exist_ok=True)
            if self._expected is not None:
                self._ensure_checkpoint(*self._expected)
            if self._attach():
                return self
            manifest = snapshot.load(self.workspace)
            if manifest is not None:
                self._wake(manifest)
                return self
            self._make_disk()
            self.accel = self._choose_accel()
            self._boot(self.accel.name, self.boot_timeout_s)
        except BaseException:
            if self._temp:  # nothing to keep of a temporary workspace that never ran
                shutil.rmtree(self.workspace, ignore_errors=True)
            raise
        return self

    def expect(self, manifest_sha256: str, artifacts: ArtifactStore) -> None:
        """Continue from the workspace manifest ``manifest_sha256`` (recorded by
        :func:`~torpor.sandbox.workspace.save_workspace`): the next :meth:`start` on a workspace
        that neither saved nor woke from it rebuilds it from ``artifacts`` first (another
        machine: :func:`~torpor.sandbox.workspace.materialize`)."""
        self._expected = (manifest_sha256, artifacts)

    def _ensure_checkpoint(self, manifest_sha256: str, artifacts: ArtifactStore) -> None:
        if checkpoint_of(self.workspace) == manifest_sha256:
            return  # saved or woke here: what this folder holds is that state or later
        if self._attach():  # a VM of another state of this workspace: not the run's
            self.kill()
        materialize(self.workspace, artifacts, manifest_sha256)

    def _attach(self) -> bool:
        """Connect to a VM still running on this workspace (its host process died)."""
        try:
            sock = Path((self.workspace / "socket").read_text().strip())
        except OSError:
            return False
        try:
            pid = int((self.workspace / "qemu.pid").read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            cmdline = b""
        if str(self.workspace / "disk.img").encode() not in cmdline or not sock.exists():
            # That VM is gone (its host was killed with it): its socket folder stays behind.
            if sock.parent.name.startswith("torpor-sb-"):
                shutil.rmtree(sock.parent, ignore_errors=True)
            return False
        try:
            # A command the dead host started may still run: the agent answers after it.
            busy_until = float((self.workspace / "inflight").read_text())
        except (OSError, ValueError):
            busy_until = 0.0
        wait_s = max(0.0, busy_until - time.time()) + self.grace_s
        # A host killed in sleep() or in a wake leaves the VM paused: continue it.
        snapshot.unpause(sock.parent / "qmp.sock", self.workspace, self.grace_s)
        try:
            chan = Channel(sock, connect_timeout_s=5)
            chan.request("PING", deadline=time.monotonic() + wait_s)
        except SandboxGoneError:
            _kill(pid, sock.parent)
            return False
        self._chan, self._pid, self._sockdir, self.attached = chan, pid, sock.parent, True
        self._finalizer = weakref.finalize(self, _kill, pid, sock.parent)
        return True

    def _make_disk(self) -> None:
        disk = self.workspace / "disk.img"
        if disk.exists():
            return
        tmp = disk.with_suffix(".new")
        with open(tmp, "wb") as f:
            f.truncate(self.limits.disk_mb << 20)
        done = subprocess.run(
            ["mke2fs", "-q", "-F", "-t", "ext4", "-L", "torpor-work", "-E", "root_owner=0:0",
             str(tmp)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SandboxError(f"mke2fs {tmp}: {done.stderr.strip()}")
        tmp.replace(disk)

    def _choose_accel(self) -> host.Accel:
        if self.accel_wanted != "auto":
            return host.Accel(self.accel_wanted, "asked for")
        recorded = host.recorded_accel()
        if recorded is not None:
            return recorded
        why = host.kvm_unusable_reason()
        if why is None:
            try:
                self._boot("kvm", KVM_PROBE_S)
                accel = host.Accel("kvm", "a stock kernel booted under KVM (probed)")
            except SandboxGoneError:
                self.kill()
                accel = host.Accel(
                    "tcg", f"a stock kernel did not boot under KVM in {KVM_PROBE_S:.0f} s (probed)"
                )
        else:
            accel = host.Accel("tcg", why)
        host.record_accel(accel)
        return accel

    def _argv(self, accel: str, sock: Path, incoming: Path | None = None) -> list[str]:
        assert self._image is not None
        lim, ws = self.limits, self.workspace
        cmdline = (
            "console=ttyS0 quiet loglevel=3 panic=-1 mitigations=off nokaslr audit=0"
            f" TORPOR_IDLE_S={self.idle_s} TORPOR_TMP_MB={lim.tmp_mb}"
            # Freed pages zeroed: migration sends a zero page as a flag, so a snapshot
            # (:meth:`sleep`) holds what the guest uses, not all it ever touched (~30% smaller).
            " init_on_free=1"
        )
        khz = host.tsc_khz()
        if accel == "tcg" and khz:
            cmdline += f" tsc=reliable tsc_early_khz={khz} lpj={khz * 4}"
        argv = [
            host.QEMU, "-M", "microvm,acpi=on", "-accel", accel, "-m", str(lim.memory_mb),
            "-smp", str(lim.cpus), "-nodefaults", "-no-user-config", "-display", "none",
            "-serial", f"file:{ws / 'console.log'}", "-no-reboot", "-pidfile", str(ws / "qemu.pid"),
            "-kernel", str(self._image.kernel), "-initrd", str(self._image.initrd),
            "-drive", f"id=root,file={self._image.rootfs},format=raw,if=none,readonly=on",
            "-device", "virtio-blk-device,drive=root",
            "-drive", f"id=ws,file={ws / 'disk.img'},format=raw,if=none",
            "-device", "virtio-blk-device,drive=ws",
            "-device", "virtio-serial-device",
            "-chardev", f"socket,id=agent,path={sock},server=on,wait=off",
            "-device", "virtserialport,chardev=agent,name=torpor.agent",
            "-qmp", f"unix:{sock.parent / 'qmp.sock'},server=on,wait=off",
        ]  # fmt: skip
        if incoming is not None:
            argv += ["-incoming", f"exec:cat {incoming}"]
        if accel == "kvm":
            argv += ["-cpu", "host"]
        if self.network is not None:
            fwd = ",".join(
                f"guestfwd=tcp:{self.network.guest_address(e)}-tcp:{e}" for e in self.network.allow
            )
            argv += ["-netdev", f"user,id=net0,restrict=on{',' + fwd if fwd else ''}"]
            argv += ["-device", "virtio-net-device,netdev=net0"]
            cmdline += " torpor.net=1"
        return [*argv, "-append", cmdline]

    def _boot(self, accel: str, timeout_s: float, incoming: Path | None = None) -> None:
        self._sockdir = Path(tempfile.mkdtemp(prefix="torpor-sb-"))
        sock = self._sockdir / "agent.sock"
        (self.workspace / "qemu.pid").unlink(missing_ok=True)
        (self.workspace / "socket").write_text(f"{sock}\n")
        (self.workspace / "accel").write_text(f"{accel}\n")
        t0 = time.monotonic()
        # QEMU gets PATH and nothing else of this process's environment.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        with open(self.workspace / "qemu.log", "wb") as log:
            self._proc = subprocess.Popen(
                self._argv(accel, sock, incoming), cwd=self.workspace, env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                start_new_session=True,
            )  # fmt: skip
        self._pid = self._proc.pid
        self._finalizer = weakref.finalize(self, _kill, self._pid, self._sockdir)
        deadline = t0 + timeout_s
        try:
            while not sock.exists():
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise SandboxGoneError(f"QEMU exited at boot: {self._log_tail()}")
                time.sleep(0.01)
            if incoming is not None:
                snapshot.resume(self._sockdir / "qmp.sock", deadline)
            self._chan = Channel(sock, connect_timeout_s=max(1.0, deadline - time.monotonic()))
            self._chan.request("PING", deadline=deadline)
        except SandboxGoneError as exc:
            self.kill()
            raise SandboxGoneError(
                f"sandbox did not boot ({accel}): {exc}; {self._log_tail()}"
            ) from None
        self.boot_s = time.monotonic() - t0

    def _log_tail(self) -> str:
        lines: list[str] = []
        for name in ("qemu.log", "console.log"):
            with contextlib.suppress(OSError):
                text = (self.workspace / name).read_text(errors="replace")
                lines += text.strip().splitlines()[-2:]
        return " | ".join(lines) or "no output"

    # ------------------------------------------------------------------ sleep and wake

    def _facts(self) -> dict[str, object]:
        """What a snapshot needs of the VM that takes it (:func:`snapshot.verify`)."""
        assert self._image is not None
        lim = self.limits
        allow = list(self.network.allow) if self.network is not None else None
        return {"image_key": self._image.key, "memory_mb": lim.memory_mb, "cpus": lim.cpus,
                "network": allow}  # fmt: skip

    @property
    def running(self) -> bool:
        """Whether this object has a VM to talk to (started, not stopped, slept or killed)."""
        return self._chan is not None

    def sleep(self, timeout_s: float = 120.0) -> dict[str, object]:
        """Put the running VM to sleep: the guest syncs its disks, QEMU migrates its memory and
        device state to ``<workspace>/snapshot.bin`` and quits; the manifest
        (``snapshot.json``: both hashes, the machine it needs) is written last and returned.
        The next :meth:`start` on this workspace (a new process too, e.g. :meth:`for_run`)
        restores it, hash-checked. Raises SandboxGoneError when the VM is not running,
        SandboxSnapshotError when the migration fails (the VM then runs on)."""
        if self._chan is None or self._sockdir is None:
            raise SandboxGoneError("sleep: the sandbox is not running")
        self.exec(["sync"], timeout_s=30)
        facts = self._facts()
        try:
            accel = (self.workspace / "accel").read_text().strip()
        except OSError:
            accel = self.accel.name if self.accel is not None else "tcg"
        snapshot.migrate_out(self._sockdir / "qmp.sock", self.workspace, timeout_s)
        deadline = time.monotonic() + self.grace_s
        while self._pid is not None and _alive(self._pid) and time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                break
            time.sleep(0.01)
        self.kill()
        return snapshot.seal(self.workspace, facts | {"accel": accel})

    def workspace_digest(self) -> str:
        """The workspace disk's content digest (:func:`snapshot.disk_digest`) as the host sees
        it now: after an op the guest has synced, so it holds what that op left (ext4 may write its
        journal later: a digest of a running VM's disk is of that moment, not of the files)."""
        return snapshot.disk_digest(self.workspace / "disk.img")

    def _wake(self, manifest: dict[str, object]) -> None:
        snapshot.verify(self.workspace, manifest, self._facts())
        # Gone before the VM runs: a snapshot is never restored onto a disk that moved on.
        (self.workspace / snapshot.MANIFEST).unlink()
        snap = self.workspace / snapshot.SNAPSHOT
        self.accel = host.Accel(str(manifest["accel"]), "the snapshot was saved under it")
        try:
            self._boot(self.accel.name, self.boot_timeout_s, incoming=snap)
        finally:  # restored or not, the stream is spent (the disk stays: a cold boot uses it)
            snap.unlink(missing_ok=True)
        self.restored = True

    def kill(self) -> None:
        """Stop the VM at once (SIGKILL to QEMU); the workspace disk stays."""
        if self._chan is not None:
            self._chan.close()
            self._chan = None
        if self._finalizer is not None:
            self._finalizer()
        if self._proc is not None:
            self._proc.wait()
        self._proc = self._pid = None

    def close(self) -> None:
        """Stop the VM (the guest syncs and powers off; killed if it does not) and, for a
        temporary workspace, remove it."""
        if self._chan is not None:
            try:
                self._chan.request("QUIT", deadline=time.monotonic() + self.grace_s)
                if self._proc is not None:
                    self._proc.wait(timeout=self.grace_s)
                elif self._pid is not None:  # attached: not our child, watch it go
                    deadline = time.monotonic() + self.grace_s
                    while _alive(self._pid) and time.monotonic() < deadline:
                        time.sleep(0.02)
            except (SandboxGoneError, subprocess.TimeoutExpired):
                pass
        self.kill()
        if self._temp:
            shutil.rmtree(self.workspace, ignore_errors=True)

    # ------------------------------------------------------------------ the agent's verbs

    def _call(
        self, header: str, payload: bytes = b"", wait_s: float = 0.0
    ) -> tuple[str, list[str]]:
        if self._chan is None:
            raise SandboxGoneError("the sandbox is not running (start it, or it was stopped)")
        deadline = time.monotonic() + wait_s + self.grace_s
        try:
            kind, fields = self._chan.request(header, payload, deadline=deadline)
        except SandboxGoneError as exc:
            self.kill()
            raise SandboxGoneError(f"sandbox VM killed: {exc}") from None
        if kind == "err":
            raise SandboxError(_unb64(fields[0]) if fields else "the guest agent failed")
        return kind, fields

    def _read(self, n: int) -> bytes:
        assert self._chan is not None
        return self._chan.read_exact(n, deadline=time.monotonic() + self.grace_s)

    def _result(self, f: list[str]) -> ExecResult:
        code, tmo, replayed, ot, et, ol, el = (int(x) for x in f[:7])
        out, err = self._read(ol), self._read(el)
        return ExecResult(code, out, err, tmo == 1, replayed == 1, ot > ol, et > el, "vm")

    def exec(
        self,
        argv: Sequence[str],
        stdin: bytes | str = b"",
        timeout_s: float = 60.0,
        *,
        op: str | None = None,
        read_only: bool = False,
    ) -> ExecResult:
        """Run ``argv`` in the guest (no shell unless argv asks for one), in ``/work``, as the
        unprivileged ``agent`` user, with ``stdin``. ``op`` (see :func:`op_id`) makes it an
        effect the guest runs at most once: a repeat answers the recorded result
        (``replayed``); an op started by a VM that died is refused (SandboxError).
        ``read_only`` mounts the workspace read-only for the command."""
        if not argv:
            raise ValueError("exec: argv is empty")
        if any("\0" in a for a in argv):
            raise ValueError("exec: an argv element holds a NUL byte")
        data = stdin.encode() if isinstance(stdin, str) else stdin
        secs = max(1, math.ceil(timeout_s))
        cap = self.limits.max_output_bytes
        head = f"EXEC {op or '-'} {secs} {int(read_only)} {cap} {len(data)} {_quote(argv)}"
        inflight = self.workspace / "inflight"
        inflight.write_text(f"{time.time() + secs + self.grace_s}\n")
        try:
            kind, fields = self._call(head, data, wait_s=secs)
        finally:
            inflight.unlink(missing_ok=True)
        if kind == "unknown":
            raise SandboxError(
                f"op {op} started in a VM that died before it ended: it may have run partly"
            )
        return self._result(fields)

    def status(self, op: str) -> OpStatus:
        """What the guest's ledger says of ``op``: absent, started or done (with the result)."""
        _, fields = self._call(f"STATUS {op} {self.limits.max_output_bytes}")
        if fields[0] == "done":
            return OpStatus("done", self._result(fields[1:]))
        return OpStatus(fields[0])

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> str:
        """Write ``data`` to ``path`` (relative to ``/work``; parents made) as the agent user;
        returns the sha256 of what was written."""
        raw = data.encode() if isinstance(data, str) else data
        _, fields = self._call(f"WRITE {mode:o} {len(raw)} {_arg(path)}", raw)
        return fields[0]

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """The bytes of ``path`` (relative to ``/work``), read as the agent user; a file over
        ``max_bytes`` (default ``Limits.max_output_bytes``) raises SandboxError."""
        cap = max_bytes or self.limits.max_output_bytes
        _, fields = self._call(f"READ {cap} {_arg(path)}")
        total, n = int(fields[0]), int(fields[1])
        data = self._read(n)
        if total > n:
            raise SandboxError(f"read {path}: {total} bytes, over max_bytes={cap}")
        return data

    def ls(self, path: str = ".") -> list[Entry]:
        """The entries of the directory ``path`` (relative to ``/work``), sorted by name."""
        _, fields = self._call(f"LS {_arg(path)}")
        out = []
        for line in self._read(int(fields[0])).decode().splitlines():
            kind, size, name = line.split(" ")
            out.append(Entry(_unb64(name), _KINDS.get(kind, "other"), int(size)))
        return sorted(out, key=lambda e: e.name)


def _unb64(token: str) -> str:
    return base64.b64decode(token).decode(errors="replace")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no one reaps yet counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _kill(pid: int, sockdir: Path) -> None:
    """SIGKILL the QEMU ``pid`` if it is still the one serving ``sockdir`` (never a reused pid)."""
    try:
        if str(sockdir).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)
    except (OSError, ProcessLookupError):
        pass
    shutil.rmtree(sockdir, ignore_errors=True)
