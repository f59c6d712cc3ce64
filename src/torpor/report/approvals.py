"""How a run's report tells who decided an approval, and how that is known (G6): the lines
``torpor show`` prints and the console's run page shows.

Each counted decision is labelled by how it is authenticated — signed by the person's key (or
by a delegate for them), the local shared key ("not attributable"), or a policy ("the start
flag of run X, given by user@host", not a signature) — and a signed one is checked against
this machine's keyring: one that does not verify here is never shown as "approved by".
Refused decisions are counted with the latest reasons.
"""

from __future__ import annotations

from ..config import Settings
from ..errors import ConfigError
from ..history import ApprovalInfo, DecisionInfo
from ..keys import Trust
from .text import local_time as when

Line = tuple[str, str]  # (text, Rich style)


def trust_here(settings: Settings) -> Trust | None:
    """This machine's view of the keyring, or None when it cannot be resolved."""
    try:
        return Trust(settings.keyring_path(), settings.hmac_key())
    except ConfigError:
        return None


def _who(d: DecisionInfo) -> str:
    return d.approver + (f" via delegate {d.delegate}" if d.delegate else "")


def decision_line(
    run_id: str, aid: str, info: ApprovalInfo, d: DecisionInfo, trust: Trust | None
) -> Line:
    """One decision: who, how it is authenticated, and whether it verifies here."""
    verb = {"approve": "approved", "respond": "replied to"}.get(d.decision, "denied")
    if d.edited:  # approve with edit (issue 39): the bytes that run are the edit's
        verb = f"approved an edit (sha256:{d.edited[:12]}, {len(d.edited_content)} chars)"
    if d.decision == "respond":
        verb = f"replied ({d.comment[:60]!r}; nothing runs)"
    at = when(d.decided_at_ms)
    if d.scheme == "policy":
        flag = d.comment or f"the start flag (--auto-approve) of run {run_id}"
        return (f"  {verb} by policy ({d.approver}) at {at}: {flag} — not a signature", "")
    if d.scheme == "ed25519" and (trust is None or not trust.path.exists()):
        where = trust.path if trust is not None else "(unresolved)"
        how = f"signed, key {d.key}; not checked here: no keyring at {where}"
        return (f"  {d.decision} claimed by {_who(d)} at {at} ({how})", "yellow")
    why = trust.check(run_id, aid, info.hashes, d) if trust is not None else "no keyring here"
    if why is not None:
        return (f"  {d.decision} claimed by {_who(d)} at {at} — does NOT verify here: {why}", "red")
    if d.scheme == "hmac":
        how = "HMAC with the local shared key: not attributable"
    elif d.delegate:
        how = f"signed by the delegate's key {d.key}"
    else:
        how = f"signed, key {d.key}"
    return (f"  {verb} by {_who(d)} at {at} ({how})", "")


def approval_lines(
    run_id: str, aid: str, info: ApprovalInfo, trust: Trust | None, *, pending_here: bool
) -> list[Line]:
    """The lines of one approval in ``show``."""
    head = f"{aid}  {info.status}"
    if info.approvers:
        approves = sum(1 for d in info.counted() if d.decision == "approve")
        head += f" ({approves} of {info.required} from {', '.join(info.approvers)})"
    lines: list[Line] = [(head, "bold" if info.status == "requested" else "")]
    lines += [(f"  sha256:{h}", "") for h in info.hashes]
    lines += [decision_line(run_id, aid, info, d, trust) for d in info.counted()]
    if info.escalate_at_ms:  # its escalation chain (issue 39): stages reached, the next one
        nxt = info.escalate_at_ms[info.escalations :]
        more = f"; next at {when(nxt[0])}" if nxt and info.status == "requested" else ""
        lines.append(
            (
                f"  escalation: {info.escalations} of {len(info.escalate_at_ms)} stages{more}",
                "yellow",
            )
        )
    if info.refused:
        lines.append((f"  refused: {info.refused} decision(s); latest:", "red"))
        lines += [(f"    {r}", "red") for r in info.refusals]
    if pending_here:
        lines.append(
            (
                f"  decide: torpor approve {run_id} {aid} --as NAME --hash {info.hashes[0][:12]}"
                f"   (or: torpor deny {run_id} {aid} --as NAME)",
                "cyan",
            )
        )
    return lines


__all__ = ["approval_lines", "decision_line", "trust_here"]
