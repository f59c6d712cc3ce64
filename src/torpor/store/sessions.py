"""The rows of sessions (issue 46; migrations 0029, 0030): the session row, its inbox of
messages with their dispositions, and its segments. Plain SQL the two dialects share, through
a store's :class:`~torpor.store.base.Driver`; the rules are :mod:`torpor.sessions`'.

Message dispositions (``status``): ``pending`` (in the inbox, no turn took it yet),
``handled`` (a turn answered it: ``run_id``, ``turn``, ``reply``), ``rejected`` (no turn will
take it: ``reason``), ``superseded`` (replaced by a later message before a turn took it:
``reason`` names it). A disposition is written once: every update is guarded by
``status = 'pending'``, so a replayed step or a second writer changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, cast

from ..errors import StoreError
from .base import Driver


class Store(Protocol):
    """What these rows need of a store (every SQL store has it)."""

    driver: Driver

    def now_ms(self) -> int: ...


def rows_of(store: object) -> Store:
    """``store`` as these rows need it (every SQL store); StoreError for another kind."""
    if not hasattr(store, "driver") or not hasattr(store, "now_ms"):
        raise StoreError(f"sessions need an SQL store (SQLite or PostgreSQL), not {store!r}")
    return cast(Store, store)


_SESSION_COLS = (
    "name, workflow, agent, run_id, segment, turns, segment_turns, created_at_ms, updated_at_ms"
)
_MSG_COLS = (
    "session, seq, message_id, sender, text, sent_at_ms, status, run_id, turn, reply, reason, "
    "disposed_at_ms"
)


@dataclass(frozen=True)
class SessionRow:
    name: str
    workflow: str
    agent: str
    run_id: str
    segment: int
    turns: int
    segment_turns: int
    created_at_ms: int
    updated_at_ms: int


@dataclass(frozen=True)
class MessageRow:
    session: str
    seq: int
    message_id: str
    sender: str
    text: str
    sent_at_ms: int
    status: str
    run_id: str | None
    turn: int | None
    reply: str | None
    reason: str | None
    disposed_at_ms: int | None

    def payload(self) -> dict[str, Any]:
        """What a segment run is given of the message (its signal's payload)."""
        return {"id": self.message_id, "seq": self.seq, "from": self.sender, "text": self.text}


@dataclass(frozen=True)
class SegmentRow:
    session: str
    segment: int
    run_id: str
    first_turn: int
    started_at_ms: int


def _session(r: tuple[Any, ...]) -> SessionRow:
    return SessionRow(str(r[0]), str(r[1]), str(r[2]), str(r[3]), *(int(x) for x in r[4:]))


def _message(r: tuple[Any, ...]) -> MessageRow:
    return MessageRow(
        str(r[0]),
        int(r[1]),
        str(r[2]),
        str(r[3]),
        str(r[4]),
        int(r[5]),
        str(r[6]),
        r[7],
        None if r[8] is None else int(r[8]),
        r[9],
        r[10],
        None if r[11] is None else int(r[11]),
    )


def create_session(store: Store, row: SessionRow) -> bool:
    """Insert the session and its first segment; False when the name exists (nothing
    written)."""
    d = store.driver
    with d.transaction() as cur:
        n = d.execute(
            cur,
            f"INSERT INTO sessions ({_SESSION_COLS}) VALUES (:name, :workflow, :agent, :run_id, "
            ":segment, :turns, :segment_turns, :created_at_ms, :updated_at_ms) "
            "ON CONFLICT (name) DO NOTHING",
            vars(row),
        )
        if n:
            d.execute(
                cur,
                "INSERT INTO session_segments (session, segment, run_id, first_turn, "
                "started_at_ms) VALUES (:name, :segment, :run_id, 1, :created_at_ms) "
                "ON CONFLICT DO NOTHING",
                vars(row),
            )
    return bool(n)


def get_session(store: Store, name: str) -> SessionRow | None:
    d = store.driver
    with d.read() as cur:
        r = d.fetchone(
            cur, f"SELECT {_SESSION_COLS} FROM sessions WHERE name = :name", {"name": name}
        )
    return None if r is None else _session(r)


def list_sessions(store: Store, limit: int = 1000) -> list[SessionRow]:
    d = store.driver
    with d.read() as cur:
        rows = d.fetchall(
            cur, f"SELECT {_SESSION_COLS} FROM sessions ORDER BY name LIMIT :n", {"n": limit}
        )
    return [_session(r) for r in rows]


def add_message(
    store: Store, session: str, message_id: str, sender: str, text: str
) -> tuple[MessageRow, bool]:
    """Append a message to the session's inbox (``pending``), numbered after the last; the
    session row is updated first so two senders take turns (its row lock on PostgreSQL).
    ``(row, new)``: an existing ``message_id`` returns its row and False."""
    d = store.driver
    now = store.now_ms()
    with d.transaction() as cur:
        d.execute(
            cur,
            "UPDATE sessions SET updated_at_ms = :now WHERE name = :s",
            {"s": session, "now": now},
        )
        n = d.execute(
            cur,
            f"INSERT INTO session_messages ({_MSG_COLS}) SELECT :s, COALESCE(MAX(seq), 0) + 1, "
            ":mid, :sender, :text, :now, 'pending', NULL, NULL, NULL, NULL, NULL "
            "FROM session_messages WHERE session = :s ON CONFLICT DO NOTHING",
            {"s": session, "mid": message_id, "sender": sender, "text": text, "now": now},
        )
        r = d.fetchone(
            cur,
            f"SELECT {_MSG_COLS} FROM session_messages WHERE message_id = :mid",
            {"mid": message_id},
        )
    assert r is not None
    return _message(r), bool(n)


def messages(
    store: Store, session: str, *, status: str | None = None, after_seq: int = 0, limit: int = 200
) -> list[MessageRow]:
    """The session's messages after ``after_seq``, oldest first (``status``: only those)."""
    d = store.driver
    where = "session = :s AND seq > :after" + (" AND status = :status" if status else "")
    with d.read() as cur:
        rows = d.fetchall(
            cur,
            f"SELECT {_MSG_COLS} FROM session_messages WHERE {where} ORDER BY seq LIMIT :n",
            {"s": session, "after": after_seq, "status": status, "n": limit},
        )
    return [_message(r) for r in rows]


def message(store: Store, message_id: str) -> MessageRow | None:
    d = store.driver
    with d.read() as cur:
        r = d.fetchone(
            cur,
            f"SELECT {_MSG_COLS} FROM session_messages WHERE message_id = :mid",
            {"mid": message_id},
        )
    return None if r is None else _message(r)


def last_messages(store: Store, session: str, limit: int) -> list[MessageRow]:
    """The session's newest ``limit`` messages, oldest first."""
    d = store.driver
    with d.read() as cur:
        rows = d.fetchall(
            cur,
            f"SELECT {_MSG_COLS} FROM session_messages WHERE session = :s "
            "ORDER BY seq DESC LIMIT :n",
            {"s": session, "n": limit},
        )
    return [_message(r) for r in reversed(rows)]


def count_messages(store: Store, session: str) -> dict[str, int]:
    """How many of the session's messages have each disposition."""
    d = store.driver
    with d.read() as cur:
        rows = d.fetchall(
            cur,
            "SELECT status, COUNT(*) FROM session_messages WHERE session = :s GROUP BY status",
            {"s": session},
        )
    return {str(k): int(v) for k, v in rows}


def dispose(
    store: Store,
    message_id: str,
    status: str,
    *,
    run_id: str | None = None,
    turn: int | None = None,
    reply: str | None = None,
    reason: str | None = None,
) -> bool:
    """Record a pending message's disposition (once: False when it had one already). A
    ``handled`` one also sets the session's turn count to ``turn``."""
    d = store.driver
    now = store.now_ms()
    with d.transaction() as cur:
        n = d.execute(
            cur,
            "UPDATE session_messages SET status = :st, run_id = :run, turn = :turn, "
            "reply = :reply, reason = :reason, disposed_at_ms = :now "
            "WHERE message_id = :mid AND status = 'pending'",
            {
                "st": status,
                "run": run_id,
                "turn": turn,
                "reply": reply,
                "reason": reason,
                "now": now,
                "mid": message_id,
            },
        )
        if n and status == "handled" and turn is not None:
            d.execute(
                cur,
                "UPDATE sessions SET turns = :t, updated_at_ms = :now WHERE name = "
                "(SELECT session FROM session_messages WHERE message_id = :mid) AND turns < :t",
                {"t": turn, "now": now, "mid": message_id},
            )
    return bool(n)


def supersede_pending(store: Store, session: str, by: str) -> int:
    """Mark the session's pending messages before ``by`` superseded by it; how many."""
    d = store.driver
    with d.transaction() as cur:
        return d.execute(
            cur,
            "UPDATE session_messages SET status = 'superseded', reason = :why, "
            "disposed_at_ms = :now WHERE session = :s AND status = 'pending' AND seq < "
            "(SELECT seq FROM session_messages WHERE message_id = :by)",
            {"s": session, "by": by, "now": store.now_ms(), "why": f"superseded by {by}"},
        )


def move_segment(store: Store, session: str, segment: int, run_id: str, first_turn: int) -> bool:
    """Point the session at its segment ``segment`` (run ``run_id``), once: False when it is
    there already or further on (a replayed rollover)."""
    d = store.driver
    now = store.now_ms()
    with d.transaction() as cur:
        n = d.execute(
            cur,
            "UPDATE sessions SET run_id = :run, segment = :seg, updated_at_ms = :now "
            "WHERE name = :s AND segment < :seg",
            {"s": session, "seg": segment, "run": run_id, "now": now},
        )
        d.execute(
            cur,
            "INSERT INTO session_segments (session, segment, run_id, first_turn, started_at_ms) "
            "VALUES (:s, :seg, :run, :first, :now) ON CONFLICT DO NOTHING",
            {"s": session, "seg": segment, "run": run_id, "first": first_turn, "now": now},
        )
    return bool(n)


def segments(store: Store, session: str) -> list[SegmentRow]:
    d = store.driver
    with d.read() as cur:
        rows = d.fetchall(
            cur,
            "SELECT session, segment, run_id, first_turn, started_at_ms FROM session_segments "
            "WHERE session = :s ORDER BY segment",
            {"s": session},
        )
    return [SegmentRow(str(r[0]), int(r[1]), str(r[2]), int(r[3]), int(r[4])) for r in rows]
