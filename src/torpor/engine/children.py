"""Child runs (DESIGN.md §1, child run; G14): a run started by a step of another run, which
waits on it durably.

- **Spawn** (:func:`spawn`): the child is a full run — its own history, lease, worker, retries
  and approvals — created with ``run_started.parent`` naming the parent, then recorded in the
  parent as a step (``child:<name>``, result ``{"run_id", "workflow"}``). Its run id is derived
  from the parent's and the step's (:func:`child_run_id`) unless given, and creating a run is
  idempotent: a parent that dies between creating the child and recording the step finds the
  same child when it resumes, never a second one.
- **Wait** (:func:`wait`): a wait of kind ``children`` (a step ``children``, like a signal
  wait): the parent holds no lease and no process. When a child's outcome is recorded, the
  store posts a ``child`` message to the parent's inbox and wakes it *in the same transaction*
  (:func:`torpor.store.children.tell_parent`), so no crash leaves a parent asleep over a
  finished child; it is woken once its wait may be over (the count of outcomes it still
  needs, kept on its row by :meth:`~torpor.store.base.ChildRows.await_children` before it
  suspends), so a fan-in wakes it once, not once per child. The wait is decided by the
  children's run rows, read when the parent wakes: it ends once ``need`` of them (all, the
  first, any n) reached a **final** outcome (``succeeded``, ``succeeded_with_warnings``,
  ``stopped_safe``, ``failed``, ``cancelled``); the parent's step records each child's
  outcome, reason and result, so replay never asks again.
- **Tree rules**: a child's failure is a value (:class:`ChildResult`), not an exception. A
  child that ends ``unresolved`` or ``blocked`` does not end a wait — a person may still settle
  it and it may go on — and the parent, still waiting, needs attention naming it (``ls``,
  ``show``). A parent's code that returns while children are unfinished (or unresolved,
  blocked) first waits for them (:func:`join`): no parent finishes ``succeeded`` over a child
  that is not finished, and the fold refuses success over a child reported unresolved or
  blocked. A parent that ends ``failed``, ``cancelled`` or ``stopped_safe`` cancels every
  unfinished child (:func:`cancel_unfinished`; each child records the cancel, and cancels its
  own children in turn); a parent that ends ``unresolved`` or ``blocked`` may be reopened and
  leaves its children running.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import faults, serde
from ..errors import (
    ConfigError,
    NonDeterminismError,
    NotSerializable,
    PayloadError,
    RunFinishedError,
    Suspended,
    TorporError,
)
from ..history import (
    REOPENABLE,
    AttentionNeeded,
    Outcome,
    Policy,
    RunStarted,
    StepCompleted,
    StepStarted,
    WaitCompleted,
    WaitStarted,
)
from ..store.base import Dispatch, RunRecord
from ..workflows import check_run_id, get_workflow
from .journal import Journal
from .waits import GUARD_RETRIES

#: Outcomes that end a wait on a child: it will not change unless someone starts it again.
FINAL = frozenset(o.value for o in Outcome if o not in REOPENABLE)
#: Longest run id a derived child run id may have (the runtime's limit for any run id).
MAX_CHILD_ID_CHARS = 200
#: Parent outcomes that cancel the parent's unfinished children.
CANCELS_CHILDREN = frozenset({Outcome.FAILED, Outcome.CANCELLED, Outcome.STOPPED_SAFE})


@dataclass(frozen=True)
class Child:
    """A child run started by :meth:`torpor.Run.spawn`: its ``run_id``, its ``workflow``, and
    the parent's ``step_id`` that started it."""

    run_id: str
    workflow: str
    step_id: str


@dataclass(frozen=True)
class ChildResult:
    """What a wait on children found for one child: ``outcome`` (an Outcome value, or None when
    the child had not finished when the wait ended — a ``first``/``n`` wait), the outcome's
    ``reason`` and the child's ``result`` (as its workflow returned it). A child's failure is
    a value: ``ok`` tells success from the rest."""

    run_id: str
    workflow: str
    outcome: str | None
    reason: str = ""
    result: Any = None

    @property
    def done(self) -> bool:
        """The child reached a final outcome."""
        return self.outcome is not None

    @property
    def ok(self) -> bool:
        """The child succeeded (with or without warnings)."""
        return self.outcome in ("succeeded", "succeeded_with_warnings")


def child_run_id(parent: str, step_id: str) -> str:
    """The run id of the child started by step ``step_id`` of run ``parent``:
    ``<parent>.<step id>`` (``/`` in a step id becomes ``%2F``: run ids may not hold it), or,
    when that is longer than :data:`MAX_CHILD_ID_CHARS`, the parent's first 100 characters
    and a hash of both. Deterministic: a resumed parent finds the same child."""
    sid = step_id.replace("%", "%25").replace("/", "%2F")
    rid = f"{parent}.{sid}"
    if len(rid) <= MAX_CHILD_ID_CHARS and rid.isprintable():
        return rid
    digest = hashlib.sha256(f"{parent}\0{step_id}".encode()).hexdigest()[:32]
    return f"{parent[:100]}.child-{digest}"


def spawn(
    j: Journal,
    workflow: str | Callable[..., Any],
    input: Any,
    *,
    run_id: str | None,
    dispatch: Dispatch | None,
    name: str | None,
) -> Child:
    """Start a child run once per spawn (see the module docstring); return its handle.
    ConfigError when ``run_id`` names a run that is not this run's child (or is this run),
    PayloadError when ``input`` cannot be recorded, UnknownWorkflowError for an unknown
    workflow."""
    wf = get_workflow(workflow)
    sid = j.next_id(f"child:{name or wf.name}")
    j.boundary()
    comp = j.recorded(sid, Policy.READ)
    if comp is not None:
        r = comp.result
        return Child(str(r["run_id"]), str(r["workflow"]), sid)
    cid = run_id if run_id is not None else child_run_id(j.run_id, sid)
    check_run_id(cid)
    if cid == j.run_id:
        raise ConfigError(f"run {cid!r} cannot be its own child")
    try:
        data = serde.to_jsonable(input)
    except NotSerializable as exc:
        raise PayloadError(j.run_id, sid, f"child run input is not serializable: {exc}") from None
    started = RunStarted(
        workflow=wf.name,
        version=wf.version,
        input=data,
        criteria=list(wf.criteria),
        goal=wf.goal,
        module=getattr(wf.fn, "__module__", "") or "",
        parent=j.run_id,
    )
    created = j.store.create_run(cid, started, dispatch, task_type=wf.task_type)
    faults.point("child.created")
    if not created:
        parent = j.store.run_parent(cid)
        rec = j.store.get_run(cid)
        if parent != j.run_id or rec.workflow != wf.name:
            raise ConfigError(
                f"run {j.run_id!r} step {sid!r}: run {cid!r} exists and is not its child "
                f"(parent {parent!r}, workflow {rec.workflow!r}); give the child another run_id"
            )
    j.append(
        StepCompleted(
            step_id=sid,
            policy=Policy.READ,
            attempt=j.next_attempt(sid),
            purpose=f"start child run {cid} ({wf.name})",
            result={"run_id": cid, "workflow": wf.name},
        )
    )
    faults.point("child.spawned")
    return Child(cid, wf.name, sid)


def need_of(until: str | int, n: int) -> int:
    """How many of ``n`` children a wait ``until`` needs: ``"all"``, ``"first"`` or a count
    1..n (ConfigError otherwise)."""
    if until == "all":
        return n
    if until == "first":
        return 1
    if isinstance(until, int) and not isinstance(until, bool) and 1 <= until <= n:
        return until
    raise ConfigError(f"until={until!r}: wait for 'all', 'first' or a count 1..{n} of {n} children")


def wait(
    j: Journal, children: Sequence[Child], until: str | int, *, cancel_rest: bool = False
) -> list[ChildResult]:
    """Wait durably until ``until`` of ``children`` reached a final outcome (see the module
    docstring); their results in the order given. ``cancel_rest``: cancel those not done when
    the wait ends (a ``first``/``n`` race). ConfigError for no children, a child of another
    run, or a bad ``until``."""
    kids = list(children)
    if not kids:
        raise ConfigError("wait on children needs at least one child")
    ids = [c.run_id for c in kids]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"wait on children lists a child twice: {ids}")
    need = need_of(until, len(kids))
    results = _wait(j, j.next_id("children"), ids, need)
    if cancel_rest:
        cancel(j, [r.run_id for r in results if not r.done], "the parent no longer needs it")
    return results


def _wait(j: Journal, wid: str, ids: list[str], need: int) -> list[ChildResult]:
    j.boundary()
    comp = j.recorded(wid, Policy.READ)
    if comp is None:
        j.sync()
        if j.state.wait is None:
            what = f"{need} of {len(ids)} child run(s)" if need < len(ids) else "child run(s)"
            j.append(
                StepStarted(step_id=wid, policy=Policy.READ, purpose=f"wait for {what}"),
                WaitStarted(
                    wait_id=wid,
                    kind="children",
                    name=",".join(ids)[:200],
                    reason=what,
                    children=ids,
                    need=need,
                ),
            )
            faults.point("wait.started")
        _settle(j, wid)
        comp = j.recorded(wid, Policy.READ)
        assert comp is not None, wid
    # The recorded results of the children asked for, in the order asked: a replay may ask
    # for fewer than were recorded (a batch's delegation whose outcome was settled before a
    # crash is not waited for again), never for one the wait did not record.
    got = {str(x["run_id"]): x for x in comp.result["children"]}
    missing = [i for i in ids if i not in got]
    if missing:
        raise NonDeterminismError(
            f"wait {wid!r} is recorded for children {sorted(got)}; the code now waits for "
            f"{missing} too"
        )
    return [
        ChildResult(
            run_id=str(x["run_id"]),
            workflow=str(x["workflow"]),
            outcome=x.get("outcome"),
            reason=str(x.get("reason", "")),
            result=j.value(wid, x.get("result"), "child result"),
        )
        for x in (got[i] for i in ids)
    ]


def _settle(j: Journal, wid: str) -> None:
    """End the open children wait ``wid`` if enough children are final (reading their rows),
    else note the children that hold it (unresolved, blocked) and suspend."""
    w = j.state.wait
    if w is None or w.wait_id != wid or w.kind != "children":
        raise NonDeterminismError(
            f"run {j.run_id!r} waits on {w.wait_id if w else None!r}, but the code reached "
            f"wait {wid!r} on children"
        )
    for _ in range(GUARD_RETRIES):
        rows = {r.run_id: r for r in j.store.child_runs(j.run_id)}
        final = [c for c in w.children if _final(rows.get(c))]
        if len(final) >= w.need:
            break
        held = [c for c in w.children if _held(rows.get(c))]
        if held:
            _note_held(j, held, rows)
        # How many more outcomes wake this run (counted under its row's lock): a child
        # that ended since the rows were read is counted there, and then it is enough.
        if j.store.await_children(j.run_id, list(w.children), w.need) > 0:
            raise Suspended(f"waiting for {w.reason}")
    else:
        raise TorporError(f"run {j.run_id!r} wait {wid!r}: its children keep changing")
    out = []
    for c in w.children:
        rec = rows.get(c)
        item: dict[str, Any] = {"run_id": c, "workflow": rec.workflow if rec else "?"}
        if c in final:
            st = j.store.load(c)
            item.update(
                outcome=st.outcome.value if st.outcome else None,
                reason=st.outcome_reason,
                result=st.result,
            )
        out.append(item)
    j.append(
        WaitCompleted(wait_id=wid, via="children"),
        StepCompleted(step_id=wid, policy=Policy.READ, result={"children": out}),
    )
    faults.point("wait.completed")


def _final(rec: RunRecord | None) -> bool:
    return rec is not None and rec.status == "finished" and rec.outcome in FINAL


def _held(rec: RunRecord | None) -> bool:
    return rec is not None and rec.status == "finished" and rec.outcome not in FINAL


def _note_held(j: Journal, held: list[str], rows: dict[str, RunRecord]) -> None:
    """Say durably why the parent cannot go on: the children a person must settle."""
    parts = []
    for c in held[:3]:
        st = j.store.load(c)
        why = f": {st.outcome_reason[:200]}" if st.outcome_reason else ""
        parts.append(f"child run {c} is {rows[c].outcome}{why}")
    more = f" (and {len(held) - 3} more)" if len(held) > 3 else ""
    detail = "; ".join(parts) + more + f" — settle it (torpor show {held[0]})"
    if j.state.attention != detail:
        j.append(AttentionNeeded(detail=detail, by=j.lease.owner), by_code=False)


def spawned(j: Journal) -> bool:
    """Whether this execution's code started children (a spawn always asks for an id)."""
    return any(k.startswith("child:") for k in j.counters)


def join(j: Journal) -> None:
    """The parent's code returned: wait for every child not yet final (an implicit wait,
    step ``children:join``), so the parent never finishes over an unfinished, unresolved or
    blocked child. Replays a recorded join; records nothing when every child is final."""
    wid = j.next_id("children:join")
    if j.recorded(wid, Policy.READ) is not None:
        return
    w = j.state.wait
    if w is not None and w.wait_id == wid:
        _wait(j, wid, list(w.children), w.need)
        return
    open_ = [r.run_id for r in j.store.child_runs(j.run_id) if r.outcome not in FINAL]
    if open_:
        _wait(j, wid, open_, len(open_))


def cancel(j: Journal, ids: Sequence[str], why: str) -> None:
    """Post a cancel to each of children ``ids`` not finished (once per parent and child: the
    message id names both, so a replay or a crash and resume posts nothing twice)."""
    for cid in ids:
        try:
            j.store.post_inbox(
                cid,
                "cancel",
                {"by": f"parent run {j.run_id}", "reason": why},
                message_id=f"cancel:{j.run_id}>{cid}",
            )
        except RunFinishedError:
            continue  # it finished first: nothing to cancel
    if ids:
        faults.point("children.cancelled")


def cancel_unfinished(j: Journal, outcome: Outcome) -> None:
    """The parent ends ``outcome``: cancel its unfinished children (see the module
    docstring), before the outcome is recorded (a crash in between posts them again)."""
    if outcome not in CANCELS_CHILDREN:
        return
    ids = [r.run_id for r in j.store.child_runs(j.run_id) if r.status != "finished"]
    cancel(j, ids, f"its parent run {j.run_id} ended {outcome.value}")


__all__ = [
    "FINAL",
    "Child",
    "ChildResult",
    "cancel",
    "cancel_unfinished",
    "child_run_id",
    "join",
    "need_of",
    "spawn",
    "spawned",
    "wait",
]
