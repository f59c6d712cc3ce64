"""The console's web application: Starlette routes over :mod:`.pages` (reading) and
:mod:`.actions` (steering), Jinja2 templates with autoescaping, htmx served from this package.

Security, in one place (:class:`Console`):

- **No anonymous access.** Every route but the login form and the static files goes through
  :meth:`Console.page` (GET: a session is required, else a redirect to the login form) or
  :meth:`Console.action` (POST: a session *and* its CSRF token are required, else 401/403 and
  nothing is done). There is no other way to declare a route here.
- **CSRF:** the synchronizer token of the session (:mod:`.sessions`) in every form (or the
  ``X-CSRF-Token`` header); the login form has its own double-submit token. A request whose
  ``Origin`` names another site is refused too, and the session cookie is ``SameSite=Strict``.
- **Escaping:** Jinja2 ``autoescape`` on every template; run ids, names, payloads and artifact
  contents are text, never markup. A Content-Security-Policy allows scripts from this origin
  only (no inline script), so even a missed escape could not run one. Artifact bytes are
  downloaded as attachments, never served under their recorded media type.
- **Hosts:** only the hosts the console is reached by are answered (DNS rebinding).
"""

from __future__ import annotations

import secrets
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import scrub
from ..client import Client
from ..config import Settings
from ..keys import Trust
from ..report.approvals import trust_here
from ..report.hidden import hidden_chars, is_hidden
from ..urls import display_url
from .actions import Audit, Delegate, Steering
from .sessions import Session, Sessions, Throttle
from .users import Users

HERE = Path(__file__).parent
SESSION_COOKIE = "torpor_console"
LOGIN_COOKIE = "torpor_console_login"
#: Largest form body accepted (a signal payload, a comment).
MAX_BODY = 256 * 1024

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}

Page = Callable[[Request, Session], Awaitable[Response]]
Action = Callable[[Request, Session, dict[str, str]], Awaitable[Response]]


@dataclass
class ConsoleConfig:
    """How the console runs. ``users``: the users file; ``delegate``: the signing identity
    for decisions (None: the console decides nothing); ``audit``: JSON-lines audit log file."""

    settings: Settings
    users: Path
    delegate: Delegate | None = None
    audit: Path | None = None
    allowed_hosts: list[str] = field(default_factory=lambda: ["127.0.0.1", "localhost", "::1"])
    secure_cookie: bool = False
    poll_s: float = 3.0


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every response (pure ASGI middleware)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for k, v in SECURITY_HEADERS.items():
                    if k not in headers:
                        headers[k] = v
            await send(message)

        await self.app(scope, receive, with_headers)


def _pathq(value: Any) -> str:
    """A URL path segment: every reserved character percent-encoded."""
    return urllib.parse.quote(str(value), safe="")


#: Every value a console page shows: no secret this process knows, in any encoding (G12).
CONSOLE = scrub.sink("console", "every value a console page renders: torpor.console.app")


def _scrubbed(value: Any) -> Any:
    """Jinja2's ``finalize``: each ``{{ value }}`` scrubbed before it is escaped."""
    if not CONSOLE.active or not isinstance(value, str):
        return value
    if isinstance(value, jinja2.utils.markupsafe.Markup):
        return jinja2.utils.markupsafe.Markup(CONSOLE.text(str(value)))
    return CONSOLE.text(value)


_HIDDEN_TITLE = "an invisible or bidi character"


def _visible(value: Any) -> Any:
    """A filter: ``value`` escaped, each invisible or bidi character shown as a marked
    ``U+202E`` (:mod:`torpor.report.hidden`) instead of reordering or hiding what follows."""
    text = str(value)
    if not hidden_chars(text):
        return text
    esc = jinja2.utils.markupsafe.escape
    return jinja2.utils.markupsafe.Markup(
        "".join(
            f'<span class="hidden-char" title="{_HIDDEN_TITLE}">U+{ord(ch):04X}</span>'
            if is_hidden(ch)
            else str(esc(ch))
            for ch in text
        )
    )


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


class Console:
    """The running console: its client, sessions, users and templates."""

    def __init__(self, cfg: ConsoleConfig, client: Client | None = None):
        self.cfg = cfg
        self.client = client or Client(settings=cfg.settings)
        self.sessions = Sessions()
        # Guessing one person's password stops after 5 misses; one address (maybe a proxy
        # many people share) after 30.
        self.throttle_user = Throttle(limit=5)
        self.throttle_addr = Throttle(limit=30)
        self._users = Users.load(cfg.users)
        self._users_seen = self._stat(cfg.users)
        self.audit = Audit(cfg.audit)
        self.steering = Steering(self.client, cfg.settings, self.audit, cfg.delegate)
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            finalize=_scrubbed,
        )
        self.env.filters["pathq"] = _pathq
        self.env.filters["qs"] = lambda d: urllib.parse.urlencode(d)
        self.env.filters["size"] = _size
        self.env.filters["visible"] = _visible

    # ---------------------------------------------------------------- users & trust

    @staticmethod
    def _stat(path: Path) -> tuple[int, int] | None:
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def users(self) -> Users:
        """The users file, re-read when it changed (a removed user cannot log in again)."""
        seen = self._stat(self.cfg.users)
        if seen != self._users_seen:
            self._users = Users.load(self.cfg.users, missing_ok=True)
            self._users_seen = seen
        return self._users

    def trust(self) -> Trust | None:
        return trust_here(self.cfg.settings)

    # ---------------------------------------------------------------- sessions

    def session_of(self, request: Request) -> Session | None:
        s = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        if s is not None and s.user not in self.users().hashes:
            self.sessions.drop(request.cookies.get(SESSION_COOKIE))  # removed from the file
            return None
        return s

    def set_session_cookie(self, response: Response, token: str) -> None:
        response.set_cookie(
            SESSION_COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=self.cfg.secure_cookie,
            path="/",
        )

    # ---------------------------------------------------------------- rendering

    def render(
        self,
        request: Request,
        session: Session | None,
        template: str,
        status: int = 200,
        **ctx: Any,
    ) -> HTMLResponse:
        html = self.env.get_template(template).render(
            user=session.user if session else None,
            csrf=session.csrf if session else "",
            flash=session.pop_flash() if session and template.endswith("page.html") else [],
            poll_s=self.cfg.poll_s,
            delegate=self.cfg.delegate,
            store_url=redacted(self.cfg.settings.database_url),
            path=request.url.path,
            **ctx,
        )
        return HTMLResponse(html, status_code=status)

    def refuse(
        self, request: Request, session: Session | None, status: int, message: str
    ) -> HTMLResponse:
        """The refusal page; the refusal is also written to the audit log (issue 34): who (the
        session's person, or ``-``), the method and path, the ``Origin`` (or ``Referer``) and
        the client address, the status and why."""
        self.audit_refusal(request, session, status, message)
        return self.render(
            request, session, "refused_page.html", status=status, message=message, code=status
        )

    def audit_refusal(
        self, request: Request, session: Session | None, status: int, message: str
    ) -> None:
        """One audit line for a refused request (see :meth:`refuse`)."""
        self.audit.record(
            session.user if session else "-",
            "request",
            str(request.path_params.get("run_id", "")),
            "refused",
            status=status,
            reason=message,
            method=request.method,
            path=request.url.path,
            origin=request.headers.get("origin") or request.headers.get("referer") or "",
            address=request.client.host if request.client else "",
            content_type=request.headers.get("content-type", ""),
        )

    # ---------------------------------------------------------------- route guards

    def page(self, fn: Page) -> Callable[[Request], Awaitable[Response]]:
        """A GET route for logged-in people; others are sent to the login form."""

        async def endpoint(request: Request) -> Response:
            s = self.session_of(request)
            if s is None:
                if request.headers.get("HX-Request"):
                    return Response(status_code=401, headers={"HX-Redirect": "/login"})
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(
                    "/login?" + urllib.parse.urlencode({"next": target}), status_code=303
                )
            return await fn(request, s)

        return endpoint

    def action(self, fn: Action) -> Callable[[Request], Awaitable[Response]]:
        """A POST route: refused (nothing done) without a session, without the session's CSRF
        token, or from another origin."""

        async def endpoint(request: Request) -> Response:
            s = self.session_of(request)
            if s is None:
                return self.refuse(request, None, 401, "You are not logged in: nothing was done.")
            form = await read_form(request)
            if form is None:
                return self.refuse(request, s, 413, "The request is too large: nothing was done.")
            if not same_origin(request):
                return self.refuse(
                    request, s, 403, "The request came from another site: nothing was done."
                )
            if not s.csrf_ok(form.get("csrf") or request.headers.get("X-CSRF-Token")):
                return self.refuse(
                    request,
                    s,
                    403,
                    "The request carries no valid CSRF token: nothing was done. Reload the "
                    "page and try again.",
                )
            return await fn(request, s, form)

        return endpoint

    async def call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """Run a blocking Client call off the event loop."""
        return await run_in_threadpool(fn, *args, **kw)

    def close(self) -> None:
        self.client.close()


async def read_form(request: Request) -> dict[str, str] | None:
    """The url-encoded form of a POST (None when over :data:`MAX_BODY`). The last value of a
    repeated field wins."""
    if int(request.headers.get("content-length") or 0) > MAX_BODY:
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            return None
    ctype = request.headers.get("content-type", "").split(";")[0].strip()
    if ctype not in ("application/x-www-form-urlencoded", ""):
        return {}
    pairs = urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
    return dict(pairs)


def same_origin(request: Request) -> bool:
    """False when the request's ``Origin`` (or, without one, ``Referer``) names another host
    than the one it was sent to."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin or origin == "null":
        return origin != "null"
    host = urllib.parse.urlsplit(origin).netloc
    return host == request.headers.get("host", "")


def redacted(url: str) -> str:
    """A store URL without its password (:func:`torpor.urls.display_url`)."""
    return display_url(url)


def login_token() -> str:
    return secrets.token_urlsafe(24)


__all__ = ["Console", "ConsoleConfig", "SecurityHeaders", "read_form", "redacted", "same_origin"]
