"""What a person does in the console, through :class:`~torpor.Client`, each recorded with the
person who did it: decide an approval (signed by the console's delegate key for the
authenticated person), revoke, resolve an effect in doubt, cancel, signal, raise a budget,
retry a parked run.

Attribution: decisions carry the person as ``approver`` and the console as ``delegate``, in
the signed bytes; revocations, resolutions, cancels, budget changes and retries carry the
person as ``by``; a signal's message id is ``console:PERSON:…`` (recorded in the history as its
``signal_id``). Every action, done or refused, is also written to the audit log (JSON lines).
No web framework here.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..client import Client
from ..config import Settings
from ..errors import BadInputError, InboxError, KeyringError, StaleContentError, TorporError
from ..keys import FileSigner, Keyring, key_file
from ..serde import sha256_hex
from ..signing import fingerprint

log = logging.getLogger("torpor.console")


@dataclass(frozen=True)
class Delegate:
    """The console's signing identity: keyring name ``name`` (a ``delegate-for=`` line) and
    its private key file ``key``."""

    name: str
    key: Path
    fingerprint: str

    @classmethod
    def load(cls, settings: Settings, name: str, key: Path | None = None) -> Delegate:
        """Check the delegate before serving (KeyringError saying what to fix): its private key
        exists, and the trusted keyring lists that very key as a delegate of ``name``."""
        path = key or key_file(settings.config_dir(), name)
        if not path.exists():
            raise KeyringError(
                f"no private key for the console's delegate {name!r} at {path}: make one with "
                f"`torpor keys init --as {name}`, then give its keyring line "
                f"`delegate-for=NAME,...` (see the README, Console)"
            )
        fp = fingerprint(FileSigner(path).blob)
        ring_path = settings.keyring_path()
        ring = Keyring.load(ring_path)
        entry = next((e for e in ring.named(name) if e.fingerprint == fp), None)
        if entry is None:
            raise KeyringError(
                f"the keyring {ring_path} does not list the key {fp} of {path} under {name!r}"
            )
        if not entry.delegate_for:
            raise KeyringError(
                f"{name!r} in {ring_path} is not a delegate: its line needs "
                "delegate-for=NAME,... (the people the console may sign for)"
            )
        return cls(name, path, fp)

    def signs_for(self, settings: Settings, person: str) -> bool:
        """Whether the keyring (read now: it may have changed) lets this key sign for
        ``person``."""
        ring = Keyring.load(settings.keyring_path())
        return any(
            e.fingerprint == self.fingerprint and e.may_sign_for(person)
            for e in ring.named(self.name)
        )


class Audit:
    """Appends one JSON line per action (done or refused) to ``path`` (when given) and logs
    it to the ``torpor.console`` logger."""

    def __init__(self, path: Path | None = None):
        self.path = path
        self._lock = threading.Lock()

    def record(self, user: str, action: str, run_id: str, result: str, **detail: Any) -> None:
        entry = {
            "at": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "user": user,
            "action": action,
            "run_id": run_id,
            "result": result,
            **detail,
        }
        line = json.dumps(entry, ensure_ascii=False, default=str)
        log.info("audit %s", line)
        if self.path is not None:
            with self._lock, self.path.open("a") as f:
                f.write(line + "\n")


def _number(field: str, text: str, kind: type) -> Any:
    text = (text or "").strip()
    if not text:
        return None
    try:
        value = kind(text)
    except ValueError:
        raise BadInputError(f"{field} must be a number, not {text!r}") from None
    if value <= 0:
        raise BadInputError(f"{field} must be positive")
    return value


def _json(field: str, text: str) -> Any:
    text = (text or "").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(
            f"{field} is not valid JSON ({exc.msg} at column {exc.colno})"
        ) from None


class Steering:
    """The console's actions for the person ``user``. Each returns what happened (one line)
    or raises a TorporError saying why nothing was done; both are audited."""

    def __init__(self, client: Client, settings: Settings, audit: Audit, delegate: Delegate | None):
        self.client = client
        self.settings = settings
        self.audit = audit
        self.delegate = delegate

    def _do(self, user: str, action: str, run_id: str, detail: dict[str, Any], fn: Any) -> str:
        try:
            message: str = fn()
        except TorporError as exc:
            self.audit.record(user, action, run_id, f"refused: {exc}", **detail)
            raise
        self.audit.record(user, action, run_id, "done", **detail)
        return message

    # --------------------------------------------------------------- approvals

    def why_not_decide(self, user: str, approvers: list[str], decided_by: list[str]) -> str | None:
        """Why ``user`` cannot decide here (None: they can)."""
        if self.delegate is None:
            return (
                "this console signs no decisions: it was started without --delegate (decide "
                "with `torpor approve` and your own key)"
            )
        if approvers and user not in approvers:
            return f"only {', '.join(approvers)} may decide this approval"
        if user in decided_by:
            return "you already decided this approval"
        if not self.delegate.signs_for(self.settings, user):
            return (
                f"the keyring does not let the console's key ({self.delegate.name}) sign for "
                f"{user}: add {user} to its delegate-for list"
            )
        return None

    def decide(
        self,
        user: str,
        run_id: str,
        approval_id: str,
        decision: str,
        seen: list[str],
        comment: str = "",
        edited: str | None = None,
        edited_sha256: str = "",
    ) -> str:
        """Approve or deny exactly the content ``seen`` (the hashes the page showed), signed by
        the delegate key for ``user``. StaleContentError when the approval no longer binds
        exactly ``seen`` or is no longer pending — the page was rendered before the content
        changed — and nothing is sent. ``respond``: ``comment`` is a reply for the model
        (nothing runs); ``edited``: approve these bytes instead, refused unless their sha256 is
        ``edited_sha256``, the one the diff page showed (issue 39)."""
        detail = {"approval_id": approval_id, "decision": decision, "hashes": seen}
        if edited is not None:
            detail["edited"] = edited_sha256

        def go() -> str:
            if decision not in ("approve", "deny", "respond"):
                raise BadInputError(f"decision must be approve or deny, not {decision!r}")
            if edited is not None and sha256_hex(edited) != edited_sha256:
                raise StaleContentError(
                    "nothing was sent: the edit is not the one whose diff you reviewed; "
                    "review the edit again"
                )
            if not seen:
                raise BadInputError("the decision names no content: review the page again")
            st = self.client.state(run_id)
            info = st.approvals.get(approval_id)
            pending = {k: v.hashes for k, v in st.open_approvals().items()}
            if info is None or approval_id not in pending or sorted(info.hashes) != sorted(seen):
                now = (
                    "; it now asks about "
                    + ", ".join(
                        f"{k} (sha256:{', '.join(h[:12] for h in v)})" for k, v in pending.items()
                    )
                    if pending
                    else ""
                )
                state = f"is {info.status}" if info is not None else "does not exist"
                if info is not None and info.status == "requested":
                    state = (
                        f"binds sha256:{', '.join(h[:12] for h in info.hashes)}"
                        if approval_id in pending
                        else "timed out without a decision"
                    )
                raise StaleContentError(
                    f"nothing was sent: the content changed since you viewed it — approval "
                    f"{approval_id} {state}, not the sha256:"
                    f"{', '.join(h[:12] for h in seen)} you reviewed{now}. Review it again."
                )
            why = self.why_not_decide(user, info.approvers, [d.approver for d in info.decisions])
            if why is not None:
                raise InboxError(f"nothing was sent: {why}")
            assert self.delegate is not None
            aid, hashes = self.client.decide(
                run_id,
                approval_id,
                decision,
                user,
                expect_hash=seen[0],
                comment=comment,
                delegate=self.delegate.name,
                key=self.delegate.key,
                edited=edited,
            )
            verb = {"approve": "approved", "respond": "replied to"}.get(decision, "denied")
            if edited is not None:
                verb = f"approved the edit (sha256:{edited_sha256[:12]}) of"
            return (
                f"{verb} {aid} as {user} (signed by the console's key {self.delegate.name} for "
                f"you): sha256:{', sha256:'.join(hashes)}. What happens next: the decision "
                f"waits in the run's inbox until a worker (torpor worker) or torpor resume "
                f"{run_id} picks the run up; the console runs nothing itself"
            )

        return self._do(user, decision, run_id, detail, go)

    def revoke(self, user: str, run_id: str, approval_id: str, reason: str = "") -> str:
        def go() -> str:
            hashes = self.client.revoke(run_id, approval_id, user, reason)
            return f"revoked {approval_id} (it bound sha256:{', sha256:'.join(hashes)})"

        return self._do(user, "revoke", run_id, {"approval_id": approval_id}, go)

    # --------------------------------------------------------------- steering

    def resolve(
        self, user: str, run_id: str, key: str, verdict: str, reason: str, result: str = ""
    ) -> str:
        detail = {"key": key, "verdict": verdict}

        def go() -> str:
            if verdict not in ("applied", "absent"):
                raise BadInputError("a resolution is applied or absent")
            if not reason.strip():
                raise BadInputError("say how you know (the reason is recorded)")
            value = _json("result", result)
            if value is not None and verdict != "applied":
                raise BadInputError("a result goes with applied")
            self.client.resolve(run_id, key, verdict, user, result=value, reason=reason)
            return f"effect {key} resolved as {verdict}; a worker continues the run"

        return self._do(user, "resolve", run_id, detail, go)

    def steer(self, user: str, run_id: str, text: str, interrupt: bool = False) -> str:
        """An operator's message to a running agent, from ``user`` (issue 39)."""

        def go() -> str:
            mid = self.client.steer(
                run_id,
                text,
                by=user,
                interrupt=interrupt,
                message_id=f"console:{user}:steer:{uuid.uuid4().hex}",
            )
            how = "interrupts a reply in flight; " if interrupt else ""
            return f"steering message {mid} sent: {how}the agent sees it before its next call"

        return self._do(user, "steer", run_id, {"interrupt": interrupt}, go)

    def cancel(self, user: str, run_id: str, reason: str = "") -> str:
        def go() -> str:
            self.client.cancel(run_id, by=user, reason=reason)
            return "cancel requested: the run ends cancelled at its next boundary"

        return self._do(user, "cancel", run_id, {"reason": reason}, go)

    def signal(
        self, user: str, run_id: str, name: str, wait_id: str = "", payload: str = ""
    ) -> str:
        detail = {"name": name, "wait_id": wait_id}

        def go() -> str:
            if not name.strip() and not wait_id.strip():
                raise BadInputError("give the signal's name, or the id of the wait it answers")
            value = _json("payload", payload)
            d = self.client.send_signal(
                run_id,
                name.strip() or None,
                value,
                message_id=f"console:{user}:{uuid.uuid4().hex}",
                wait_id=wait_id.strip() or None,
            )
            detail["message_id"] = d.message_id
            if d.status == "waiting":
                return f"signal {d.name!r} goes to wait {d.wait_id}, which is waiting for it"
            if d.status == "late":
                return f"signal {d.name!r} arrived after the deadline of wait {d.wait_id}: buffered"
            return f"signal {d.name!r} buffered: no wait for it yet"

        return self._do(user, "signal", run_id, detail, go)

    def budget(
        self,
        user: str,
        run_id: str,
        *,
        tokens: str = "",
        cost: str = "",
        steps: str = "",
        wall_clock: str = "",
        reason: str = "",
    ) -> str:
        detail: dict[str, Any] = {}

        def go() -> str:
            limits = {
                "tokens": _number("tokens", tokens, int),
                "cost_usd": _number("cost", cost, float),
                "steps": _number("steps", steps, int),
                "wall_clock_s": _number("wall-clock seconds", wall_clock, float),
            }
            detail.update({k: v for k, v in limits.items() if v is not None})
            info = self.client.reopen(
                run_id, user, reason=reason or f"budget raised in the console by {user}", **limits
            )
            lim = info["limits"]
            shown = ", ".join(f"{k} {v}" for k, v in lim.items() if v is not None)
            return f"budget set ({shown or 'no limits'}); a worker continues the run"

        return self._do(user, "budget", run_id, detail, go)

    def retry(self, user: str, run_id: str, step: str = "", reason: str = "") -> str:
        def go() -> str:
            self.client.retry(run_id, user, step=step.strip() or None, reason=reason)
            what = f"step {step.strip()!r}" if step.strip() else "every open step"
            return f"reopened: the crashed attempts of {what} are forgiven"

        return self._do(user, "retry", run_id, {"step": step}, go)


__all__ = ["Audit", "Delegate", "Steering"]
