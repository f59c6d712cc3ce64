"""The transition rule of a fork (issue 45): ``run_forked`` follows the events a fork copied
from its origin, and only at a point where the origin was at rest. Registered into
:data:`torpor.history.fold.RULES` like every other rule; the fork is made by
:mod:`torpor.forks`.

A fork point is *at rest* (:func:`fork_point_problem`) when the copied history ends between two
of the origin's transitions that a crash could also have left it at: no outcome yet, no
effect that may be happening (intended, not yet observed, or unknown), and no step in
progress but the one of an open wait (a fork of a run that waits, waits too). What the fork
changes when it begins:

- the code and input it runs on, when given (``workflow``, ``version``, ``module``,
  ``input``); the copied steps are replayed under it like a compatible version's;
- every approval of the copied history that a decision could still make or has made
  authority (``requested``, or ``approved`` and not consumed) is raised again: its decisions
  are set aside and it takes a new nonce, so that a decision signed for the origin — which
  names the origin's run and the request's nonce (:mod:`torpor.signing`) — never authorizes
  the fork (G6, G16). A consumed, denied or revoked approval is settled history;
- a cancel asked of the origin is not the fork's;
- the state remembers the origin's effects after the fork point (:class:`~.state.ForkInfo`).
"""

from __future__ import annotations

from .events import Event, RunStatus
from .fold import Refuse, rule
from .fork_events import RunForked
from .state import ForkInfo, RunState


def fork_point_problem(s: RunState) -> str | None:
    """Why a fork cannot begin where ``s`` is (one line naming the seq), or None when ``s`` is
    at rest (see the module docstring)."""
    if s.status is RunStatus.FINISHED:
        return f"at seq {s.seq} the run had its outcome ({s.outcome}); fork before it"
    doubt = s.effects_in_doubt()
    if doubt:
        return (
            f"at seq {s.seq} effect {doubt[0]!r} may be happening (intended, not observed): "
            "fork before its step started or after it settled"
        )
    wait_step = s.wait.wait_id if s.wait is not None else None
    busy = [k for k, v in s.steps.items() if v.status == "started" and k != wait_step]
    if busy:
        return (
            f"at seq {s.seq} step {busy[0]!r} is in progress: fork before it started or after "
            "it ended"
        )
    if s.wait is not None and s.wait.kind == "children":
        return f"at seq {s.seq} the run waits on child runs: a tree of runs is not forked"
    return None


def open_approvals(s: RunState) -> list[str]:
    """Ids of the approvals a fork at ``s`` raises again: requested, or approved and not yet
    consumed (a decision that could still authorize an effect)."""
    return sorted(k for k, v in s.approvals.items() if v.status in ("requested", "approved"))


@rule(RunForked)
def _run_forked(s: RunState, p: RunForked, e: Event, refuse: Refuse) -> None:
    if p.at_seq > s.seq:
        raise refuse(f"run_forked at seq {e.seq} cannot follow events copied up to {p.at_seq}")
    why = fork_point_problem(s)
    if why is not None:
        raise refuse(why)
    raised = open_approvals(s)
    if sorted(p.renewed) != raised or not all(p.renewed.values()):
        raise refuse(
            f"a fork raises every open approval again with a new nonce: {raised or 'none'}, "
            f"not {sorted(p.renewed) or 'none'}"
        )
    for aid in raised:
        a = s.approvals[aid]
        a.status, a.decisions, a.nonce = "requested", [], p.renewed[aid]
        a.approver = a.signature = a.consumed_by = a.arrived_at_ms = None
        a.decided_at_ms, a.comment = 0, ""
    if p.workflow:
        s.workflow = p.workflow
    if p.version:
        s.version = p.version
    if p.module:
        s.module = p.module
    if p.criteria is not None:
        s.criteria = list(p.criteria)
    if p.new_input:
        s.input = p.input
    s.cancel_requested, s.cancel_reason = False, ""
    s.owner = None
    if s.status is RunStatus.RUNNING:
        s.status = RunStatus.PENDING
    s.fork = ForkInfo(
        origin=p.origin,
        at_seq=p.at_seq,
        seq=e.seq,
        redo_effects=p.redo_effects,
        performed=list(p.performed),
    )


__all__ = ["fork_point_problem", "open_approvals"]
