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
from ..history import EffectIntended, ForkedEffect, Outcome, RunState, StepFailed
from ..history.state import call_identity
from ..store.base import Store


def origin_repeat(
    store: Store, origin: str, at_seq: int, sid: str, operation: str
) -> ForkedEffect | None:
    """The effect of step ``sid`` performing ``operation`` that run ``origin`` intended after
    its seq ``at_seq`` (the fork point) and did not fail (performed, or may have been), as its
    history says now; None when there is none (or the origin is gone: then the record in
    ``run_forked`` alone answers)."""
    found: ForkedEffect | None = None
    for ev in store.step_events(origin, sid):
        p = ev.payload
        if isinstance(p, EffectIntended) and ev.seq > at_seq and p.operation == operation:
            found = ForkedEffect(step_id=sid, operation=operation, key=p.key, seq=ev.seq)
        elif isinstance(p, StepFailed):
            found = None  # its effect certainly did not happen (reconciled absent, failed)
    return found


#: How far up and down the fork family is followed (a guard against a damaged, cyclic
#: ``fork_of``; a real family is a few runs).
MAX_FAMILY = 200


def relatives(store: Store, run_id: str, forked: bool) -> list[tuple[str, int]]:
    """``(run, split seq)`` of every other run that shares a prefix of ``run_id``'s history
    through forks — its origin and the origin's origin, their other forks, its own forks and
    theirs — with the seq up to which the two histories are the same (copied events keep their
    seqs, so it is the least fork seq on the path between them). ``forked``: whether
    ``run_id`` is a fork (else it has no ancestors: no read for them)."""
    out: list[tuple[str, int]] = []
    seen = {run_id}

    def down(root: str, split: int, skip: str | None) -> None:
        for rec in store.run_forks(root, limit=MAX_FAMILY):
            fid = rec.run_id
            if fid == skip or fid in seen or len(seen) >= MAX_FAMILY:
                continue
            seen.add(fid)
            where = store.fork_origin(fid)
            at = split if where is None else min(split, where[1])
            out.append((fid, at))
            down(fid, at, None)

    up: list[tuple[str, int]] = []
    cur, split = run_id, 1 << 62
    while forked and len(up) < MAX_FAMILY:
        where = store.fork_origin(cur)
        if where is None or where[0] in seen:
            break
        split = min(split, where[1])
        up.append((where[0], split))
        seen.add(where[0])
        cur = where[0]
    out.extend(up)
    down(run_id, 1 << 62, None)
    prev = run_id
    for anc, at in up:  # the other forks of each ancestor (and theirs)
        down(anc, at, prev)
        prev = anc
    return out


def family_repeat(
    store: Store, run_id: str, forked: bool, sid: str, operation: str
) -> tuple[str, ForkedEffect] | None:
    """``(run, effect)``: an effect of step ``sid`` performing ``operation`` that another run
    of ``run_id``'s fork family intended after the point their histories part and did not
    fail; None when there is none. Whichever of two runs that share a prefix performs an
    effect first, the other would repeat it (an origin that goes on after its fork performed
    it; a fork of a fork that performed what the first origin did)."""
    for rel, split in relatives(store, run_id, forked):
        found = origin_repeat(store, rel, split, sid, operation)
        if found is not None:
            return rel, found
    return None


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
        key = explicit or default
        if (
            store is not None
            and key not in state.effects  # (an intent in doubt: reconciled, not refused)
            and not call_identity(state.plan, sid, operation)  # (an agent's call: see below)
        ):
            kin = family_repeat(store, state.run_id, False, sid, operation)
            if kin is not None:
                raise RunStopped(
                    Outcome.BLOCKED,
                    f"effect {sid!r} ({operation}) would repeat effect {kin[1].key!r} that run "
                    f"{kin[0]!r}, a fork of this run, performed (seq {kin[1].seq}); it was not "
                    "performed",
                )
        return key, None
    key = default if explicit is None else f"{state.run_id}/fork:{explicit}"
    identity = call_identity(state.plan, sid, operation)
    same = fork.repeats(sid, operation, explicit, identity)
    where = fork.origin
    known = any(x.step_id == sid for x in fork.performed)  # judged by the record already
    if same is None and store is not None and not known:
        same = origin_repeat(store, fork.origin, fork.at_seq, sid, operation)
    # The rest of the family, by step and operation: an agent's planned call (its identity
    # is its tool and arguments, judged against the origin's record above) is left out.
    if same is None and store is not None and not known and not identity:
        kin = family_repeat(store, state.run_id, True, sid, operation)
        if kin is not None:
            where, same = kin
    if same is None:
        return key, None
    if not fork.redo_effects:
        raise RunStopped(
            Outcome.BLOCKED,
            f"effect {sid!r} ({operation}) would repeat effect {same.key!r} that run "
            f"{where!r} performed (seq {same.seq}) after this fork's point (seq "
            f"{fork.at_seq}); it was not performed. Fork again with --redo-effects to perform "
            "it once more under a new key",
        )
    return key, same.key


__all__ = ["fork_key"]
