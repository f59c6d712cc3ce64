"""``torpor session`` (start, send, ls, show): long-lived agents with an inbox
(:mod:`torpor.sessions`). ``ls`` and ``show`` read the session rows directly (neither the
engine nor the agents are imported); ``start`` imports the agent's module."""

from __future__ import annotations

import importlib
import sys
from typing import Annotated, Any

import typer

from ..errors import BadInputError, SessionNotFoundError
from ..store import sessions as rows
from .context import open_client
from .render import add_row, console, emit_json, fields, heading, new_table, plain, short, when
from .root import JsonFlag

session_app = typer.Typer(
    name="session",
    help="Long-lived agents with an inbox: start, send, ls, show.\n\n"
    "Each message wakes the session for one turn; in between it sleeps, holding no process.\n\n"
    'Example: torpor session start bob --agent mybot:chat; torpor session send bob "hello"',
    no_args_is_help=True,
)

Name = Annotated[str, typer.Argument(metavar="NAME", help="The session's name.")]


def _agent(ref: str) -> Any:
    from ..sessions import SessionAgent

    mod, sep, attr = ref.partition(":")
    if not sep or not mod or not attr:
        raise BadInputError(f"--agent {ref!r}: give MODULE:ATTR (e.g. mybot:chat)")
    if "" not in sys.path:
        sys.path.insert(0, "")  # (a module in the current folder, as python -m finds it)
    try:
        obj = getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as exc:
        raise BadInputError(f"--agent {ref!r}: {exc}") from None
    if not isinstance(obj, SessionAgent):
        raise BadInputError(
            f"--agent {ref!r} is a {type(obj).__name__}, not a torpor.sessions.SessionAgent: "
            f"declare `{attr} = SessionAgent(agent)` in {mod} (workers import it to find it)"
        )
    return obj


def _sql(client: Any) -> rows.Store:
    return rows.rows_of(client.store)


def _session_json(s: rows.SessionRow, counts: dict[str, int], status: str) -> dict[str, Any]:
    return {
        "name": s.name,
        "agent": s.agent,
        "workflow": s.workflow,
        "run_id": s.run_id,
        "run_status": status,
        "segment": s.segment,
        "turns": s.turns,
        "segment_turns": s.segment_turns,
        "messages": counts,
        "created_at_ms": s.created_at_ms,
        "updated_at_ms": s.updated_at_ms,
    }


@session_app.command("start")
def start(
    ctx: typer.Context,
    name: Name,
    agent: Annotated[
        str, typer.Option("--agent", metavar="MODULE:ATTR", help="A SessionAgent to run.")
    ],
    json_out: JsonFlag = False,
) -> None:
    """Start a session (idempotent): its first segment run waits for a message once a worker
    runs it (torpor worker --import MODULE)."""
    from ..sessions import Sessions

    spec = _agent(agent)
    with open_client(ctx, create=True) as client:
        s = Sessions(client).start(name, spec, agent_ref=agent)
    if json_out:
        emit_json(_session_json(s, {}, "pending"))
        return
    console().print(
        plain(f"session {s.name} started: segment {s.segment} is run {s.run_id} ({s.workflow})")
    )


@session_app.command("send")
def send(
    ctx: typer.Context,
    name: Name,
    text: Annotated[str, typer.Argument(metavar="TEXT", help="The message.")],
    sender: Annotated[str, typer.Option("--as", metavar="NAME", help="Who sends it.")] = "user",
    message_id: Annotated[
        str | None, typer.Option("--id", metavar="ID", help="Sending an id twice is a no-op.")
    ] = None,
    supersede: Annotated[
        bool, typer.Option("--supersede", help="Replace the messages no turn took yet.")
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Put a message in the session's inbox and wake it."""
    from ..sessions import Sessions

    with open_client(ctx) as client:
        sent = Sessions(client).send(
            name, text, sender=sender, message_id=message_id, supersede=supersede
        )
    m = sent.message
    if json_out:
        emit_json(
            {
                "session": name,
                "seq": m.seq,
                "message_id": m.message_id,
                "new": sent.new,
                "run_id": sent.run_id,
                "status": m.status,
            }
        )
        return
    what = "sent" if sent.new else "already sent"
    console().print(plain(f"message #{m.seq} {what} to session {name} ({m.message_id})"))


@session_app.command("ls")
def ls(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """The sessions: segment, turns, pending messages, what the current segment does."""
    with open_client(ctx, read_only=True) as client:
        store = _sql(client)
        out = []
        for s in rows.list_sessions(store):
            counts = rows.count_messages(store, s.name)
            out.append(_session_json(s, counts, client.store.get_run(s.run_id).status))
    if json_out:
        emit_json(out)
        return
    table = new_table("session", "segment", "turns", "pending", "run", "status", "updated")
    for r in out:
        add_row(
            table,
            r["name"],
            r["segment"],
            r["turns"],
            r["messages"].get("pending", 0),
            r["run_id"],
            r["run_status"],
            when(r["updated_at_ms"]),
        )
    console().print(table)


@session_app.command("show")
def show(
    ctx: typer.Context,
    name: Name,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Newest messages shown.")] = 20,
    json_out: JsonFlag = False,
) -> None:
    """A session: its turns, segments, inbox with dispositions, and memory (the current
    segment's ledger facts)."""
    with open_client(ctx, read_only=True) as client:
        store = _sql(client)
        s = rows.get_session(store, name)
        if s is None:
            raise SessionNotFoundError(f"no session named {name!r} (torpor session ls)")
        counts = rows.count_messages(store, name)
        segs = rows.segments(store, name)
        inbox = rows.last_messages(store, name, limit)
        _keys, gone, _live = client.store.ledger_index(s.run_id)
        facts = [
            r.data
            for r in client.store.ledger(s.run_id)
            if r.data.get("kind") != "unit" and r.data.get("key") not in gone
        ]
        data = _session_json(s, counts, client.store.get_run(s.run_id).status)
    data["segments"] = [vars(g) for g in segs]
    data["inbox"] = [vars(m) for m in inbox]
    data["memory"] = {"facts": [{"kind": f.get("kind"), "text": f.get("text")} for f in facts]}
    if json_out:
        emit_json(data)
        return
    out = console()
    fields(
        out,
        [
            ("session", s.name),
            ("agent", s.agent or s.workflow),
            ("turns", s.turns),
            (
                "segment",
                f"{s.segment} (run {s.run_id}, {data['run_status']}; "
                f"continues as new every {s.segment_turns} turns)",
            ),
            ("messages", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"),
        ],
    )
    heading(out, "segments")
    t = new_table("segment", "run", "first turn", "started")
    for g in segs:
        add_row(t, g.segment, g.run_id, g.first_turn, when(g.started_at_ms))
    out.print(t)
    heading(out, "inbox")
    t = new_table("#", "from", "message", "disposition", "turn", "reply")
    for m in inbox:
        add_row(
            t,
            m.seq,
            m.sender,
            short(m.text, 60),
            m.status if not m.reason else f"{m.status}: {m.reason}",
            m.turn or "",
            short(m.reply or "", 60),
        )
    out.print(t)
    heading(out, f"memory ({len(facts)} facts in the current segment's ledger)")
    for f in facts[-10:]:
        out.print(plain(f"- [{f.get('kind')}] {short(f.get('text'), 100)}"))
    if not facts:
        out.print(plain("(none yet: facts are kept as the buffer is compacted)"))


def register(app: typer.Typer) -> None:
    app.add_typer(session_app)
