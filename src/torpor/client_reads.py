"""The reading half of :class:`torpor.client.Client`: runs, their histories folded or as they
were at a seq, steps, effects, messages, artifacts, offloaded values and the fact ledger.
Nothing here writes; :class:`~torpor.client.Client` adds the messages a run receives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import blobs
from .artifacts import ArtifactStore
from .config import Settings
from .errors import ArtifactNotFoundError, BadInputError
from .store.base import InboxMessage, RunCount, RunRecord, RunStorage, Store
from .store.ledger_rows import LedgerEntry, entries

if TYPE_CHECKING:
    from .history import (
        ArtifactRef,
        EffectView,
        Event,
        MessageView,
        RunState,
        StepView,
    )
    from .streams import StreamReader


class ClientReads:
    """What a :class:`~torpor.client.Client` reads (its ``store`` and ``settings``)."""

    store: Store
    settings: Settings

    # ------------------------------------------------------------ reading

    def get(self, run_id: str) -> RunRecord:
        return self.store.get_run(run_id)

    def state(self, run_id: str) -> RunState:
        """The folded state (latest checkpoint + events after it)."""
        return self.store.load(run_id)

    def runs(
        self,
        *,
        status: str | None = None,
        outcome: str | None = None,
        limit: int = 100,
        workflow: str | None = None,
        attention: bool | None = None,
    ) -> list[RunRecord]:
        """Runs, newest first; ``attention`` True: only those with a needs-attention note."""
        return self.store.list_runs(
            status=status, outcome=outcome, limit=limit, workflow=workflow, attention=attention
        )

    def parent(self, run_id: str) -> str | None:
        """The run that started ``run_id`` as its child (``run.spawn``), or None
        (RunNotFoundError for an unknown run)."""
        self.store.get_run(run_id)
        return self.store.run_parent(run_id)

    def children(self, run_id: str) -> list[RunRecord]:
        """The child runs ``run_id`` started, oldest first, as run rows (status, outcome,
        needs attention); RunNotFoundError for an unknown run."""
        self.store.get_run(run_id)
        return self.store.child_runs(run_id)

    def forks(self, run_id: str) -> list[RunRecord]:
        """The forks made of ``run_id`` (:meth:`~torpor.Client.fork`), oldest first, as run
        rows; RunNotFoundError for an unknown run."""
        self.store.get_run(run_id)
        return self.store.run_forks(run_id)

    def fork_origin(self, run_id: str) -> tuple[str, int] | None:
        """``(origin run id, seq its history was copied up to)`` when ``run_id`` is a fork,
        else None (RunNotFoundError for an unknown run)."""
        self.store.get_run(run_id)
        return self.store.fork_origin(run_id)

    def counts(self, *, workflow: str | None = None) -> list[RunCount]:
        """How many runs there are per status, outcome and needs-attention flag."""
        return self.store.count_runs(workflow=workflow)

    def storage(self, run_id: str) -> RunStorage:
        """What the run occupies in the database (its artifacts' bytes are in the artifact
        store: :meth:`artifacts` lists their sizes)."""
        return self.store.run_storage(run_id)

    def stream(
        self, run_id: str, name: str = "reply", *, after: int = 0, follow: bool = True
    ) -> StreamReader:
        """The items of the run's stream ``name`` after offset ``after``, then (``follow``)
        each new one as it is written, until the run finished and all were read: a sync and
        an async iterator of :class:`~torpor.streams.StreamItem` (``for item in
        client.stream(rid)`` / ``async for …``). Resume after a disconnect with
        ``after=reader.offset``: every item once, in order (:mod:`torpor.streams.reader`).
        RunNotFoundError for an unknown run."""
        from .streams import StreamReader  # (here: `torpor ls` imports no engine)

        self.store.get_run(run_id)
        return StreamReader(self.store, run_id, name, after=after, follow=follow)

    def events(self, run_id: str, after_seq: int = 0, limit: int = 1_000_000) -> list[Event]:
        self.store.get_run(run_id)
        return self.store.read_events(run_id, after_seq, limit)

    def history_to(self, run_id: str, seq: int) -> list[Event]:
        """Run ``run_id``'s events 1..``seq``, in order: its history as it was when event
        ``seq`` was appended (issue 45). RunNotFoundError for an unknown run; BadInputError
        (one line naming the run and its range) for a ``seq`` below 1 or past its last."""
        last = self.store.get_run(run_id).last_seq
        if not 1 <= seq <= last:
            raise BadInputError(
                f"run {run_id!r} has no event at seq {seq}: its history is seq 1..{last}"
            )
        events = self.store.read_events(run_id, 0, seq)
        if len(events) != seq or events[-1].seq != seq:  # a history is dense from 1 (G4)
            raise BadInputError(
                f"run {run_id!r}: its history holds {len(events)} of the events 1..{seq}"
            )
        return events

    def state_at(self, run_id: str, seq: int) -> RunState:
        """The state of run ``run_id`` as it was at seq ``seq`` — its events 1..``seq``
        folded by the same pure fold as :meth:`state` (steps, effects, artifacts, waits,
        approvals, plan and usage as they were then; ``.seq`` == ``seq``). Errors as
        :meth:`history_to`. The latest state is ``state_at(run_id, get(run_id).last_seq)``."""
        from .history import fold

        return fold(self.history_to(run_id, seq))

    def ledger(self, run_id: str) -> list[LedgerEntry]:
        """The run's fact ledger (issue 30): every record its agent's compactions wrote, in
        the order written, with provenance (the ``context_compacted`` event's seq and time,
        the turn, step and source) and, for a superseded one, what replaced it, who and when
        (:class:`~torpor.store.ledger_rows.LedgerEntry`). Texts were scrubbed of known secrets
        before they were stored. Raises RunNotFoundError for an unknown run."""
        self.store.get_run(run_id)
        return entries(run_id, self.store.ledger(run_id))

    def answers(self, run_id: str) -> dict[str, Any]:
        """The four answers of the latest checkpoint (DESIGN.md §1)."""
        from .history import checkpoint_answers

        return checkpoint_answers(self.state(run_id))

    def steps(self, run_id: str) -> list[StepView]:
        """Every step with its latest status and number of attempts (reads the history)."""
        from .history import step_views

        return step_views(self.store.iter_events(run_id))

    def effects(self, run_id: str) -> list[EffectView]:
        """Every effect with its latest status (reads the history)."""
        from .history import effect_views

        return effect_views(self.store.iter_events(run_id))

    def inbox(self, run_id: str) -> list[InboxMessage]:
        """Messages (signals, decisions, cancels, resolutions) the run has not applied yet."""
        self.store.get_run(run_id)
        return self.store.pending_inbox(run_id)

    def messages(self, run_id: str) -> list[MessageView]:
        """Every signal the run received and every message it refused, with its disposition:
        consumed by a wait, buffered, late (arrived after the deadline of the wait of its name
        that was open), refused and why (reads the history)."""
        from .history import message_views

        return message_views(self.store.iter_events(run_id), self.state(run_id))

    def runnable(self, limit: int = 100) -> list[str]:
        """Ids of runs a worker could take now: pending, crashed, or waiting with a due wake."""
        return self.store.runnable_runs(limit)

    def offloaded(self, run_id: str) -> list[blobs.OffloadedValue]:
        """Every value the run recorded by reference in the artifact store (a step's or an
        effect's result, a signal payload over ``TORPOR_INLINE_VALUE_BYTES``), with its sha256
        and the step that produced it, oldest first (reads the history)."""
        self.store.get_run(run_id)
        return blobs.offloaded(self.store.iter_events(run_id))

    def artifacts(self, run_id: str) -> list[ArtifactRef]:
        """Every artifact version the run created, oldest first (reads the history)."""
        from .history import ArtifactRef

        self.store.get_run(run_id)
        return [
            ArtifactRef(**ev.payload.model_dump())
            for ev in self.store.iter_events(run_id)
            if ev.type == "artifact_created"
        ]

    def find_artifact(self, run_id: str, ref: str) -> ArtifactRef:
        """One artifact of the run by name (latest version), ``name@version``, or sha256 (a
        unique prefix, ``sha256:`` optional; an offloaded value's too, named after the event
        that records it). Raises ArtifactNotFoundError."""
        from .history import ArtifactRef

        refs = self.artifacts(run_id)
        name, _, version = ref.rpartition("@")
        if name and version.isdigit():
            hit = [a for a in refs if a.name == name and a.version == int(version)]
        else:
            hit = [a for a in refs if a.name == ref][-1:]
        digest = ref.removeprefix("sha256:").lower()
        if not hit and len(digest) >= 4:
            hit = list({a.sha256: a for a in refs if a.sha256.startswith(digest)}.values())
        if not hit and len(digest) >= 4:  # an offloaded value, by its hash
            hit = list(
                {
                    v.sha256: ArtifactRef(
                        name=f"{v.type}.{v.field}#{v.seq}",
                        sha256=v.sha256,
                        version=1,
                        size=v.size,
                        media_type="application/json",
                        step_id=v.step_id,
                    )
                    for v in self.offloaded(run_id)
                    if v.sha256.startswith(digest)
                }.values()
            )
        if len(hit) > 1:
            raise ArtifactNotFoundError(
                f"run {run_id!r}: {ref!r} matches {len(hit)} artifacts; give more of the hash"
            )
        if not hit:
            raise ArtifactNotFoundError(
                f"run {run_id!r} has no artifact named {ref!r} nor one whose sha256 starts so"
            )
        return hit[0]

    def artifact_bytes(self, sha256: str) -> bytes:
        """The bytes of an artifact by its hash (hash-verified)."""
        return ArtifactStore(self.settings.artifacts_url).get(sha256)
