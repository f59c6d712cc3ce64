"""Lease owner identity: who holds a run, and whether that holder provably died.

An owner id is ``host:pid:random~boot~pidns~start`` (Linux; ``host:pid:random`` elsewhere). The
suffix lets :func:`owner_is_dead` tell a dead local process from a live one in another PID
namespace with the same hostname, and from a later process reusing the pid — so a local resume
takes over right after ``kill -9`` instead of waiting out the lease, and anything not provably
dead is left to lease expiry. Pure OS facts (``/proc``, ``os.kill(pid, 0)``); no torpor state.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path


def _proc_identity(pid: int | str = "self") -> tuple[str, str, str] | None:
    """(boot id, pid-namespace inode, process start time) on Linux, else None."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
        ns = str(os.stat(f"/proc/{pid}/ns/pid").st_ino) if pid == "self" else ""
        stat = Path(f"/proc/{pid}/stat").read_text()
        start = stat.rsplit(")", 1)[1].split()[19]  # field 22: starttime (clock ticks)
    except (OSError, IndexError):
        return None
    return boot, ns, start


def new_owner_id() -> str:
    """A lease owner id, unique per process instance: ``host:pid:random~boot~pidns~start``.

    The suffix (Linux) lets :func:`owner_is_dead` tell a dead local process from a live one in
    another PID namespace with the same hostname, and from a later process reusing the pid.
    """
    ident = _proc_identity()
    suffix = "~" + "~".join(ident) if ident else ""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}{suffix}"


def owner_is_dead(owner: str) -> bool:
    """True when ``owner`` names a process of *this* machine, boot and PID namespace that no
    longer exists (or whose pid now belongs to a later process).

    Lets a local resume take over right after ``kill -9`` instead of waiting out the lease.
    Anything it cannot prove dead — a remote owner, another container or PID namespace with the
    same hostname, an owner id without the identity suffix, a live process — is left to lease
    expiry, judged by the store's clock.
    """
    try:
        host, pid_s, rest = owner.split(":", 2)
        pid = int(pid_s)
        _, boot, ns, start = rest.split("~")
    except ValueError:
        return False
    mine = _proc_identity()
    if mine is None or host != socket.gethostname() or pid == os.getpid():
        return False
    if (boot, ns) != mine[:2]:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    # A zombie (killed, not yet reaped) is dead; so is the owner if its pid was reused.
    return stat[0] == "Z" or stat[19] != start


__all__ = ["new_owner_id", "owner_is_dead"]
