"""The sandbox as an agent's tools, each with the recovery policy its effect calls for:

- ``sandbox.exec`` — an **effect**: the command may change the workspace (or, with a network,
  the world). Its intent is recorded before the call (the engine's journal); the guest records
  the op (the sha256 of the idempotency key) on the workspace disk before it runs and its
  result after, and runs one op at most once. After a crash, reconcile asks the guest: ``done``
  → applied (the recorded result stands, the command is not run again); ``absent`` (it never
  reached the guest) → safe to perform; ``started`` (its VM stopped before the command ended)
  → unknown: the run becomes unresolved and a person decides.
- ``sandbox.exec_readonly`` — a **read**: the workspace is mounted read-only for the command,
  so running it again is safe (``/tmp`` stays writable and is not kept).
- ``sandbox.write`` — an **effect** reconciled by content: the file's sha256 equal to the
  content's is applied; otherwise absent (writing the same bytes to the same path again
  leaves the same file).
- ``sandbox.read``, ``sandbox.ls`` — **reads**.

The two effects' results carry ``workspace``: the workspace's content digest right after the
call (the disk's, :func:`torpor.sandbox.snapshot.disk_digest`), so the run's history records
the state each effect left. It is the disk's, not the files': the guest's filesystem may still
write metadata of its own afterwards (its journal), so a later digest can differ with the same
files; the digest a sleeping sandbox's manifest holds is exact (taken with the VM stopped).

The sandbox is started on first use (a new process attaches to the VM still running on the
run's workspace, or boots one on its disk), so the reconciles work at takeover too.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from ..agents.tools import Tool, Tools
from ..engine.effects import Absent, Applied, EffectCall, Reconciliation, Unknown
from ..errors import EffectNotApplied, SandboxError, Suspended
from ..history import Policy
from .api import Entry, ExecResult, OpStatus
from .vm import Sandbox, op_id
from .workspace import save_workspace

if TYPE_CHECKING:
    from ..run import Run


class SandboxLike(Protocol):
    """What the tools need of a sandbox (:class:`Sandbox` or :class:`ProcessSandbox`)."""

    isolation: str

    def start(self) -> Any: ...
    def exec(
        self,
        argv: list[str],
        stdin: bytes | str = ...,
        timeout_s: float = ...,
        *,
        op: str | None = ...,
        read_only: bool = ...,
    ) -> ExecResult: ...
    def status(self, op: str) -> OpStatus: ...
    def write_file(self, path: str, data: bytes | str, mode: int = ...) -> str: ...
    def read_file(self, path: str, max_bytes: int | None = ...) -> bytes: ...
    def ls(self, path: str = ...) -> list[Entry]: ...
    def workspace_digest(self) -> str: ...


@contextlib.contextmanager
def sleep_on_wait(
    sandbox: SandboxLike, run: Run | None = None, *, name: str = "workspace"
) -> Iterator[None]:
    """Around a durable wait in a workflow (``run.approval``, ``run.wait_for``, ``run.sleep``):
    a waiting run holds its workspace on disk, not a VM process.

    With ``run``: the workspace is saved before the wait, as artifacts of the run
    (:func:`~torpor.sandbox.workspace.save_workspace`, one recorded step: the VM sleeps, its
    disk chunks, saved state and manifest go to the run's artifact store), so retention, gc and
    archives cover it and a resume on another machine (same database and artifact store)
    rebuilds it from there. The VM sleeps whether or not the wait then suspends the run (a
    wait already satisfied costs one wake, at the next sandbox call).

    Without ``run``: when the run suspends there (:class:`~torpor.errors.Suspended`), the VM
    is put to sleep in its workspace folder only (:meth:`Sandbox.sleep`); a wait that does not
    suspend changes nothing.

    Either way the next sandbox tool call after the wait starts the sandbox, which wakes the
    snapshot (hash-checked). A ProcessSandbox is left as it is.

    ::

        with sleep_on_wait(sb, run):
            decision = run.approval("ship", [ref], summary="push the patch")
    """
    if run is not None and isinstance(sandbox, Sandbox):
        save_workspace(run, sandbox, name)
    try:
        yield
    except Suspended:
        if isinstance(sandbox, Sandbox) and sandbox.running:
            sandbox.sleep()
        raise


def _started_for_effect(sandbox: SandboxLike) -> None:
    """Start the sandbox before an effect's command: a sandbox that does not start has been
    sent nothing, so the effect certainly did not happen (EffectNotApplied: recorded absent,
    never left to a reconcile that cannot reach the guest either, which made the run
    ``unresolved``)."""
    try:
        sandbox.start()
    except SandboxError as exc:
        raise EffectNotApplied(f"the sandbox did not start, nothing was sent to it: {exc}") from exc


def sandbox_tools(
    sandbox: SandboxLike,
    *,
    tools: Tools | None = None,
    prefix: str = "sandbox",
    sleep_on_approval: bool = True,
) -> Tools:
    """Register ``<prefix>.exec``, ``.exec_readonly``, ``.write``, ``.read`` and ``.ls`` on
    ``tools`` (a new :class:`~torpor.agents.tools.Tools` by default) for ``sandbox``; returns it.
    ``sleep_on_approval``: an Agent using these tools saves the workspace and puts the VM to
    sleep before each approval it waits for (``sleep_on_wait(sandbox, run, name=prefix)``,
    through :attr:`Tools.around_waits`); the next sandbox call wakes it."""
    reg = tools if tools is not None else Tools()
    if sleep_on_approval and isinstance(sandbox, Sandbox):
        name = "workspace" if prefix == "sandbox" else f"{prefix}.workspace"
        reg.around_waits.append(lambda run: sleep_on_wait(sandbox, run, name=name))

    def exec_(
        argv: list[str], stdin: str = "", timeout_s: float = 60.0, idempotency_key: str = ""
    ) -> dict[str, object]:
        _started_for_effect(sandbox)
        result = sandbox.exec(argv, stdin, timeout_s, op=op_id(idempotency_key)).as_dict()
        return result | {"workspace": sandbox.workspace_digest()}

    def reconcile_exec(call: EffectCall) -> Reconciliation:
        sandbox.start()
        status = sandbox.status(op_id(call.idempotency_key))
        if status.state == "done" and status.result is not None:
            done = status.result.as_dict() | {"replayed": True}
            return Applied(done | {"workspace": sandbox.workspace_digest()})
        if status.state == "absent":
            return Absent()
        return Unknown(
            "the command started in the sandbox and its VM stopped before it ended: "
            "it may have run partly"
        )

    def exec_readonly(
        argv: list[str], stdin: str = "", timeout_s: float = 60.0
    ) -> dict[str, object]:
        sandbox.start()
        return sandbox.exec(argv, stdin, timeout_s, read_only=True).as_dict()

    def write(path: str, content: str, mode: int = 0o644) -> dict[str, object]:
        _started_for_effect(sandbox)
        sha = sandbox.write_file(path, content, mode)
        return {"path": path, "sha256": sha, "workspace": sandbox.workspace_digest()}

    def reconcile_write(call: EffectCall) -> Reconciliation:
        path, content = call.kwargs.get("path"), call.kwargs.get("content")
        if isinstance(path, str) and isinstance(content, str):
            sandbox.start()
            want = hashlib.sha256(content.encode()).hexdigest()
            try:
                have = hashlib.sha256(sandbox.read_file(path)).hexdigest()
            except SandboxError:
                return Absent()
            if have == want:
                return Applied(
                    {"path": path, "sha256": want, "workspace": sandbox.workspace_digest()}
                )
        return Absent()

    def read(path: str, max_bytes: int = 1 << 20) -> str:
        sandbox.start()
        return sandbox.read_file(path, max_bytes).decode(errors="replace")

    def ls(path: str = ".") -> list[dict[str, object]]:
        sandbox.start()
        return [{"name": e.name, "kind": e.kind, "size": e.size} for e in sandbox.ls(path)]

    where = f"(isolation={sandbox.isolation})"
    reg.add(
        Tool(
            f"{prefix}.exec",
            exec_,
            Policy.EFFECT,
            f"Run argv in the sandbox's /work {where}; at most once.",
            reconcile=reconcile_exec,
        )
    )
    reg.add(
        Tool(
            f"{prefix}.exec_readonly",
            exec_readonly,
            Policy.READ,
            f"Run argv with /work read-only {where}.",
        )
    )
    reg.add(
        Tool(
            f"{prefix}.write",
            write,
            Policy.EFFECT,
            f"Write a file under /work {where}.",
            reconcile=reconcile_write,
        )
    )
    reg.add(Tool(f"{prefix}.read", read, Policy.READ, f"Read a file under /work {where}."))
    reg.add(Tool(f"{prefix}.ls", ls, Policy.READ, f"List a directory under /work {where}."))
    return reg
