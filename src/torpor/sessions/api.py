"""Sessions from outside (issue 46): start one, send it messages, read its inbox, segments
and memory. ``Sessions(client)``, or ``client.session(name)`` for one session's handle."""

from __future__ import annotations

import builtins
import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import BadInputError, RunFinishedError, SessionNotFoundError
from ..store import sessions as rows
from .start import create_segment, sql_of

if TYPE_CHECKING:
    from ..history import RunState
    from ..store.base import Store
    from .segment import SessionAgent


class Client(Protocol):
    """What sessions need of a :class:`torpor.Client` (named here, not imported: the
    client's ``session`` method imports this module)."""

    store: Store

    def signal(
        self, run_id: str, name: str, payload: Any = None, *, message_id: str | None = None
    ) -> bool: ...

    def state(self, run_id: str) -> RunState: ...


#: A session's name: letters, digits and ``._-``, at most 100 characters (it is part of its
#: segments' run ids, ``session:NAME:N``).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: The longest message a session takes (characters).
MAX_TEXT = 100_000


def check_name(name: str) -> None:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise BadInputError(
            f"session name {name!r}: use 1-100 letters, digits, '.', '_' or '-' "
            "(starting with a letter or digit)"
        )


@dataclass(frozen=True)
class Sent:
    """Where :meth:`Sessions.send` put a message: its inbox row and the segment run it was
    signalled to (``None``: none took the signal; the next segment reads it from the inbox)."""

    message: rows.MessageRow
    run_id: str | None
    new: bool


class Sessions:
    """The sessions of the store of ``client`` (a :class:`torpor.Client`)."""

    def __init__(self, client: Client):
        self.client = client
        self.rows = sql_of(client.store)

    def start(self, name: str, agent: SessionAgent, *, agent_ref: str = "") -> rows.SessionRow:
        """Start session ``name`` with ``agent``'s segments (its first segment run,
        ``session:NAME:1``, waits for a message once a worker runs it). Idempotent: an
        existing session is returned as it is (BadInputError when it has another agent).
        ``agent_ref``: how to find the agent again (``MODULE:ATTR``), shown by ``show``."""
        from .segment import segment_run_id

        check_name(name)
        got = rows.get_session(self.rows, name)
        if got is None:
            rid = segment_run_id(name, 1)
            now = self.client.store.now_ms()
            row = rows.SessionRow(
                name, agent.workflow, agent_ref, rid, 1, 0, agent.segment_turns, now, now
            )
            create_segment(
                self.client.store,
                agent.workflow,
                rid,
                {"session": name, "segment": 1, "first_turn": 1, "carry": None},
            )
            rows.create_session(self.rows, row)
            got = rows.get_session(self.rows, name)
            assert got is not None
        if got.workflow != agent.workflow:
            raise BadInputError(
                f"session {name!r} exists with agent workflow {got.workflow!r}, not "
                f"{agent.workflow!r}"
            )
        return got

    def get(self, name: str) -> rows.SessionRow:
        got = rows.get_session(self.rows, name)
        if got is None:
            raise SessionNotFoundError(f"no session named {name!r} (torpor session ls)")
        return got

    def list(self) -> list[rows.SessionRow]:
        return rows.list_sessions(self.rows)

    def send(
        self,
        name: str,
        text: str,
        *,
        sender: str = "user",
        message_id: str | None = None,
        supersede: bool = False,
    ) -> Sent:
        """Put ``text`` in session ``name``'s inbox (durable, ``pending``) and wake its current
        segment (a signal). ``message_id``: sending the same id again is a no-op (``new`` is
        False). ``supersede``: the session's messages still pending (no turn took them yet)
        are marked ``superseded`` by this one — their turns never run.

        A segment that continues as new meanwhile is handled: the session is read again after
        the signal and the new segment signalled too (a segment takes a message once)."""
        if not isinstance(text, str) or not text.strip():
            raise BadInputError(f"session {name!r}: a message needs some text")
        if len(text) > MAX_TEXT:
            raise BadInputError(
                f"session {name!r}: a message of {len(text)} characters is over {MAX_TEXT}"
            )
        s = self.get(name)
        mid = message_id or uuid.uuid4().hex
        msg, new = rows.add_message(self.rows, name, mid, sender, text)
        if not new or msg.session != name:
            return Sent(msg, None, False)
        if supersede:
            rows.supersede_pending(self.rows, name, mid)
        to: str | None = None
        for _ in range(3):
            if self._signal(s.run_id, msg):
                to = s.run_id
            again = self.get(name)
            if again.run_id == s.run_id:
                if to is None and self._restart(s):
                    s = self.get(name)  # the new segment also reads it from the inbox
                    continue
                break
            s = again
        return Sent(msg, to, True)

    def _restart(self, s: rows.SessionRow) -> bool:
        """The session's current segment finished without continuing as new (it failed, was
        cancelled or stopped: its turn's message was rejected on its record; a blocked or
        unresolved segment keeps its record for a person to settle): the session goes on in a
        new segment, carrying the summary of that segment's latest checkpoint and its live
        ledger facts (the newest 500), so no message sent afterwards waits forever.
        True when a new segment is there (this call or a concurrent one made it)."""
        from ..history import RunStatus
        from .segment import CARRY_FACTS, segment_run_id

        st = self.client.state(s.run_id)
        if st.status != RunStatus.FINISHED:
            return False
        seg = s.segment + 1
        rid = segment_run_id(s.name, seg)
        store = self.client.store
        _keys, gone, _live = store.ledger_index(s.run_id)
        ledger = [
            r.data
            for r in store.ledger(s.run_id)
            if r.data.get("kind") != "unit" and r.data.get("key") not in gone
        ][-CARRY_FACTS:]
        user = st.user_state if isinstance(st.user_state, dict) else {}
        carry = {"summary": user.get("summary") or {}, "ledger": ledger}
        create_segment(
            store,
            s.workflow,
            rid,
            {"session": s.name, "segment": seg, "first_turn": s.turns + 1, "carry": carry},
            module=st.module,
        )
        rows.move_segment(self.rows, s.name, seg, rid, s.turns + 1)
        return self.get(s.name).run_id != s.run_id

    def _signal(self, run_id: str, msg: rows.MessageRow) -> bool:
        from .segment import SIGNAL

        try:
            self.client.signal(run_id, SIGNAL, msg.payload(), message_id=msg.message_id)
        except RunFinishedError:
            return False
        return True

    def inbox(self, name: str, limit: int = 50) -> builtins.list[rows.MessageRow]:
        """The session's newest ``limit`` messages with their dispositions, oldest first."""
        return rows.last_messages(self.rows, name, limit)

    def segments(self, name: str) -> builtins.list[rows.SegmentRow]:
        return rows.segments(self.rows, name)

    def memory(self, name: str, facts: int = 20) -> dict[str, Any]:
        """The current segment's memory: its running summary (as of its latest checkpoint) and
        its newest live ledger facts (``facts`` of them)."""
        from ..memory.compaction import Summary

        s = self.get(name)
        st = self.client.state(s.run_id)
        user = st.user_state if isinstance(st.user_state, dict) else {}
        summary = Summary.model_validate(user.get("summary") or {}).text()
        store = self.client.store
        _keys, gone, _live = store.ledger_index(s.run_id)
        live = [
            r.data
            for r in store.ledger(s.run_id)
            if r.data.get("kind") != "unit" and r.data.get("key") not in gone
        ]
        return {
            "run_id": s.run_id,
            "summary": summary,
            "facts": [{"kind": r.get("kind"), "text": r.get("text")} for r in live[-facts:]],
            "fact_count": len(live),
        }


class Session:
    """One session's handle (``client.session(name)``): :meth:`send`, :meth:`info`,
    :meth:`inbox`."""

    def __init__(self, client: Client, name: str):
        check_name(name)
        self.name = name
        self.sessions = Sessions(client)

    def send(self, text: str, **kw: Any) -> Sent:
        return self.sessions.send(self.name, text, **kw)

    def info(self) -> rows.SessionRow:
        return self.sessions.get(self.name)

    def inbox(self, limit: int = 50) -> list[rows.MessageRow]:
        return self.sessions.inbox(self.name, limit)
