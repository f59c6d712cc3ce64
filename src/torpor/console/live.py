"""The run page, live (issue 40): server-sent events instead of polling.

``GET /runs/{run_id}/sse?stream=reply`` (a page like the others: a session is required) is a
``text/event-stream`` of

- ``item`` events — the stream's items (:class:`torpor.streams.StreamItem` as JSON), each
  with ``id:`` its offset, so a browser that reconnects sends ``Last-Event-ID`` and gets every
  later item once (without one: ``?after=OFFSET``, else from the first);
- ``history`` events — the run's history grew (data: its last seq): the page fetches its live
  summary again (``/runs/{run_id}/live``, the htmx fragment it polled before);
- ``done`` — the run finished and every item was sent: the page stops listening.

A response lasts at most :data:`MAX_RESPONSE_S`; the browser's EventSource then reconnects
with ``Last-Event-ID`` (the stream resumes where it was), so no connection outlives a server
shutdown by long. Items are scrubbed again on the way out (the console's sink, G12). The run
page shows the ``reply`` stream as it was when drawn (:func:`reply_of`: a page reloaded
mid-reply shows what was written), then what comes.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..client import Client
from ..errors import RunNotFoundError
from ..streams import REPLY, fold
from .app import CONSOLE, Console
from .sessions import Session

#: How long one event-stream response lasts before the browser reconnects (seconds).
MAX_RESPONSE_S = 60.0
#: How often the run row is looked at for a grown history (seconds; the stream's own items
#: wake the response at once).
HISTORY_S = 0.5
#: A comment line this often keeps proxies from closing a quiet response (seconds).
KEEPALIVE_S = 15.0


def reply_of(client: Client, run_id: str, name: str = REPLY) -> dict[str, Any]:
    """The stream as the run page draws it: ``parts`` (each ``part``, ``state``, ``text``;
    retracted ones included, the page hides them) and ``after`` (the last offset drawn)."""
    reader = client.stream(run_id, name, follow=False)
    items = [i for i in reader]
    parts = [{"part": p.part, "state": p.state, "text": p.text} for p in fold(items)]
    return {"name": name, "parts": parts, "after": reader.offset}


def _offset(value: str | None) -> int:
    try:
        return max(0, int(value or 0))
    except ValueError:
        return 0


def _event(kind: str, data: Any, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(CONSOLE(data), ensure_ascii=False)}\n\n"


async def run_sse(request: Request, s: Session) -> Response:
    """See the module docstring."""
    c: Console = request.app.state.console
    run_id = request.path_params["run_id"]
    name = request.query_params.get("stream") or REPLY
    after = _offset(request.headers.get("last-event-id") or request.query_params.get("after"))
    seen = _offset(request.query_params.get("seen"))
    try:
        reader = await c.call(c.client.stream, run_id, name, after=after)
    except RunNotFoundError as exc:
        return c.refuse(request, s, 404, str(exc))
    reader.poll_s = HISTORY_S

    async def events() -> AsyncIterator[str]:
        nonlocal seen
        yield "retry: 1000\n\n"
        start = last_sent = time.monotonic()
        while time.monotonic() - start < MAX_RESPONSE_S:
            for it in await c.call(reader.read):
                yield _event("item", it.to_json(), it.offset)
                last_sent = time.monotonic()
            rec = await c.call(c.client.get, run_id)
            if rec.last_seq > seen:
                seen = rec.last_seq
                yield _event("history", seen)
                last_sent = time.monotonic()
            if reader.done:
                yield _event("done", {"offset": reader.offset})
                return
            if time.monotonic() - last_sent > KEEPALIVE_S:
                yield ": keep-alive\n\n"
                last_sent = time.monotonic()
            if await request.is_disconnected():
                return

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


__all__ = ["MAX_RESPONSE_S", "reply_of", "run_sse"]
