"""Sessions (issue 46): long-lived agents with a durable inbox.

A **session** is a named agent identity (``Sessions(client).start(name, agent)``, ``torpor
session start NAME --agent MODULE:ATTR``). Each message sent to it (``send``, ``torpor session
send NAME "text"``) is recorded in its inbox with a disposition — ``pending``, then
``handled`` by one turn, or ``superseded`` / ``rejected``, never dropped — and wakes it: a turn
of its agent answers the message with its working buffer, fact ledger and episodes, then the
session sleeps on a durable wait, holding no process and no lease.

A session is a sequence of **segments**, each a normal run of the agent
(:mod:`.segment`); after ``segment_turns`` turns a segment continues as new, carrying the
running summary and the ledger's facts, so a session of 100,000 turns loads like one of a
few. See docs/sessions.md.
"""

from __future__ import annotations

from .api import Sent, Session, Sessions
from .segment import SIGNAL, SessionAgent, segment_run_id

__all__ = ["SIGNAL", "Sent", "Session", "SessionAgent", "Sessions", "segment_run_id"]
