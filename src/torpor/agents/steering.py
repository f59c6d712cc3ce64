"""Steering a running agent (issue 39): an operator's message (``torpor steer RUN "text"``,
:meth:`torpor.Client.steer`, the console) reaches the agent at its next boundary — before its
next model call — and stays in its working memory as an operator instruction (pinned in the
summary and kept in the fact ledger as an ``instruction`` until a later one supersedes it).

Deterministic on replay: the boundary before each model call has a step id (``steer``,
``steer#2`` … in the order of model calls, like the calls' own ``model#N``); a boundary that
took messages records a step with ``steer_taken`` naming them, and a replay reads back exactly
those. A boundary that took none records nothing, and a replay that has not caught up with the
history takes none there either (the recorded model call after it saw none) — so a message is
seen exactly once, in arrival order, whatever crashes in between (the fold refuses taking one
twice).

An interrupting message (``--interrupt``) that arrives while a model call is in flight
retracts that call's reply once it returns — the next safe point, as for a cancel: a call that
has begun is never abandoned half-recorded. The reply is recorded as retracted
(``reply_retracted``; the call's ``model_called`` stays, so its tokens count against the
budget), none of its tool calls run, and the model is asked again with the message in context.
"""

from __future__ import annotations

from typing import Any

from ..history import Policy, ReplyRetracted, SteerTaken
from .context import Context


def take(ctx: Context) -> list[dict[str, Any]]:
    """At the boundary before a model call: the steering messages this boundary takes (each
    ``{"message_id", "text", "by"}``, oldest first), for the caller to add to the working
    buffer as operator messages. Recorded when there are any (see the module docstring)."""
    j = ctx.run.journal
    sid = j.next_id("steer")
    j.boundary()
    comp = j.recorded(sid, Policy.READ)
    if comp is not None:
        taken: list[dict[str, Any]] = list(j.value(sid, comp.result) or [])
    elif j.replay.replaying:
        return []
    else:
        j.sync()
        pending = [x for x in j.state.steering if x.status == "pending"]
        if not pending:
            return []
        taken = [{"message_id": x.message_id, "text": x.text, "by": x.by} for x in pending]
        fact = SteerTaken(step_id=sid, message_ids=[x["message_id"] for x in taken])
        purpose = f"took {len(taken)} steering message(s)"
        j.append(*j.step_events(sid, Policy.READ, taken, [fact], purpose))
    return taken


def retracted(ctx: Context, model_step: str) -> bool:
    """After model call ``model_step`` returned: whether its reply is retracted because an
    interrupting steering message arrived while it was in flight (recorded once, in a step
    ``retract:<model step>``; read back on replay)."""
    j = ctx.run.journal
    name = f"retract:{model_step}"
    sid = j.next_id(name)
    comp = j.recorded(sid, Policy.READ)
    if comp is not None:
        return True
    if j.replay.replaying:
        return False
    j.sync()
    hit = next((x for x in j.state.steering if x.status == "pending" and x.interrupt), None)
    if hit is None:
        return False
    fact = ReplyRetracted(
        step_id=model_step,
        message_id=hit.message_id,
        reason=f"interrupted by a steering message from {hit.by or 'an operator'}",
    )
    result = {"retracted": model_step, "by": hit.message_id}
    j.append(*j.step_events(sid, Policy.READ, result, [fact], "reply retracted"))
    return True
