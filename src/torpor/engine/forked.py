"""An effect in a fork (issue 45; :mod:`torpor.forks` makes forks): the key it runs under and
whether it may run at all.

A fork's history begins with its origin's, copied up to the fork point: the effects recorded
there are completed steps of the fork, and replay returns their results — they are never
performed again. An effect the fork reaches after that point is new to the fork:

- it runs under an idempotency key derived from the fork — the default ``<fork run id>/<step
  id>`` already is; an explicit key ``K`` becomes ``<fork run id>/fork:K`` — so an outside
  service that deduplicates by key takes it for a new operation, never for the origin's;
- if its operation identity equals an effect the origin performed after the fork point (the
  same operation, at the same step, under the same explicit key, or — an agent's planned tool
  call — the same tool with the same arguments under another call id; recorded in the fork's
  ``run_forked``), it is refused — the run ends ``blocked``, saying which effect of the origin
  it repeats — unless the fork was made with ``redo_effects``: then it runs, its intent naming
  the origin's key it performs again (``effect_intended.redoes``). The origin may go on after
  the fork was made (a run that waited, resumed later): so the origin's history is also asked
  at the intent (:func:`origin_repeat`, one indexed read of the origin's events of that step).
"""

from __future__ import annotations

from ..errors import RunStopped
from ..history import EffectIntended, ForkedEffect, ForkInfo, Outcome, RunState, StepFailed
from ..history.state import call_identity
from ..store.base import Store


def origin_repeat(store: Store, fork: ForkInfo, sid: str, operation: str) -> ForkedEffect | None:
    """The effect of step ``sid`` performing ``operation`` that the fork's origin intended
    after the fork point and did not fail (performed, or may have been), as its history says
    now; None when there is none (or the origin is gone: then the record in ``run_forked``
    alone answers)."""
    found: ForkedEffect | None = None
    for ev in store.step_events(fork.origin, sid):
        p = ev.payload
        if isinstance(p, EffectIntended) and ev.seq > fork.at_seq and p.operation == operation:
            found = ForkedEffect(step_id=sid, operation=operation, key=p.key, seq=ev.seq)
        elif isinstance(p, StepFailed):
            found = None  # its effect certainly did not happen (reconciled absent, failed)
    return found


def fork_key(
    state: RunState, sid: str, operation: str, explicit: str | None, store: Store | None = None
) -> tuple[str, str | None]:
    """``(key, redoes)`` for the effect of step ``sid`` performing ``operation``, asked under
    the ``explicit`` key (None: the default one), in run ``state``: the key it runs under and
    the origin's key it performs again (None: none). Outside a fork: the key as asked, None.
    RunStopped (blocked) when it would repeat an effect of the origin and the fork was not
    made with ``redo_effects``. ``store``: where the origin's history is asked too
    (:func:`origin_repeat`)."""
    default = f"{state.run_id}/{sid}"
    fork = state.fork
    if fork is None:
        return explicit or default, None
    key = default if explicit is None else f"{state.run_id}/fork:{explicit}"
    same = fork.repeats(sid, operation, explicit, call_identity(state.plan, sid, operation))
    known = any(x.step_id == sid for x in fork.performed)  # judged by the record already
    if same is None and store is not None and not known:
        same = origin_repeat(store, fork, sid, operation)
    if same is None:
        return key, None
    if not fork.redo_effects:
        raise RunStopped(
            Outcome.BLOCKED,
            f"effect {sid!r} ({operation}) would repeat effect {same.key!r} that run "
            f"{fork.origin!r} performed (seq {same.seq}) after this fork's point (seq "
            f"{fork.at_seq}); it was not performed. Fork again with --redo-effects to perform "
            "it once more under a new key",
        )
    return key, same.key


__all__ = ["fork_key"]
