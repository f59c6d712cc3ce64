"""Agent-written code behind a VM boundary (G15): a microVM sandbox on QEMU.

::

    from torpor.sandbox import Sandbox

    with Sandbox() as sb:                      # boots (or refuses: IsolationUnavailableError)
        sb.write_file("hello.py", "print(6 * 7)")
        result = sb.exec(["sh", "-c", "cat hello.py"], timeout_s=30)

- :class:`Sandbox` (:mod:`.vm`): QEMU ``microvm``, KVM where a stock kernel boots under it and
  TCG otherwise (:mod:`.host` probes once and records which, and why), a guest agent on a
  virtio-serial port; no network unless :class:`Network` allows named services; CPU, memory
  and disk :class:`Limits`; nothing of the host's environment or files in the guest.
- The image (:mod:`.image`): built reproducibly from Debian's kernel and busybox packages,
  content-hashed and cached outside the repository (``torpor sandbox build``).
- :func:`sandbox_tools` (:mod:`.tools`): ``sandbox.exec`` (an effect the guest runs at most
  once and reports on after a crash), ``sandbox.exec_readonly``, ``sandbox.write``,
  ``sandbox.read``, ``sandbox.ls`` for an agent.
- :meth:`Sandbox.sleep` (:mod:`.snapshot`): the VM saved to a hash-checked snapshot file and
  stopped; the next start on its workspace wakes it. :func:`sleep_on_wait` does it when a
  workflow's wait suspends the run.
- :func:`save_workspace` (:mod:`.workspace`): the sleeping workspace (disk chunks, saved state,
  manifest) recorded as artifacts of its run — retention, gc and archives cover it, and a
  resume on another machine with the same artifact store rebuilds it from there.
  ``sleep_on_wait(sb, run)`` saves before the wait.
- :class:`ProcessSandbox` (:mod:`.process`): the same verbs in a child process of this user —
  **no isolation**, for development only, and loudly labelled so.
- ``torpor sandbox doctor``: what this host has and lacks, one fact a line.
"""

from .api import Entry, ExecResult, Limits, Network, OpStatus
from .host import facts
from .image import Image, build_image, current_image
from .process import ProcessSandbox
from .tools import sandbox_tools, sleep_on_wait
from .vm import Sandbox, op_id
from .workspace import save_workspace


def open_sandbox(
    workspace: str | None = None, *, isolation: str = "vm", **kwargs: object
) -> Sandbox | ProcessSandbox:
    """A sandbox of the asked ``isolation``: ``"vm"`` (the default: a :class:`Sandbox`, which
    refuses with IsolationUnavailableError where no VM boundary can be had) or ``"process"``
    (:class:`ProcessSandbox`: no isolation, development only, loudly labelled). Not started."""
    if isolation == "vm":
        return Sandbox(workspace, **kwargs)  # type: ignore[arg-type]
    if isolation == "process":
        return ProcessSandbox(workspace, **kwargs)  # type: ignore[arg-type]
    raise ValueError(f"isolation must be 'vm' or 'process', got {isolation!r}")


__all__ = [
    "Entry",
    "ExecResult",
    "Image",
    "Limits",
    "Network",
    "OpStatus",
    "ProcessSandbox",
    "Sandbox",
    "build_image",
    "current_image",
    "facts",
    "op_id",
    "open_sandbox",
    "sandbox_tools",
    "save_workspace",
    "sleep_on_wait",
]
