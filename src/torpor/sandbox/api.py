"""The shapes a sandbox answers with, whatever its isolation (``vm`` or ``process``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """What one sandbox may use: ``cpus`` (QEMU ``-smp``), ``memory_mb`` (guest RAM),
    ``disk_mb`` (the workspace filesystem's size; a command that fills it gets ENOSPC),
    ``tmp_mb`` (the guest's ``/tmp``, a tmpfs counted in its RAM) and ``max_output_bytes``
    (per stream of one exec; more is cut, ``stdout_truncated``/``stderr_truncated`` say so)."""

    cpus: int = 1
    memory_mb: int = 256
    disk_mb: int = 256
    tmp_mb: int = 64
    max_output_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        for name in ("cpus", "memory_mb", "disk_mb", "tmp_mb", "max_output_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} must be at least 1, got {getattr(self, name)}")
        if self.memory_mb < 128:
            raise ValueError(
                f"Limits.memory_mb: the guest kernel needs 128 MB, got {self.memory_mb}"
            )


@dataclass(frozen=True)
class Network:
    """Opt-in network: only the listed ``host:port`` TCP services are reachable, each at a
    guest address of its own (:meth:`guest_address`); everything else (the host, the LAN, the
    internet, DNS) is not. QEMU's user network with ``restrict=on`` and one ``guestfwd`` per
    entry (QEMU's documented way to isolate a guest but for named forwards)."""

    allow: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for entry in self.allow:
            host, _, port = entry.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"Network.allow: {entry!r} is not host:port")

    def guest_address(self, entry: str) -> str:
        """``ip:port`` at which the guest reaches ``entry`` (one of :attr:`allow`)."""
        return f"10.0.2.{100 + self.allow.index(entry)}:{entry.rpartition(':')[2]}"


@dataclass(frozen=True)
class ExecResult:
    """One command's end: ``exit_code`` (128+N when killed by signal N), its output,
    ``timed_out`` (killed at its timeout), ``replayed`` (the recorded result of an op that had
    already run: the command did not run again) and the ``isolation`` it ran under."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    replayed: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    isolation: str = "vm"

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def as_dict(self) -> dict[str, object]:
        """A JSON-able record (output decoded as UTF-8 with replacement)."""
        return {
            "exit_code": self.exit_code,
            "stdout": self.stdout.decode(errors="replace"),
            "stderr": self.stderr.decode(errors="replace"),
            "timed_out": self.timed_out,
            "replayed": self.replayed,
            "truncated": self.stdout_truncated or self.stderr_truncated,
            "isolation": self.isolation,
        }


@dataclass(frozen=True)
class OpStatus:
    """What the guest knows of an op (an exec with an idempotency key): ``absent`` (never
    reached the guest), ``started`` (began, and the VM that ran it died before it ended) or
    ``done`` (``result`` is what it returned)."""

    state: str
    result: ExecResult | None = None


@dataclass(frozen=True)
class Entry:
    """One directory entry: ``kind`` is ``file``, ``dir``, ``link`` or ``other``; ``size``
    in bytes."""

    name: str
    kind: str
    size: int
