"""Escalation of an approval's wait (issue 39): what happens when nobody answers.

``run.approval("ship", [ref], escalate=[after(hours=1, notify=page_oncall),
after(hours=24, approvers=["carol"]), after(hours=48, then="deny")])``: each stage is due a
fixed time after the request was recorded (the store's clock; the due times are recorded with
the request, so a restart, another worker or a :class:`~torpor.testing.FakeClock` sees the same
chain). At a due stage the run records ``wait_escalated`` and:

- ``notify``: runs ``notify(info)`` as an effect (step ``<wait id>/escalate-<n>``, at most once
  per stage, G2; ``info`` is a dict: run_id, approval_id, name, summary, stage, hashes; it may
  take ``idempotency_key``) — e.g. a webhook or an email; ``reconcile`` as for any effect;
- ``approvers``: hands the decision to these people (``required`` of them; default 1): a
  decision by anyone else is refused from then on;
- ``then="deny"``: the approval is denied by the chain (the run ends ``blocked``, or an agent
  replans, as for any denial); ``then="cancel"``: the run is cancelled.

A decision that arrives before a stage is due ends the chain (nothing more escalates). The
approval's own ``timeout`` still ends the wait at its deadline, whatever stage it is in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..errors import ConfigError
from ..history import ApprovalInfo, CancelRequested, Policy, WaitEscalated
from .journal import Journal

#: ``perform(step_id, fn, info)``: run ``fn(info)`` as an effect step of the run (the Run
#: handle's :meth:`~torpor.Run.effect`), returning its result.
Perform = Callable[[str, Callable[..., Any], dict[str, Any]], Any]


@dataclass(frozen=True)
class Escalation:
    """One stage of an escalation chain (make it with :func:`after`)."""

    after_ms: int
    notify: Callable[..., Any] | None = None
    approvers: tuple[str, ...] = ()
    required: int | None = None
    then: str | None = None
    reconcile: Callable[..., Any] | None = None

    @property
    def action(self) -> str:
        if self.notify is not None:
            return "notify"
        return "approvers" if self.approvers else str(self.then)


def after(
    *,
    days: float = 0,
    hours: float = 0,
    minutes: float = 0,
    seconds: float = 0,
    notify: Callable[..., Any] | None = None,
    reconcile: Callable[..., Any] | None = None,
    approvers: Sequence[str] = (),
    required: int | None = None,
    then: str | None = None,
) -> Escalation:
    """A stage due this long after the request: exactly one of ``notify`` (an effect),
    ``approvers`` (hand over, ``required`` of them) or ``then`` (``"deny"`` or ``"cancel"``).
    ConfigError for anything else."""
    after_s = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds).total_seconds()
    chosen = [x for x in (notify, tuple(approvers) or None, then) if x is not None]
    if len(chosen) != 1:
        raise ConfigError(
            "an escalation stage does exactly one thing: after(..., notify=FN), "
            "after(..., approvers=[...]) or after(..., then='deny'|'cancel')"
        )
    if then is not None and then not in ("deny", "cancel"):
        raise ConfigError(f"escalation then={then!r}: use 'deny' or 'cancel'")
    if after_s <= 0:
        raise ConfigError("an escalation stage is due a positive time after the request")
    people = tuple(approvers)
    need = required if required is not None else (1 if people else None)
    if people and (len(set(people)) != len(people) or not 1 <= (need or 1) <= len(people)):
        raise ConfigError(
            f"escalation to approvers {list(people)} requiring {need}: name distinct "
            "approvers and 1 <= required <= their number"
        )
    return Escalation(int(after_s * 1000), notify, people, need, then, reconcile)


def check_chain(stages: Sequence[Escalation]) -> list[Escalation]:
    """The stages in order of their due times (ConfigError when two are due at once, or a
    stage follows a final ``then``)."""
    out = list(stages)
    times = [s.after_ms for s in out]
    if times != sorted(set(times)):
        raise ConfigError("escalation stages must be due at distinct, increasing times")
    if any(s.then for s in out[:-1]):
        raise ConfigError("a stage that denies or cancels must be the last of the chain")
    return out


def due_times(start_ms: int, stages: Sequence[Escalation]) -> list[int]:
    """When each stage is due, for a request recorded at ``start_ms`` (epoch ms)."""
    return [start_ms + s.after_ms for s in stages]


def replayed(j: Journal, aid: str, wid: str, stages: Sequence[Escalation]) -> None:
    """Read back the effects of the notify stages already recorded (a resumed execution asks
    for every recorded step before it writes anything new; none runs again)."""
    info = j.state.approvals.get(aid)
    for n, stage in enumerate(stages[: info.escalations if info else 0]):
        if stage.notify is not None:
            j.recorded(f"{wid}/escalate-{n + 1}", Policy.EFFECT)


def escalate(
    j: Journal,
    aid: str,
    wid: str,
    stages: Sequence[Escalation],
    perform: Perform | None,
) -> str | None:
    """Record every stage of approval ``aid``'s chain that is due now, in order; returns the
    final action reached (``"deny"``: the approval is denied by the chain, ``"cancel"``: the
    run's cancel is requested) or None while the wait goes on. (A decision that arrived after
    a stage was due is judged against that stage even before it is recorded: the fold's
    :func:`~torpor.history.decisions.by_arrival`.)"""
    while True:
        info: ApprovalInfo = j.state.approvals[aid]
        n = info.escalations
        if info.status != "requested" or n >= min(len(stages), len(info.escalate_at_ms)):
            return None
        due = info.escalate_at_ms[n]
        if j.now_ms() < due:
            return None
        stage = stages[n]
        effect_step = None
        if stage.notify is not None:
            if perform is None:
                raise ConfigError(f"approval {aid!r}: a notify stage needs the run's effects")
            effect_step = f"{wid}/escalate-{n + 1}"
            perform(
                effect_step,
                stage.notify,
                {
                    "run_id": j.run_id,
                    "approval_id": aid,
                    "name": info.name,
                    "stage": n + 1,
                    "hashes": list(info.hashes),
                },
            )
            j.asked = wid
        event = WaitEscalated(
            wait_id=wid,
            approval_id=aid,
            stage=n + 1,
            action=stage.action,
            approvers=list(stage.approvers),
            required=stage.required,
            effect_step=effect_step,
            due_at_ms=due,
        )
        if stage.then == "cancel":
            why = f"approval {aid!r}: no decision by stage {n + 1} of its escalation chain"
            j.append(event, CancelRequested(by="escalation", reason=why), by_code=False)
            return "cancel"
        j.append(event)
        if stage.then == "deny":
            return "deny"
