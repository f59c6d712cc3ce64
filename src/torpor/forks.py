"""Fork a run at a step or a seq without repeating its effects (issue 45): ``torpor fork``,
:meth:`torpor.Client.fork`.

A fork is a new run whose history is its origin's up to the fork point — the events 1..N
copied as they were, settled facts the fork replays and never performs again — followed by
its ``run_forked`` event (N + 1), which records where it came from and what changed: the code
(``workflow``/``module``, run under its own version), the input, whether it redoes the
origin's effects. Then it runs on like any run (``torpor resume``, a worker). The anchors of
this feature re-execute every effect after their fork point blindly — Temporal's reset,
LangGraph's fork from a checkpoint, DBOS's ``fork_workflow(start_step)`` — while torpor
records every effect with its key, so:

- an effect after the fork point runs under an idempotency key derived from the fork
  (:mod:`torpor.engine.forked`), and one whose operation identity equals an effect the origin
  performed after that point is refused (the fork ends ``blocked`` saying so) unless the fork
  was made with ``redo_effects`` (recorded in ``run_forked``, and in each redone intent);
- approvals of the copied history are settled history, never authority for a later effect:
  one that was requested, or approved and not consumed, is raised again with a new nonce,
  bound to the fork's run and store (decisions sign the run, the store and the request's
  nonce: :mod:`torpor.signing`), and the fork waits for a decision of its own;
- the fork point must be *at rest* (:func:`torpor.history.fork_point_problem`): not inside a
  step or an effect, not after the outcome; a point that is not is refused with the nearest
  ones that are. ``--at STEP`` forks just before step STEP first started (DBOS's start step).
  A run that started child runs before the point is not forked (a tree is not copied).

The fork records its origin (``runs.fork_of``), so ``torpor show`` names the origin of a fork
and the forks of an origin.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import serde
from .errors import BadInputError, ConfigError, NotSerializable, PayloadError
from .workflows import check_run_id

if TYPE_CHECKING:  # (imported where used: the client imports this module, and stays light)
    from .history import Event, ForkedEffect, RunState
    from .store.base import Store

#: The input of a fork is its origin's unless given (``input=None`` is an input).
KEEP: Any = object()


@dataclass(frozen=True)
class Fork:
    """A fork made by :func:`fork_run`: its run id, its origin and the origin's seq its
    history was copied up to; ``created`` False when that fork existed already (forking is
    idempotent by run id); ``renewed``: approvals raised again; ``performed``: the origin's
    effects after the fork point, which the fork refuses to perform again unless
    ``redo_effects``."""

    run_id: str
    origin: str
    at_seq: int
    created: bool
    redo_effects: bool = False
    renewed: list[str] = field(default_factory=list)
    performed: list[ForkedEffect] = field(default_factory=list)


def resolve_point(run_id: str, events: list[Event], at: int | str) -> int:
    """The seq a fork of run ``run_id`` (history ``events``) at ``at`` copies up to: a seq
    (an int, or a string of digits), or a step id — just before that step first started.
    BadInputError (one line naming the run) for a seq outside the history or an unknown
    step."""
    from .history import starts_step

    last = events[-1].seq
    if isinstance(at, int) or at.lstrip("-").isdigit():
        seq = int(at)
        if not 1 <= seq <= last:
            raise BadInputError(
                f"run {run_id!r} has no event at seq {seq}: its history is seq 1..{last}"
            )
        return seq
    first = next((e.seq for e in events if e.step_id == at and starts_step(e)), None)
    if first is None:
        steps = list(dict.fromkeys(e.step_id for e in events if starts_step(e)))
        shown = ", ".join(str(s) for s in steps[:8]) + (" …" if len(steps) > 8 else "")
        raise BadInputError(f"run {run_id!r} has no step {at!r} (its steps: {shown or 'none'})")
    return first - 1


def check_point(store: Store, run_id: str, at: int | str) -> int:
    """The seq a fork of run ``run_id`` at ``at`` would copy up to, checked as
    :func:`fork_run` checks it (RunNotFoundError, BadInputError), without making the fork: a
    bad point is reported before anything else is looked for (the code the fork runs on)."""
    rec = store.get_run(run_id)
    events = store.read_events(run_id, 0, rec.last_seq)
    seq = resolve_point(run_id, events, at)
    prefix_state, _, rest = _fold_points(events, seq)
    _check_point(run_id, events, seq, prefix_state, rest)
    return seq


def _fold_points(events: list[Event], seq: int) -> tuple[RunState, RunState, set[int]]:
    """One fold of the whole history: the state at ``seq`` (a copy), the state at the end,
    and the seqs a fork may copy up to."""
    from .history import RunState, apply, fork_point_problem

    state = RunState(run_id=events[0].run_id)
    at: RunState | None = None
    rest = set()
    for e in events:
        apply(state, e)
        if fork_point_problem(state) is None:
            rest.add(e.seq)
        if e.seq == seq:
            at = state.model_copy(deep=True)
    assert at is not None
    return at, state, rest


def _check_point(
    run_id: str, events: list[Event], seq: int, state: RunState, rest: set[int]
) -> None:
    """BadInputError when a fork cannot copy run ``run_id``'s history up to ``seq``."""
    from .history import fork_point_problem, starts_step

    spawned = next(
        (e for e in events[:seq] if (e.step_id or "").startswith("child:") and starts_step(e)),
        None,
    )
    if spawned is not None:
        raise BadInputError(
            f"run {run_id!r} cannot be forked at seq {seq}: it started a child run before "
            f"(step {spawned.step_id!r} at seq {spawned.seq}) and a tree of runs is not "
            f"forked; fork at seq {spawned.seq - 1} or before"
        )
    why = fork_point_problem(state)
    if why is None:
        return
    before = max((s for s in rest if s < seq), default=None)
    after = min((s for s in rest if s > seq), default=None)
    near = " or ".join(f"seq {s}" for s in (before, after) if s is not None)
    raise BadInputError(
        f"run {run_id!r} cannot be forked at seq {seq}: {why}"
        + (f" (the nearest points it can be forked at: {near})" if near else "")
    )


def performed_after(events: list[Event], seq: int, end: RunState) -> list[ForkedEffect]:
    """The effects of ``events`` intended after ``seq`` that were performed (observed,
    reconciled applied) or may have been (in doubt at the end, state ``end``), by operation
    identity, in the order intended."""
    from .history import EffectIntended, EffectObserved, EffectReconciled, ForkedEffect, Verdict
    from .history.state import call_identity

    intents: dict[str, ForkedEffect] = {}
    done: set[str] = set(end.effects_in_doubt())
    for e in events[seq:]:
        p = e.payload
        if isinstance(p, EffectIntended):
            intents[p.key] = ForkedEffect(
                step_id=p.step_id,
                operation=p.operation,
                key=p.key,
                seq=e.seq,
                identity=call_identity(end.plan, p.step_id, p.operation),
            )
        elif isinstance(p, EffectObserved) or (
            isinstance(p, EffectReconciled) and p.verdict is Verdict.APPLIED
        ):
            done.add(p.key)
    return [x for k, x in intents.items() if k in done]


def fork_run(
    store: Store,
    run_id: str,
    at: int | str,
    *,
    fork_id: str | None = None,
    input: Any = KEEP,
    workflow: str | Callable[..., Any] | None = None,
    module: str | None = None,
    redo_effects: bool = False,
    by: str = "user",
    reason: str = "",
) -> Fork:
    """Fork run ``run_id`` at ``at`` (a seq, or a step id: just before it first started) into
    a new run ``fork_id`` (default ``<run_id>-fork-<8 hex>``); see the module docstring.

    ``input``: the fork's input (default: the origin's). ``workflow`` (a registered name or
    function) and ``module`` (imported first, so its workflows register): the code the fork
    runs on, under that code's version; the copied steps are replayed under it, so it must
    walk the recorded path up to the fork point. ``redo_effects``: perform again the
    origin's effects after the fork point (under new keys) instead of refusing them.

    Returns the :class:`Fork`, not executed yet (resume it, or let a worker take it).
    Forking the same run at the same point into an existing ``fork_id`` returns it
    (``created`` False). Raises RunNotFoundError for an unknown run; BadInputError (one line
    naming the run and the seq) for a point outside the history, an unknown step, a point
    not at rest, or one after child runs were started; ConfigError for a bad ``fork_id`` or
    one that is another run; UnknownWorkflowError for code that does not register the
    workflow; PayloadError for an input that is not JSON data.
    """
    from .history import Event, RunForked, fold
    from .history.forks import open_approvals
    from .workflows import get_workflow, import_modules

    rec = store.get_run(run_id)
    events = store.read_events(run_id, 0, rec.last_seq)
    seq = resolve_point(run_id, events, at)
    prefix_state, end_state, rest = _fold_points(events, seq)
    _check_point(run_id, events, seq, prefix_state, rest)
    fid = fork_id if fork_id is not None else f"{run_id[:180]}-fork-{uuid.uuid4().hex[:8]}"
    check_run_id(fid)
    if fid == run_id:
        raise ConfigError(f"a fork of run {run_id!r} needs a run id of its own")

    name = version = mod = ""
    criteria: list[str] | None = None
    if module is not None:
        import_modules([module])
    if workflow is not None or module is not None:
        wf = get_workflow(workflow if workflow is not None else prefix_state.workflow)
        name, version, criteria = wf.name, wf.version, list(wf.criteria)
        mod = module or getattr(wf.fn, "__module__", "") or ""
    new_input = input is not KEEP
    try:
        data = serde.to_jsonable(input) if new_input else None
    except NotSerializable as exc:
        raise PayloadError(fid, None, f"fork input is not serializable: {exc}") from None

    inherited = prefix_state.fork.performed if prefix_state.fork is not None else []
    performed = [*inherited, *performed_after(events, seq, end_state)]
    renewed = {aid: uuid.uuid4().hex for aid in open_approvals(prefix_state)}
    forked = RunForked(
        origin=run_id,
        at_seq=seq,
        by=by,
        reason=reason,
        workflow=name,
        version=version,
        module=mod,
        criteria=criteria,
        input=data,
        new_input=new_input,
        redo_effects=redo_effects,
        performed=performed,
        renewed=renewed,
    )
    copied = [e.model_copy(update={"run_id": fid}) for e in events[:seq]]
    epoch = max(e.epoch for e in copied)
    head = Event(
        run_id=fid, seq=seq + 1, type="run_forked", payload=forked, at_ms=store.now_ms(),
        epoch=epoch,
    )  # fmt: skip
    history = [*copied, head]
    state = fold(history)  # the fork's rule checks the point again (G4)
    result = Fork(fid, run_id, seq, True, redo_effects, sorted(renewed), performed)
    if store.create_fork(fid, run_id, seq, history, state):
        return result
    if store.fork_origin(fid) == (run_id, seq):
        return Fork(fid, run_id, seq, False, redo_effects)
    raise ConfigError(
        f"run {fid!r} exists already and is not a fork of run {run_id!r} at seq {seq}; "
        "choose another --run-id"
    )


__all__ = ["KEEP", "Fork", "fork_run", "performed_after", "resolve_point"]
