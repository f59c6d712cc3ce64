"""A run's report, gathered once: :func:`gather` reads everything a person needs about run
``run_id`` through a :class:`~torpor.Client` — its row and folded state, the checkpoint's four
answers, steps, effects, artifacts, the inbox and the messages' dispositions, queue and
dispatch, storage, the trace id, and (for the console's timeline) its events — into a
:class:`RunReport`. ``torpor show`` renders it as text or JSON; the console renders it as its
run page. What both say the same way (the lease, what comes next while a worker holds the run,
the evidence) is derived here once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..blobs import OffloadedValue
from ..history import (
    ArtifactRef,
    ContextBuilt,
    EffectView,
    Event,
    MessageView,
    RunState,
    RunStatus,
    StepView,
)
from ..owners import owner_is_dead
from ..store.base import Dispatch, InboxMessage, RunRecord, RunStorage
from .lease import lease_text

if TYPE_CHECKING:
    from ..client import Client


@dataclass(frozen=True)
class RunSummary:
    """The live part of a run's report (the console polls it): the run row ``rec``, the folded
    ``state``, the latest checkpoint's four ``answers``
    (:func:`torpor.history.checkpoint_answers`), the store's clock ``now_ms`` (epoch ms) they
    were read at, and why a queued run is not running (``not_running``; None when nothing holds
    it back)."""

    rec: RunRecord
    state: RunState
    answers: dict[str, Any]
    now_ms: int
    not_running: str | None

    @property
    def finished(self) -> bool:
        return self.state.status is RunStatus.FINISHED

    @property
    def status_text(self) -> str:
        """The status with what the lease says (:func:`lease_text`)."""
        return lease_text(self.rec, self.now_ms)

    @property
    def lease(self) -> str:
        """``STATUS (leased) by OWNER`` while an unfinished run has a lease owner, else ``""``;
        while the holder's lease is live, what happens if it is not responding (the lease
        expires in N s, and ``resume --wait`` takes the run over then: issue 36, C05)."""
        if not self.rec.lease_owner or self.finished:
            return ""
        text = f"{self.status_text} by {self.rec.lease_owner}"
        if self.held:
            left_s = max(0, -(-(self.rec.lease_expires_at_ms - self.now_ms) // 1000))
            text += (
                f"; a live holder renews it while it works — if it is not responding, the "
                f"lease expires in {left_s} s and `torpor resume --wait {self.rec.run_id}` "
                "takes the run over then"
            )
        return text

    @property
    def infra(self) -> str:
        """What the store's infrastructure did to the run (``infra_retries``: appends read
        back after a lost connection, outages of lease renewals), or ``""``."""
        n = self.rec.infra_retries
        if not n:
            return ""
        return (
            f"{n} incident(s) with the store's connection: an append read back after a lost "
            "connection, or lease renewals that failed until the store answered again"
        )

    @property
    def held(self) -> bool:
        """Someone is executing the run: an unexpired lease whose holder is not proven dead."""
        r = self.rec
        return bool(
            r.lease_owner
            and r.lease_expires_at_ms > self.now_ms
            and not owner_is_dead(r.lease_owner)
            and not self.finished
        )

    @property
    def next(self) -> Any:
        """What permits the next transition; while a worker holds the run, ``in progress (held
        by OWNER)`` — an effect without an observation is being performed, not waiting to be
        reconciled."""
        if self.held and self.state.cancel_requested:
            return (
                f"cancel requested: held by {self.rec.lease_owner}, the run ends cancelled at "
                "its next boundary (a step that does not return is stopped after the cancel's "
                "grace where it can be)"
            )
        if self.held:
            return f"in progress (held by {self.rec.lease_owner})"
        return self.answers.get("next")

    @property
    def establishing(self) -> str | None:
        """What the run is trying to establish (``-`` when the checkpoint does not say); None
        for a finished run, which establishes nothing any more."""
        return None if self.finished else (self.answers.get("establishing") or "-")

    @property
    def verifications(self) -> list[tuple[str, bool]]:
        """The evidence's verifications, ``(criterion, passed)``, in recorded order."""
        ev = self.answers.get("evidence", {})
        return [(k, bool(v.get("passed"))) for k, v in ev.get("verifications", {}).items()]

    @property
    def evidence_artifacts(self) -> list[tuple[str, Any]]:
        """The evidence's artifacts, ``(name, reference)``."""
        return list(self.answers.get("evidence", {}).get("artifacts", {}).items())

    @property
    def in_doubt(self) -> list[tuple[str, Any]]:
        """The effects that may have happened, ``(key, status)``."""
        return list(self.answers.get("effects", {}).items())

    @property
    def effects_performed(self) -> int:
        return int(self.answers.get("effects_performed", 0) or 0)


@dataclass(frozen=True)
class RunReport:
    """Everything a person needs about one run, read once (:func:`gather`). ``summary``: the
    live part; ``steps``, ``effects``: their views; ``artifacts``: every version, in recorded
    order; ``inbox``: messages delivered and not yet taken; ``messages``: the dispositions of
    those taken; ``dispatch``: how it was started (queue, key, priority, delayed start; None
    when unknown); ``storage``: what it occupies (bytes); ``trace_id``: its OpenTelemetry trace
    (None without one); ``events``: its whole history when asked for, else None; ``parent``
    and ``children``: its place in a tree of runs."""

    summary: RunSummary
    steps: list[StepView]
    effects: list[EffectView]
    artifacts: list[ArtifactRef]
    inbox: list[InboxMessage]
    messages: list[MessageView]
    dispatch: Dispatch | None
    storage: RunStorage
    trace_id: str | None
    events: list[Event] | None = None
    #: The run that started this one as its child (None: started from outside), and this
    #: run's children, oldest first (issue 37).
    parent: str | None = None
    children: list[RunRecord] = field(default_factory=list)
    #: The forks made of this run, oldest first (issue 45; its own origin is ``state.fork``).
    forks: list[RunRecord] = field(default_factory=list)
    #: Values recorded by reference in the artifact store (large results, payloads).
    offloaded: list[OffloadedValue] = field(default_factory=list)
    #: A past state (issue 45, :func:`torpor.report.past.gather_at`): ``(seq, last_seq)``, the
    #: seq the history was folded to and the run's latest; None for the run as it is now.
    as_of: tuple[int, int] | None = None
    #: In a past state: the context the latest model call up to then was sent (None: none).
    context: ContextBuilt | None = None

    @property
    def rec(self) -> RunRecord:
        return self.summary.rec

    @property
    def state(self) -> RunState:
        return self.summary.state

    @property
    def pending_approvals(self) -> dict[str, list[str]]:
        """The approvals that take a decision now, each with the content hashes it binds."""
        return {k: v.hashes for k, v in self.state.open_approvals().items()}

    @property
    def decided_in_inbox(self) -> set[Any]:
        """Approvals with a decision delivered and not yet applied (checked when the run
        resumes)."""
        return {m.body.get("approval_id") for m in self.inbox if m.kind == "decision"}

    @property
    def is_agent(self) -> bool:
        """Whether the run has an agent's parts to show: a plan, model calls or a budget."""
        u, b = self.state.usage, self.state.budget
        return bool(
            self.state.plan_version
            or u.model_calls
            or any(v is not None for v in b.model_dump().values())
        )

    def as_json(self) -> dict[str, Any]:
        """The report as ``torpor show --json`` prints it (pydantic models and dataclasses
        are encoded by the printer)."""
        st = self.state
        return {
            "run": self.rec,
            "status": st.status.value,
            "outcome": st.outcome.value if st.outcome else None,
            "reason": st.outcome_reason,
            "result": st.result,
            "answers": self.summary.answers,
            "steps": self.steps,
            "effects": self.effects,
            "artifacts": self.artifacts,
            "offloaded": self.offloaded,
            "wait": st.wait,
            "approvals": st.approvals,
            "pending_approvals": self.pending_approvals,
            "inbox": self.inbox,
            "messages": self.messages,
            "warnings": st.warnings,
            "cancel_requested": st.cancel_requested,
            "plan_version": st.plan_version,
            "plan": st.plan,
            "usage": {**st.usage.model_dump(), "tokens": st.usage.tokens},
            "budget": st.budget,
            "trace_id": self.trace_id,
            "not_running": self.summary.not_running,
            "dispatch": self.dispatch,
            "storage": {**self.storage.__dict__, "total_bytes": self.storage.total_bytes},
            "parent": self.parent,
            "children": self.children,
            "fork": st.fork,
            "forks": self.forks,
            **(
                {"as_of": {"seq": self.as_of[0], "of": self.as_of[1]}, "context": self.context}
                if self.as_of
                else {}
            ),
        }


def summarize(client: Client, run_id: str) -> RunSummary:
    """The live part of run ``run_id``'s report (RunNotFoundError for an unknown run)."""
    from ..queues import why_not_running

    rec = client.get(run_id)
    state = client.state(run_id)
    answers = client.answers(run_id)
    now = client.store.now_ms()
    return RunSummary(rec, state, answers, now, why_not_running(client.store, run_id))


def gather(client: Client, run_id: str, *, events: bool = False) -> RunReport:
    """Run ``run_id``'s report, read through ``client`` (RunNotFoundError for an unknown run);
    ``events``: also read its whole history (the console's timeline; ``torpor show`` does not,
    so it costs the same at 100,000 events as at 10)."""
    from .. import telemetry
    from ..queues import dispatch_of

    summary = summarize(client, run_id)
    return RunReport(
        summary=summary,
        steps=client.steps(run_id),
        effects=client.effects(run_id),
        artifacts=client.artifacts(run_id),
        inbox=client.inbox(run_id),
        messages=client.messages(run_id),
        dispatch=dispatch_of(client.store, run_id),
        storage=client.storage(run_id),
        trace_id=telemetry.trace_id_of(client.store.trace_context(run_id)),
        events=client.events(run_id) if events else None,
        parent=client.parent(run_id),
        children=client.children(run_id),
        forks=client.forks(run_id),
        offloaded=client.offloaded(run_id),
    )


__all__ = ["RunReport", "RunSummary", "gather", "lease_text", "summarize"]
