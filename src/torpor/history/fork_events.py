"""The events of forks (issue 45), kept apart from :mod:`.events` and registered into its
:data:`~.events.EVENT_TYPES`; the rule that takes them, and what each field does, is
:mod:`.forks`."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .events import Payload, register


class ForkedEffect(Payload):
    """An effect the origin performed (or may have) after the fork point: its step, operation,
    key, intent seq and, for a planned tool call, ``identity`` (``<tool>:<args hash>``)."""

    step_id: str
    operation: str
    key: str
    seq: int
    identity: str = ""


class RunForked(Payload):
    """This run's events 1..``at_seq`` are run ``origin``'s, copied; what the fork changes:
    its code (``workflow``/``version``/``module``, ``criteria``), its ``input`` (if
    ``new_input``), the origin's effects it refuses to repeat (``performed``) unless
    ``redo_effects``, and the approvals raised again (``renewed``: approval id -> nonce)."""

    origin: str
    at_seq: int = Field(ge=1)
    by: str = ""
    reason: str = ""
    workflow: str = ""
    version: str = ""
    module: str = ""
    criteria: list[str] | None = None
    input: Any = None
    new_input: bool = False
    redo_effects: bool = False
    performed: list[ForkedEffect] = Field(default_factory=list)
    renewed: dict[str, str] = Field(default_factory=dict)


register("run_forked", RunForked)

__all__ = ["ForkedEffect", "RunForked"]
