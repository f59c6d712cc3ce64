"""The console's session page (issue 46): a session as a conversation — each message, its
disposition and the reply of the turn that answered it — with its memory beside it (the
current segment's ledger facts) and its segments. Read from the session rows
(:mod:`torpor.store.sessions`); nothing here writes."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..errors import SessionNotFoundError
from ..store import sessions as rows
from .app import Console
from .sessions import Session

#: Newest messages shown, and newest facts.
MESSAGES = 100
FACTS = 30


def session_data(client: Any, name: str) -> dict[str, Any]:
    store = client.store
    s = rows.get_session(store, name)
    if s is None:
        raise SessionNotFoundError(f"no session named {name!r}")
    _keys, gone, _live = store.ledger_index(s.run_id)
    facts = [
        r.data
        for r in store.ledger(s.run_id)
        if r.data.get("kind") != "unit" and r.data.get("key") not in gone
    ]
    return {
        "s": s,
        "run_status": store.get_run(s.run_id).status,
        "counts": rows.count_messages(store, name),
        "messages": rows.last_messages(store, name, MESSAGES),
        "segments": rows.segments(store, name),
        "facts": facts[-FACTS:],
        "fact_count": len(facts),
    }


async def session_view(request: Request, s: Session) -> Response:
    c: Console = request.app.state.console
    name = request.path_params["name"]
    try:
        data = await c.call(session_data, c.client, name)
    except SessionNotFoundError as exc:
        return c.refuse(request, s, 404, str(exc))
    return c.render(request, s, "session_page.html", **data)
