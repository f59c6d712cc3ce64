"""Talking to a running agent from outside (issue 39), the part of
:class:`torpor.client.Client` that steers: a steering message (:meth:`ClientSteering.steer`),
a reply instead of a decision (:meth:`~ClientSteering.respond`), an approval of edited content
(:meth:`~ClientSteering.approve_edited`) and the proposed content an editor starts from
(:meth:`~ClientSteering.proposed`). Like every message, each goes to the run's inbox and gets
a recorded disposition (G11)."""

from __future__ import annotations

import difflib
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ArtifactNotFoundError, InboxError, TorporError

if TYPE_CHECKING:
    from .history import RunState
    from .store.base import Store

#: Longest steering message accepted, in characters (it reaches every later context).
MAX_STEER_CHARS = 16_000


class ClientSteering:
    """Steering and the decisions that answer instead of approving (mixed into the Client)."""

    store: Store

    if TYPE_CHECKING:

        def _open(self, run_id: str, allow_reopenable: bool = False) -> RunState: ...

        decide: Callable[..., tuple[str, list[str]]]

        def artifacts(self, run_id: str) -> list[Any]: ...
        def artifact_bytes(self, sha256: str) -> bytes: ...
        def state(self, run_id: str) -> RunState: ...

    def steer(
        self,
        run_id: str,
        text: str,
        *,
        by: str = "user",
        interrupt: bool = False,
        message_id: str | None = None,
    ) -> str:
        """Put an operator's message into a running agent's inbox; returns its message id.

        The agent takes it at its next boundary, before its next model call (recorded:
        ``steer_received``, then ``steer_taken`` naming that boundary; seen once, in arrival
        order, also after a crash), and keeps it as an instruction in its working memory and
        fact ledger until a later one supersedes it. ``interrupt``: a model reply in flight
        when it arrives is retracted (``reply_retracted``; its tokens still count) and the
        model is asked again with the message. A message no boundary took before the run
        ended is refused on the record. InboxError for an empty or oversized text, or for a
        run of a plain workflow function (not an agent: it has no boundary that takes one) when
        its workflow can be found here; otherwise such a run refuses the message on the record
        when it arrives. RunFinishedError for a finished run."""
        if not text.strip():
            raise InboxError("a steering message needs its text")
        if len(text) > MAX_STEER_CHARS:
            raise InboxError(
                f"the steering message has {len(text)} characters; at most {MAX_STEER_CHARS}"
            )
        refuse_unsteerable(self._open(run_id))
        mid = message_id or f"steer:{run_id}:{uuid.uuid4().hex[:16]}"
        body = {"text": text, "by": by, "interrupt": bool(interrupt)}
        self.store.post_inbox(run_id, "steer", body, message_id=mid)
        return mid

    def respond(
        self, run_id: str, approval_id: str | None, reply: str, approver: str, **kw: Any
    ) -> tuple[str, list[str]]:
        """Answer an approval with a reply instead of approving or denying it: nothing runs,
        and an agent's model gets ``reply`` as the call's result (the tool call settles
        ``responded``; a workflow's ``run.approval`` raises ApprovalRespondedError). Signed like
        any decision (the reply is its signed comment); ``kw`` as for :meth:`decide`."""
        return self.decide(run_id, approval_id, "respond", approver, comment=reply, **kw)

    def approve_edited(
        self, run_id: str, approval_id: str | None, edited: str, approver: str, **kw: Any
    ) -> tuple[str, list[str]]:
        """Approve with an edit: the signed decision binds the sha256 of ``edited`` (UTF-8
        text; for an agent's tool call, the JSON document :meth:`proposed` gives, with the
        arguments changed), the effect runs exactly those bytes, and the record keeps both
        the proposed content and the edited one. ``kw`` as for :meth:`decide`."""
        return self.decide(run_id, approval_id, "approve", approver, edited=edited, **kw)

    def proposed(self, run_id: str, approval_id: str | None = None) -> str:
        """The proposed content of an approval, as text (what an editor starts from): for an
        agent's tool call the JSON document ``{"tool": …, "args": …}`` it binds, pretty-printed.
        ArtifactNotFoundError when the approval binds no text document."""
        st = self.state(run_id)
        aid = approval_id or pending_approval(st)
        if aid not in st.approvals:
            raise InboxError(f"run {run_id!r} has no approval {aid!r}")
        bound = set(st.approvals[aid].hashes)
        refs = [a for a in self.artifacts(run_id) if a.sha256 in bound]
        docs = [a for a in refs if a.media_type == "application/json"] or refs
        if not docs:
            raise ArtifactNotFoundError(f"approval {aid!r} binds no artifact of this run")
        raw = self.artifact_bytes(docs[0].sha256).decode()
        try:
            return json.dumps(json.loads(raw), indent=2, sort_keys=True) + "\n"
        except ValueError:
            return raw


def pending_approval(st: RunState) -> str:
    """The id of the one approval run ``st`` has pending (what a decision without an
    approval id is about); InboxError saying what the run is doing when none is pending, or
    naming them when several are."""
    pending = st.open_approvals()
    if len(pending) == 1:
        return next(iter(pending))
    if pending:
        raise InboxError(
            f"run {st.run_id!r} has {len(pending)} approvals pending ({', '.join(pending)}); "
            "name one"
        )
    w = st.wait
    if st.outcome is not None:
        doing = f"it finished {st.outcome.value}"
    elif w is not None:
        doing = f"it is waiting for {w.kind} {w.name!r}"
    else:
        doing = f"it is {st.status.value}"
    raise InboxError(f"run {st.run_id!r} has no approval pending ({doing}): nothing to decide")


def refuse_unsteerable(st: RunState) -> None:
    """InboxError when run ``st`` runs a workflow registered (or importable from the module
    recorded with the run) that takes no steering message: a plain workflow function, not an
    agent. A workflow unknown here is let through: the run refuses the message on the record
    when it arrives (:func:`torpor.engine.inbox.not_steerable`)."""
    from .workflows import get_workflow

    try:
        wf = get_workflow(st.workflow, st.module)
    except TorporError:
        return
    if not wf.steerable:
        raise InboxError(
            f"run {st.run_id!r} runs workflow {wf.name!r}, not an agent: a workflow function "
            f"takes no steering message (send it a signal: torpor signal {st.run_id} NAME)"
        )


def edit_diff(proposed: str, edited: str, name: str = "arguments") -> str:
    """A unified diff of the proposed content and the edit (what a person sees before
    signing); "" when they are the same."""
    lines = difflib.unified_diff(
        proposed.splitlines(keepends=True),
        edited.splitlines(keepends=True),
        f"proposed/{name}",
        f"edited/{name}",
    )
    return "".join(lines)


def read_edit(path: Path, limit_bytes: int = 1 << 20) -> str:
    """The edited content in file ``path`` (UTF-8, at most ``limit_bytes``); InboxError
    naming the file otherwise."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InboxError(f"cannot read the edit {path}: {exc.strerror}") from None
    if len(data) > limit_bytes:
        raise InboxError(f"the edit {path} has {len(data)} bytes; at most {limit_bytes}")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise InboxError(f"the edit {path} is not UTF-8 (byte {exc.start})") from None
