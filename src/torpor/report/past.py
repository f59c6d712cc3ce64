"""A run's report as it was at one point of its history (issue 45): :func:`gather_at` folds
run ``run_id``'s events 1..``seq`` (:meth:`~torpor.Client.history_to`, the same pure fold as
the live report) into a :class:`~torpor.report.run.RunReport` whose ``as_of`` is
``(seq, last_seq)``: steps, effects, artifacts, the wait, approvals, plan, usage and message
dispositions as they were then, and the context the latest model call up to then was sent
(its ``context_built`` event: hash, tokens per section, budget, what was cut — the messages
themselves are not in the history, only their hash).

What the history does not hold at a past point is not invented: the inbox then, the lease
then, the queue and the children's rows are left empty; the storage and the trace id are those
of now. The run row is rewritten from the past state (status, outcome, updated time, last seq,
latest checkpoint_saved seq; no lease) so every face renders it as a run that is not held.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..history import (
    ArtifactCreated,
    ArtifactRef,
    ContextBuilt,
    checkpoint_answers,
    effect_views,
    fold,
    message_views,
    step_views,
)
from .run import RunReport, RunSummary

if TYPE_CHECKING:
    from ..client import Client


def gather_at(client: Client, run_id: str, seq: int) -> RunReport:
    """Run ``run_id``'s report as of seq ``seq`` (RunNotFoundError for an unknown run;
    BadInputError, one line naming the run and its range, for a seq below 1 or past its
    last). One read of events 1..``seq``; nothing after ``seq`` is looked at but the run row
    (for ``last_seq``)."""
    from .. import telemetry

    rec = client.get(run_id)
    events = client.history_to(run_id, seq)
    state = fold(events)  # what Client.state_at returns, without a second read
    checkpoints = [e.seq for e in events if e.type == "checkpoint_saved"]
    then = replace(
        rec,
        status=state.status.value,
        outcome=state.outcome.value if state.outcome else None,
        updated_at_ms=events[-1].at_ms,
        wake_at_ms=state.wait.deadline_ms if state.wait else None,
        lease_owner=None,
        lease_expires_at_ms=0,
        last_seq=seq,
        checkpoint_seq=checkpoints[-1] if checkpoints else 0,
        attention=state.attention or None,
        infra_retries=0,
    )
    built = [e.payload for e in events if isinstance(e.payload, ContextBuilt)]
    summary = RunSummary(then, state, checkpoint_answers(state), events[-1].at_ms, None)
    return RunReport(
        summary=summary,
        steps=step_views(events),
        effects=effect_views(events),
        artifacts=[
            ArtifactRef(**e.payload.model_dump())
            for e in events
            if isinstance(e.payload, ArtifactCreated)
        ],
        inbox=[],
        messages=message_views(events, state),
        dispatch=None,
        storage=client.storage(run_id),
        trace_id=telemetry.trace_id_of(client.store.trace_context(run_id)),
        parent=client.parent(run_id),
        as_of=(seq, rec.last_seq),
        context=built[-1] if built else None,
    )


__all__ = ["gather_at"]
