"""Replay: what an execution must give back from the history instead of doing again (G1), and
the check that code resumed under a changed version still walks the recorded path.

On resume the workflow function runs again from the top (or from the state restored by
``run.restore``); every primitive whose completion is recorded returns it. The completions
recorded after the latest user checkpoint are read once (:meth:`Replay.load`, one query); a step
not among them is looked up by its id only when the cache cannot be complete (a checkpoint
pruned earlier ones). A step found to have no completion is *proved new* under this lease: its
start needs no index probe in the store.

Replay under changed code (a compatible version, or a version change recorded with the first
new write): the code must ask for every completion recorded after the restore point before it
writes anything new; otherwise :meth:`Replay.diverged` names the step it asked for and the
recorded one it should have reached, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import NonDeterminismError
from ..history import Event, Payload, Policy, StepCompleted, VersionAccepted, starts_step
from ..store.base import Completion, Store


class Replay:
    """The replay cache and gate of one execution of run ``run_id`` (internal to the engine).

    ``end`` is the seq of the last completion recorded by earlier executions (patch markers
    aside); ``at`` how far the code has asked. ``gate`` is up until the first new write passed
    :meth:`gate_new_write`; ``pending_version`` is recorded with that write.
    """

    def __init__(self, store: Store, run_id: str, workflow: str, version: str):
        self.store = store
        self.run_id = run_id
        self.workflow = workflow
        self.version = version
        self.cache: dict[str, Completion] = {}
        self.lookups = True
        #: Steps found to have no recorded completion (proved new under this lease).
        self.never: set[str] = set()
        #: Steps completed by this execution (their results are read back if asked again).
        self.done: set[str] = set()
        self.end = 0
        self.at = 0
        self.ordered = True
        self.gate = False
        self.pending_version: VersionAccepted | None = None

    def load(
        self, after_seq: int, steps_completed: int, *, ordered: bool, from_version: str
    ) -> None:
        """Read the completions recorded after ``after_seq`` (the latest user checkpoint).

        ``ordered``: the code replays in recorded order (not an async workflow whose concurrent
        steps may interleave differently: then divergence is checked at the end only).
        ``from_version``: the version the run is recorded under; another one is accepted with
        the first new write."""
        self.cache = self.store.completions_after(self.run_id, after_seq)
        self.lookups = steps_completed > len(self.cache)
        self.end = max(
            (c.seq for c in self.cache.values() if not c.step_id.startswith("patch:")), default=0
        )
        self.ordered = ordered
        if from_version != self.version:
            self.pending_version = VersionAccepted(
                from_version=from_version, to_version=self.version
            )
        self.gate = self.end > 0 or self.pending_version is not None

    def completion(self, sid: str) -> Completion | None:
        """The recorded completion of step ``sid``, or None (then proved new)."""
        comp = self.cache.get(sid)
        if comp is None and (self.lookups or sid in self.done):
            comp = self.store.step_completion(self.run_id, sid)
            if comp is not None:
                self.cache[sid] = comp
        if comp is None:
            # Proved under this lease: the cache (with the ids completed by this execution)
            # holds every completion when lookups are off, and the lookup read the history
            # otherwise; nothing else writes while we hold it.
            self.never.add(sid)
        return comp

    def matching(self, sid: str, policy: Policy) -> Completion | None:
        """:meth:`completion`, refusing a record of another policy under the same id (the
        code changed in a way the history does not match)."""
        comp = self.completion(sid)
        if comp is None:
            return None
        if comp.policy is not None and comp.policy != policy.value:
            raise NonDeterminismError(
                f"run {self.run_id!r} step {sid!r} was recorded (seq {comp.seq}) as a "
                f"{comp.policy} step, but the code now asks for a {policy.value} step with "
                "that id: the workflow changed in a way that does not match the recorded "
                "history. Resume with the code the run was recorded under, or keep recorded "
                'runs on the old path with `if run.patched("<change>"):`. Nothing was '
                "recorded."
            )
        if comp.seq > self.at:
            self.at = comp.seq
        return comp

    @property
    def replaying(self) -> bool:
        """True while completions recorded by earlier executions lie ahead of what the code
        has asked for (the code has not yet caught up with the history)."""
        return self.at < self.end

    def before_write(self, asked: str | None) -> list[Payload] | None:
        """Before a write for step ``asked``: None when the gate is down (the usual case), else
        what must go first — the version change, with the execution's first new write — after
        checking that the code caught up with the history (NonDeterminismError otherwise;
        nothing written). A compute step rerun for a changed input is no new step: its id is
        recorded. Call :meth:`passed` once that write landed."""
        if not self.gate or asked in self.cache:
            return None
        if self.ordered and self.replaying:
            raise self.diverged(f"asked for new step {asked!r}")
        return [self.pending_version] if self.pending_version else []

    def passed(self) -> None:
        """The first new write landed (with the version change, if any): the gate is down."""
        self.gate, self.pending_version = False, None

    def check_replayed(self, what: str, cause: BaseException | None = None) -> None:
        """Raise NonDeterminismError when the workflow ends (returns, raises, stops) before it
        has replayed what earlier executions recorded: deterministic code given the same
        recorded results would have gone on."""
        if self.replaying:
            raise self.diverged(what) from cause

    def diverged(self, what: str) -> NonDeterminismError:
        """The error for code that left the recorded path: names what the code did, the
        recorded step it should have asked for next, and what to do."""
        ahead = sorted((c for c in self.cache.values() if c.seq > self.at), key=lambda c: c.seq)
        nxt = next((c for c in ahead if not c.step_id.startswith("patch:")), None)
        recorded = f"step {nxt.step_id!r} (seq {nxt.seq})" if nxt else "more steps"
        v = self.pending_version
        under = f" (recorded under version {v.from_version!r})" if v else ""
        return NonDeterminismError(
            f"run {self.run_id!r} of workflow {self.workflow!r}: the code {what} where "
            f"the history{under} has {recorded} next; version {self.version!r} of the code "
            "no longer matches this run at that point. Resume it with the code it was recorded "
            'under, or keep recorded runs on the old path with `if run.patched("<change>"):` '
            "around the new code. Nothing was recorded."
        )

    def proven_new(self, events: Sequence[Event]) -> list[str]:
        """Ids of steps these events start that are proved to have no recorded completion."""
        never, cache = self.never, self.cache
        return [
            sid
            for ev in events
            if (sid := ev.step_id) is not None
            and sid in never
            and sid not in cache
            and starts_step(ev)
        ]

    def appended(self, events: Sequence[Event]) -> None:
        """Note the steps these events completed (only their ids: a result is held in memory
        only while it is still to be replayed, or a long run's results would pile up)."""
        for ev in events:
            p = ev.payload
            if isinstance(p, StepCompleted):
                sid = p.step_id
                self.done.add(sid)
                self.never.discard(sid)
