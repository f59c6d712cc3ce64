"""The events of talking to a running agent (issue 39): an operator's steering message moved
from the inbox (``steer_received``), the agent's boundary that took it (``steer_taken``), a
model reply retracted because a steering message interrupted it (``reply_retracted``), and a
stage of a wait's escalation chain (``wait_escalated``). Registered into
:data:`.events.EVENT_TYPES`; their rules live in :mod:`.steering`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .events import Payload, register


class SteerReceived(Payload):
    """An operator's message to a running agent (``torpor steer RUN "text"``), moved from the
    inbox: pending until the agent's next boundary takes it (before its next model call).
    ``interrupt``: it also retracts a model reply that was in flight when it arrived."""

    message_id: str
    text: str
    by: str = ""
    interrupt: bool = False
    arrived_at_ms: int | None = None


class SteerTaken(Payload):
    """The boundary ``step_id`` (before a model call) took these pending steering messages,
    in arrival order: each is seen exactly once (the fold refuses taking one twice)."""

    step_id: str
    message_ids: list[str] = Field(min_length=1)


class ReplyRetracted(Payload):
    """The reply of model call ``step_id`` is not acted on: steering message ``message_id``
    (with ``interrupt``) arrived while it was in flight. Its tokens still count (the call's
    ``model_called`` stays); the agent calls the model again with the message in context."""

    step_id: str
    message_id: str
    reason: str = ""


class WaitEscalated(Payload):
    """Stage ``stage`` (1, 2, …) of approval ``approval_id``'s escalation chain was reached,
    at its wait ``wait_id``: ``notify`` (an effect ran, ``effect_step``), ``approvers`` (the
    decision is handed to ``approvers``, ``required`` of them), ``deny`` or ``cancel``."""

    wait_id: str
    approval_id: str
    stage: int = Field(ge=1)
    action: Literal["notify", "approvers", "deny", "cancel"]
    approvers: list[str] = Field(default_factory=list)
    required: int | None = None
    effect_step: str | None = None
    due_at_ms: int = 0


for _name, _payload in (
    ("steer_received", SteerReceived),
    ("steer_taken", SteerTaken),
    ("reply_retracted", ReplyRetracted),
    ("wait_escalated", WaitEscalated),
):
    register(_name, _payload)

__all__ = ["ReplyRetracted", "SteerReceived", "SteerTaken", "WaitEscalated"]
