"""``isolation="process"``: the sandbox's verbs in a child process of this user, for
development on a machine without QEMU. **There is no isolation**: the command can read and
write whatever this user can, and reach the network. It is labelled as such everywhere — a
warning when it starts, a line on stderr, ``isolation="process"`` on every result — and
exists so an agent's tools can be developed before a VM boundary is set up, never to run
code one does not trust (G15: torpor refuses to run without a VM boundary unless told this).

The verbs and the effect ledger behave as the VM's (:class:`~torpor.sandbox.Sandbox`): the
workspace is ``<workspace>/files`` (the command's cwd; paths outside it are refused), ops are
recorded in ``<workspace>/ops/<op>.json`` before and after they run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

from ..errors import SandboxError
from .api import Entry, ExecResult, Limits, OpStatus

BANNER = (
    "torpor: isolation='process': agent code runs WITHOUT a VM boundary, as this user "
    "(development only)"
)


class ProcessSandbox:
    """The sandbox's verbs without isolation; see the module docstring."""

    isolation = "process"

    def __init__(
        self, workspace: str | os.PathLike[str] | None = None, *, limits: Limits = Limits()
    ):
        self._temp = workspace is None
        self.workspace = (
            Path(tempfile.mkdtemp(prefix="torpor-ws-")) if workspace is None else Path(workspace)
        )
        self.limits = limits
        self.files, self.ops = self.workspace / "files", self.workspace / "ops"
        self._started = False

    def __enter__(self) -> ProcessSandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> ProcessSandbox:
        if self._started:
            return self
        self._started = True
        warnings.warn(BANNER, RuntimeWarning, stacklevel=2)
        print(BANNER, file=sys.stderr)
        self.files.mkdir(parents=True, exist_ok=True)
        self.ops.mkdir(parents=True, exist_ok=True)
        return self

    def close(self) -> None:
        if self._temp:
            shutil.rmtree(self.workspace, ignore_errors=True)

    def workspace_digest(self) -> str:
        """A content digest of the workspace's files: sha256 over each file's relative path,
        mode and sha256, in path order (prefixed ``tree:``)."""
        h = hashlib.sha256()
        for p in sorted(self.files.rglob("*")):
            if p.is_file() and not p.is_symlink():
                rel = p.relative_to(self.files).as_posix()
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
                h.update(f"{rel}\0{p.stat().st_mode & 0o777:o}\0{digest}\n".encode())
        return "tree:" + h.hexdigest()

    def _path(self, path: str) -> Path:
        p = (self.files / path).resolve()
        if not p.is_relative_to(self.files.resolve()):
            raise SandboxError(f"{path}: outside the workspace")
        return p

    def exec(
        self,
        argv: Sequence[str],
        stdin: bytes | str = b"",
        timeout_s: float = 60.0,
        *,
        op: str | None = None,
        read_only: bool = False,
    ) -> ExecResult:
        """As :meth:`Sandbox.exec`; ``read_only`` is not enforced here (no isolation)."""
        if not argv:
            raise ValueError("exec: argv is empty")
        record = self.ops / f"{op}.json" if op else None
        if record is not None and record.exists():
            done = json.loads(record.read_text())
            if done.get("state") != "done":
                raise SandboxError(
                    f"op {op} started by a process that died before it ended: "
                    "it may have run partly"
                )
            return _replayed(done["result"])
        if record is not None:
            record.write_text(json.dumps({"state": "started"}))
        data = stdin.encode() if isinstance(stdin, str) else stdin
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.files), "LANG": "C"}
        proc = subprocess.Popen(
            list(argv), cwd=self.files, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        timed_out = False
        try:
            out, err = proc.communicate(data, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            timed_out = True
        code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        cap = self.limits.max_output_bytes
        result = ExecResult(
            code, out[:cap], err[:cap], timed_out, False, len(out) > cap, len(err) > cap, "process"
        )
        if record is not None:
            rec = {
                "state": "done",
                "result": {
                    **result.as_dict(),
                    "stdout": out[:cap].hex(),
                    "stderr": err[:cap].hex(),
                },
            }
            record.write_text(json.dumps(rec))
        return result

    def status(self, op: str) -> OpStatus:
        record = self.ops / f"{op}.json"
        if not record.exists():
            return OpStatus("absent")
        done = json.loads(record.read_text())
        if done.get("state") != "done":
            return OpStatus("started")
        return OpStatus("done", _replayed(done["result"]))

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> str:
        raw = data.encode() if isinstance(data, str) else data
        p = self._path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(raw)
        p.chmod(mode)
        return hashlib.sha256(raw).hexdigest()

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        cap = max_bytes or self.limits.max_output_bytes
        p = self._path(path)
        try:
            size = p.stat().st_size
            if size > cap:
                raise SandboxError(f"read {path}: {size} bytes, over max_bytes={cap}")
            return p.read_bytes()
        except OSError as exc:
            raise SandboxError(f"read {path}: {exc.strerror}") from None

    def ls(self, path: str = ".") -> list[Entry]:
        p = self._path(path)
        try:
            items = list(p.iterdir())
        except OSError as exc:
            raise SandboxError(f"ls {path}: {exc.strerror}") from None
        out = []
        for q in items:
            kind = (
                "link"
                if q.is_symlink()
                else "dir"
                if q.is_dir()
                else "file"
                if q.is_file()
                else "other"
            )
            out.append(Entry(q.name, kind, q.lstat().st_size))
        return sorted(out, key=lambda e: e.name)


def _replayed(r: dict[str, object]) -> ExecResult:
    return ExecResult(
        int(r["exit_code"]),  # type: ignore[call-overload]
        bytes.fromhex(str(r["stdout"])),
        bytes.fromhex(str(r["stderr"])),
        bool(r["timed_out"]),
        True,
        bool(r["truncated"]),
        False,
        "process",
    )
