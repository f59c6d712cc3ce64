"""The out-of-process API: inspect runs and send them signals, decisions and cancellations.

Nothing here takes a run's lease: messages go to the run's *inbox* (deduplicated by message id)
and the lease holder moves them into the history at its next boundary, validated like any
event. A waiting run is woken by the message. Preconditions are checked against the recorded
state so a person gets an immediate, clear error (deciding an approval that was never
requested, revoking one already consumed).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from . import blobs, forks, serde
from .client_reads import ClientReads
from .client_steer import ClientSteering, pending_approval
from .config import Settings
from .errors import (
    DecisionRefusedError,
    InboxError,
    RunFinishedError,
)
from .history import REOPENABLE, Outcome, RunStatus, Verdict

if TYPE_CHECKING:
    from .history import (
        RunState,
    )
    from .sessions.api import Session

from .store import open_store
from .store.base import Store


@dataclass(frozen=True)
class SignalDelivery:
    """Where a signal went when :meth:`Client.send_signal` posted it.

    ``status``: ``waiting`` — the run's open wait ``wait_id`` is waiting for it and takes it
    (at once when a worker is running, else when the run resumes); ``buffered`` — no wait of
    its name is open yet: kept until one begins; ``late`` — the open wait ``wait_id`` of its
    name had passed its deadline when it arrived: kept for a later wait of its name;
    ``duplicate`` — this ``message_id`` was delivered before, nothing was sent again. What the
    run finally did with it is in its history (``torpor show``: consumed by a wait, buffered,
    late, or refused and why).
    """

    run_id: str
    name: str
    message_id: str
    status: Literal["waiting", "buffered", "late", "duplicate"]
    wait_id: str | None = None

    @property
    def delivered(self) -> bool:
        """False when the message id had been delivered before (nothing was sent)."""
        return self.status != "duplicate"


class Client(ClientSteering, ClientReads):
    """Inspect and steer runs with only the store URL (and, to decide approvals, the
    approver's own key: :meth:`decide`)."""

    def __init__(self, store: Store | str | None = None, *, settings: Settings | None = None):
        self.settings = settings or Settings.from_env(store if isinstance(store, str) else None)
        self.store: Store = (
            open_store(self.settings.database_url)
            if store is None or isinstance(store, str)
            else store
        )

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ steering

    def _open(self, run_id: str, allow_reopenable: bool = False) -> RunState:
        st = self.state(run_id)
        if st.status is RunStatus.FINISHED and not (allow_reopenable and st.outcome in REOPENABLE):
            raise RunFinishedError(f"run {run_id!r} already finished: {st.outcome}")
        return st

    def session(self, name: str) -> Session:
        """The handle of session ``name`` (:class:`torpor.sessions.Session`: send, info,
        inbox); BadInputError for a malformed name."""
        from .sessions.api import Session

        return Session(self, name)

    def signal(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        message_id: str | None = None,
        wait_id: str | None = None,
    ) -> bool:
        """Send signal ``name`` with a JSON ``payload``; see :meth:`send_signal`. Returns
        False when ``message_id`` was delivered before (a no-op: the run consumes it once)."""
        d = self.send_signal(run_id, name, payload, message_id=message_id, wait_id=wait_id)
        return d.delivered

    def send_signal(
        self,
        run_id: str,
        name: str | None,
        payload: Any = None,
        *,
        message_id: str | None = None,
        wait_id: str | None = None,
    ) -> SignalDelivery:
        """Send a signal and say where it went (:class:`SignalDelivery`).

        By ``name``, it is buffered until a wait of that name takes it (each wait takes the
        earliest that arrived before its deadline; a loop on ``wait_for(name)`` takes them one
        by one). With ``wait_id`` (the id ``torpor show`` prints for the open wait; ``name``
        may then be None) it answers that wait instance only, and is refused — InboxError,
        nothing sent — when that wait is unknown, already answered, or past its deadline (if
        that happens after it was sent, the run records its refusal). Delivering the same
        ``message_id`` twice is a no-op (status ``duplicate``). Raises RunFinishedError when
        the run already has its outcome, RunNotFoundError for an unknown run.
        """
        st = self._open(run_id)
        now = self.store.now_ms()
        if wait_id is not None:
            name = self._answerable(run_id, st, wait_id, name, now)
        if name is None:
            raise InboxError("a signal needs a name, or the id of the wait it answers")
        mid = message_id or uuid.uuid4().hex
        store = self.store
        data = blobs.offload_jsonable(
            serde.to_jsonable(payload),
            self.settings.artifacts_url,
            lambda h, n: store.pin_blob(run_id, h, n),  # referenced before it is stored
        )
        body: dict[str, Any] = {"name": name, "payload": data}
        if wait_id is not None:
            body["wait_id"] = wait_id
        if not self.store.post_inbox(run_id, "signal", body, message_id=mid):
            return SignalDelivery(run_id, name, mid, "duplicate")
        w = st.wait
        if w is None or w.kind != "signal" or w.name != name:
            return SignalDelivery(run_id, name, mid, "buffered")
        if w.deadline_ms is not None and now >= w.deadline_ms:
            return SignalDelivery(run_id, name, mid, "late", w.wait_id)
        return SignalDelivery(run_id, name, mid, "waiting", w.wait_id)

    def _answerable(
        self, run_id: str, st: RunState, wait_id: str, name: str | None, now: int
    ) -> str:
        """The signal name of open wait ``wait_id``, which can still take an answer
        (InboxError saying why not otherwise)."""
        w = st.wait
        if w is None or w.wait_id != wait_id:
            done = self.store.step_completion(run_id, wait_id)
            if done is None:
                open_id = f"; it waits on {w.wait_id}" if w else ""
                raise InboxError(f"run {run_id!r} has no open wait {wait_id!r}{open_id}")
            res = done.result if isinstance(done.result, dict) else {}
            if res.get("timeout"):
                raise InboxError(f"wait {wait_id!r} of run {run_id!r} already timed out")
            raise InboxError(f"wait {wait_id!r} of run {run_id!r} was already answered")
        if w.kind != "signal":
            raise InboxError(
                f"wait {wait_id!r} of run {run_id!r} waits for {w.kind} {w.name!r}, not a signal"
            )
        if name is not None and name != w.name:
            raise InboxError(f"wait {wait_id!r} waits for signal {w.name!r}, not {name!r}")
        if w.deadline_ms is not None and now >= w.deadline_ms:
            raise InboxError(
                f"wait {wait_id!r} of run {run_id!r} already timed out: its deadline passed"
            )
        taken = st.answer()
        by = taken.signal_id if taken is not None else None
        for m in self.store.pending_inbox(run_id):
            b = m.body
            if by is None and m.kind == "signal" and b.get("name") == w.name:
                by = m.message_id if b.get("wait_id") in (None, wait_id) else None
        if by is not None:
            raise InboxError(
                f"wait {wait_id!r} of run {run_id!r} was already answered (by message {by})"
            )
        return w.name

    def pending_approvals(self, run_id: str) -> dict[str, list[str]]:
        """Approval ids awaiting a decision, with the content hashes each one binds (not
        those whose wait timed out)."""
        st = self.state(run_id)
        return {k: v.hashes for k, v in st.open_approvals().items()}

    def decide(
        self,
        run_id: str,
        approval_id: str | None,
        decision: str,
        approver: str,
        *,
        expect_hash: str | None = None,
        comment: str = "",
        delegate: str | None = None,
        key: str | Path | None = None,
        agent: bool = False,
        edited: str | None = None,
    ) -> tuple[str, list[str]]:
        """Approve or deny, signed by ``approver``'s own key (G6). Returns ``(approval_id,
        hashes)`` decided on. ``decision`` ``respond`` answers with ``comment`` as a reply for
        the model instead (:meth:`respond`); ``edited`` approves edited content instead of the
        proposed one (:meth:`approve_edited`; the signature binds its sha256).

        ``approval_id`` may be omitted when exactly one approval is pending. ``expect_hash``
        (a prefix of one bound sha256) guards against deciding on content you did not review.
        The decision's canonical bytes (:mod:`torpor.signing`) are signed with Ed25519 by the
        private key ``key`` (a path), by ``ssh-agent`` (``agent``), or by the key
        ``torpor keys init --as NAME`` made (``$TORPOR_CONFIG_DIR/keys/NAME``), where NAME is
        ``approver`` or — for a console signing for a person it authenticated — ``delegate``.
        KeyringError when there is no such key (naming the command that makes one); in the
        ``hmac-local`` mode, the shared key signs instead (not attributable).

        The decision is checked against this machine's keyring before it is sent: one that
        would be refused raises DecisionRefusedError with the reason and is not sent (with no
        local keyring, the run's workers are the ones to check it).
        """
        from .history import candidate_refusal

        if decision not in ("approve", "deny", "respond"):
            raise InboxError(f"decision must be approve, deny or respond, not {decision!r}")
        if edited is not None and decision != "approve":
            raise InboxError("only an approval carries edited content")
        if decision == "respond" and not comment.strip():
            raise InboxError("a reply (respond) needs its text")
        st = self._open(run_id)
        pending = st.open_approvals()
        if approval_id is None:
            approval_id = pending_approval(st)
        info = st.approvals.get(approval_id)
        if info is None:
            raise InboxError(f"run {run_id!r} has no approval {approval_id!r}")
        try:
            if info.status == "requested" and approval_id not in pending:
                raise InboxError(
                    f"approval {approval_id!r} takes no decision any more: its wait ended "
                    "(timed out) without one"
                )
            refused = candidate_refusal(st, approval_id, decision, approver)  # the fold's rule
            if refused is not None:
                raise InboxError(refused)
            counted = {d.approver for d in info.decisions if d.decision == "approve"}
            self._refuse_if_decided_in_inbox(run_id, approval_id, approver, info.required, counted)
            if expect_hash and not any(h.startswith(expect_hash) for h in info.hashes):
                raise InboxError(
                    f"approval {approval_id!r} binds {info.hashes}, not the content "
                    f"{expect_hash!r} you reviewed; review it again"
                )
            body = self._signed(
                run_id, approval_id, decision, approver, info.hashes, comment, delegate, key, agent,
                edited,
            )  # fmt: skip
        except (InboxError, DecisionRefusedError) as exc:
            from .engine.inbox import post_refusal  # only when refusing: the client stays light

            why = getattr(exc, "reason", None) or str(exc)
            post_refusal(self.store, run_id, approval_id, decision, approver, delegate, why)
            raise
        signer = delegate or approver
        self.store.post_inbox(
            run_id,
            "decision",
            body,
            message_id=f"decision:{run_id}:{approval_id}:{signer}:{uuid.uuid4().hex[:12]}",
        )
        return approval_id, list(info.hashes)

    def _refuse_if_decided_in_inbox(
        self, run_id: str, approval_id: str, approver: str, required: int, counted: set[str]
    ) -> None:
        """InboxError when decisions already sent on ``approval_id`` and not yet applied
        settle it (a deny, or ``required`` approvals with the ``counted`` ones) or include
        ``approver``'s: a decision
        sent now would be refused when the run resumes, so the person is told, not thanked."""
        from .history import utc_text

        sent = [
            m.body
            for m in self.store.pending_inbox(run_id)
            if m.kind == "decision" and m.body.get("approval_id") == approval_id
        ]
        mine = [b for b in sent if b.get("approver") == approver]
        if mine:
            raise InboxError(
                f"{approver!r} already decided on approval {approval_id!r} "
                f"({mine[0].get('decision')}; it applies when the run resumes)"
            )
        denies = [b for b in sent if b.get("decision") == "deny"]
        approves = {b.get("approver") for b in sent if b.get("decision") == "approve"}
        if denies or len(approves | counted) >= required:
            by = denies[0] if denies else next(b for b in sent if b.get("decision") == "approve")
            raise InboxError(
                f"approval {approval_id!r} was already decided by {by.get('approver')!r} "
                f"({by.get('decision')}, sent at {utc_text(int(by.get('decided_at_ms') or 0))}); "
                "it applies when the run resumes — a decision sent now would be refused"
            )

    def _signed(
        self,
        run_id: str,
        approval_id: str,
        decision: str,
        approver: str,
        hashes: list[str],
        comment: str,
        delegate: str | None,
        key: str | Path | None,
        agent: bool,
        edited_content: str | None = None,
    ) -> dict[str, Any]:
        """The decision's message body, signed (and checked against the local keyring)."""
        from . import keys, signing
        from .engine.highwater import decision_binding  # (not for read commands)
        from .history import ApprovalDecided

        at = self.store.now_ms()
        store, request = decision_binding(
            self.settings.config_dir(), self.store, self.state(run_id), approval_id
        )
        body: dict[str, Any] = {
            "approval_id": approval_id,
            "decision": decision,
            "approver": approver,
            "hashes": sorted(hashes),
            "comment": comment,
            "decided_at_ms": at,
            "store": store,
            "request": request,
        }
        edited = serde.sha256_hex(edited_content) if edited_content is not None else ""
        if edited:
            body.update(edited=edited, edited_content=edited_content)
        hmac_key = self.settings.hmac_key()
        if hmac_key is not None and key is None and not agent and not delegate:
            data = signing.hmac_bytes(
                run_id, approval_id, decision, approver, hashes, at,
                store=store, request=request, edited=edited,
            )  # fmt: skip
            return {**body, "scheme": "hmac", "signature": signing.hmac_sign(hmac_key, data)}
        ring_path = self.settings.keyring_path()
        ring = keys.Keyring.load(ring_path)
        signer = keys.signer_for(
            self.settings.config_dir(),
            ring,
            delegate or approver,
            key=Path(key) if key is not None else None,
            agent=agent,
        )
        fp = signing.fingerprint(signer.blob)
        data = signing.decision_bytes(
            run_id,
            approval_id,
            decision,
            approver,
            hashes,
            at,
            delegate=delegate or "",
            key=fp,
            comment=comment,
            store=store,
            request=request,
            edited=edited,
        )
        body.update(
            scheme="ed25519",
            key=fp,
            delegate=delegate or "",
            signature=signing.encode_signature(signer.sign(data)),
        )
        if ring.exists:
            why = keys.Trust(ring_path).check(
                run_id,
                approval_id,
                hashes,
                ApprovalDecided.model_validate(body),
                store=store,
                request=request,
            )
            if why is not None:
                raise DecisionRefusedError(
                    f"run {run_id!r} approval {approval_id!r}: the decision is refused, nothing "
                    f"was sent: {why}",
                    reason=why,
                )
        return body

    def revoke(self, run_id: str, approval_id: str, by: str, reason: str = "") -> list[str]:
        """Revoke an approval not yet consumed: the effect it authorized will not happen.
        Returns the content hashes the revoked approval bound."""
        st = self._open(run_id)
        info = st.approvals.get(approval_id)
        if info is None:
            raise InboxError(f"run {run_id!r} has no approval {approval_id!r}")
        pending_decision = any(
            m.kind == "decision" and m.body.get("approval_id") == approval_id
            for m in self.store.pending_inbox(run_id)
        )
        if info.status != "approved" and not pending_decision:
            raise InboxError(
                f"approval {approval_id!r} is {info.status}; only an approved, unconsumed "
                "approval can be revoked"
            )
        self.store.post_inbox(
            run_id,
            "revoke",
            {"approval_id": approval_id, "by": by, "reason": reason},
            message_id=f"revoke:{run_id}:{approval_id}",
        )
        return list(info.hashes)

    def fork(
        self,
        run_id: str,
        at: int | str,
        *,
        fork_id: str | None = None,
        input: Any = forks.KEEP,
        workflow: str | Callable[..., Any] | None = None,
        module: str | None = None,
        redo_effects: bool = False,
        by: str = "user",
        reason: str = "",
    ) -> forks.Fork:
        """Fork run ``run_id`` at ``at`` — a seq, or a step id (just before it first started)
        — into a new run whose history is the origin's up to there, settled, then runs on
        (not executed here: resume it, or let a worker take it) without repeating the
        origin's effects: see :func:`torpor.forks.fork_run` for the arguments and errors."""
        return forks.fork_run(
            self.store,
            run_id,
            at,
            fork_id=fork_id,
            input=input,
            workflow=workflow,
            module=module,
            redo_effects=redo_effects,
            by=by,
            reason=reason,
        )

    def cancel(self, run_id: str, by: str = "user", reason: str = "") -> None:
        """Ask the run to stop; it ends ``cancelled`` at its next boundary."""
        self._open(run_id)
        self.store.post_inbox(
            run_id, "cancel", {"by": by, "reason": reason}, message_id=f"cancel:{run_id}"
        )

    def resolve(
        self, run_id: str, key: str, verdict: str, by: str, *, result: Any = None, reason: str = ""
    ) -> None:
        """A person settles an effect in doubt: ``applied`` (with its result) or ``absent``
        (it will be performed on resume). Reopens an ``unresolved`` run."""
        v = Verdict(verdict)
        if v is Verdict.UNKNOWN:
            raise InboxError("a resolution must be applied or absent")
        st = self._open(run_id, allow_reopenable=True)
        info = st.effects.get(key)
        if info is None or info.status not in ("intended", "unknown"):
            raise InboxError(
                f"run {run_id!r} has no effect {key!r} in doubt"
                + (f" (it is {info.status})" if info else "")
            )
        self.store.post_inbox(
            run_id,
            "resolve",
            {
                "key": key,
                "verdict": v.value,
                "by": by,
                "result": serde.to_jsonable(result),
                "reason": reason,
            },
            message_id=f"resolve:{key}:{uuid.uuid4().hex[:8]}",
        )

    def reopen(
        self,
        run_id: str,
        by: str,
        *,
        reason: str = "",
        tokens: int | None = None,
        cost_usd: float | None = None,
        steps: int | None = None,
        wall_clock_s: float | None = None,
    ) -> dict[str, Any]:
        """Reopen a ``blocked`` run — typically after raising a budget limit — so it resumes
        where it stopped. Given limits replace the recorded ones (a running run takes them at
        its next boundary without reopening). A run's limits hold for its whole tree of runs
        (:mod:`torpor.engine.budgets`): raising them also reopens the runs below it that they
        blocked. Returns the run's own usage and its limits as they will be (usage keys:
        tokens, cost_usd, steps, wall_clock_s), ``tree``: the usage its limits are checked
        against, of the run and every run below it (keys: runs, tokens, cost_usd, steps), and
        ``reopened``: the runs below reopened."""
        limits = {
            k: v
            for k, v in {
                "tokens": tokens,
                "cost_usd": cost_usd,
                "steps": steps,
                "wall_clock_s": wall_clock_s,
            }.items()
            if v is not None
        }
        bad = [k for k, v in limits.items() if v <= 0]
        if bad:
            raise InboxError(f"budget limits must be positive ({', '.join(bad)})")
        st = self.state(run_id)
        if st.status is RunStatus.FINISHED and st.outcome is not Outcome.BLOCKED:
            raise RunFinishedError(
                f"run {run_id!r} finished {st.outcome}; only a blocked run can be reopened"
                + (" (settle an unresolved one with resolve)" if st.outcome == "unresolved" else "")
            )
        if st.status is not RunStatus.FINISHED and not limits:
            raise InboxError(f"run {run_id!r} is {st.status}, not blocked: nothing to reopen")
        body: dict[str, Any] = {"by": by, "reason": reason or "reopened by " + by}
        if limits:
            body["budget"] = limits
        self.store.post_inbox(run_id, "reopen", body, message_id=f"reopen:{uuid.uuid4().hex}")
        # One budget for a tree (issue 38): the runs below that this run's limit blocked go on.
        from .engine import budgets  # (here: `torpor ls` builds a Client and needs no engine)

        below = budgets.reopen_blocked(self.store, run_id, by) if limits else []
        u = st.usage
        now = self.store.now_ms()
        acc = budgets.account(self.store, run_id, now, st)
        tree = {"runs": acc.runs, "tokens": acc.tokens, "steps": acc.steps}
        return {
            "tree": {**tree, "cost_usd": round(acc.cost_usd, 6)},
            "usage": {
                "tokens": u.tokens,
                "cost_usd": round(u.cost_usd, 6),
                "steps": u.steps,
                "wall_clock_s": round((now - st.started_at_ms) / 1000, 1),
            },
            "limits": {**st.budget.model_dump(), **limits},
            "reopened": below,
        }

    def retry(self, run_id: str, by: str, *, step: str | None = None, reason: str = "") -> None:
        """Reopen a run parked ``blocked`` — e.g. by a step that kept killing its process —
        after the cause was fixed: the crashed attempts of ``step`` (of every step still open
        when None) are forgiven, and the run resumes where it stopped. Raises RunFinishedError
        for a run that is not blocked, InboxError for a step that is not open."""
        st = self.state(run_id)
        if st.status is not RunStatus.FINISHED or st.outcome is not Outcome.BLOCKED:
            raise RunFinishedError(
                f"run {run_id!r} is {st.outcome or st.status.value}; only a blocked run is retried"
            )
        if step is not None and (step not in st.steps or st.steps[step].status != "started"):
            open_ = [k for k, v in st.steps.items() if v.status == "started"]
            raise InboxError(
                f"run {run_id!r} has no open step {step!r} (open: {', '.join(open_) or 'none'})"
            )
        body: dict[str, Any] = {"by": by, "reason": reason or f"retried by {by}", "retry": True}
        if step is not None:
            body["step"] = step
        self.store.post_inbox(run_id, "reopen", body, message_id=f"retry:{uuid.uuid4().hex}")
