"""The console's pages and actions. Each page takes the request and the logged-in session;
each action also takes the checked form (:meth:`~.app.Console.page`, :meth:`~.app.Console.action`
guard them: :data:`PAGES` and :data:`ACTIONS` are the only routes besides logging in).

Actions follow Post/Redirect/Get: what happened (or why nothing was done) is shown on the
page the person is sent back to.
"""

from __future__ import annotations

import hmac
import urllib.parse
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..client_steer import edit_diff
from ..errors import ArtifactNotFoundError, RunNotFoundError, TorporError
from ..serde import sha256_hex
from . import live, pages, views
from .app import LOGIN_COOKIE, SESSION_COOKIE, Console, login_token, read_form, same_origin
from .session_page import session_view
from .sessions import Session


def _console(request: Request) -> Console:
    c: Console = request.app.state.console
    return c


def _run_url(run_id: str, anchor: str = "") -> str:
    return f"/runs/{urllib.parse.quote(run_id, safe='')}" + (f"#{anchor}" if anchor else "")


def _safe_next(target: str | None) -> str:
    """A local path to go to after logging in (never another site)."""
    if target and target.startswith("/") and not target.startswith(("//", "/\\")):
        return target
    return "/runs"


# ------------------------------------------------------------------------------ login


async def login_form(request: Request) -> Response:
    c = _console(request)
    if c.session_of(request) is not None:
        return RedirectResponse(_safe_next(request.query_params.get("next")), status_code=303)
    return _login_page(request, c, "", 200)


def _login_page(request: Request, c: Console, error: str, status: int) -> Response:
    token = login_token()
    resp = c.render(
        request,
        None,
        "login_page.html",
        status=status,
        login_csrf=token,
        next=_safe_next(request.query_params.get("next")),
        error=error,
    )
    resp.set_cookie(
        LOGIN_COOKIE, token, httponly=True, samesite="strict", secure=c.cfg.secure_cookie
    )
    return resp


async def login(request: Request) -> Response:
    c = _console(request)
    form = await read_form(request)
    if form is None:
        return c.refuse(request, None, 413, "The request is too large.")
    cookie = request.cookies.get(LOGIN_COOKIE) or ""
    given = form.get("csrf", "")
    if not same_origin(request) or not cookie or not hmac.compare_digest(cookie, given):
        return c.refuse(
            request, None, 403, "The login form carries no valid CSRF token: reload it."
        )
    user = form.get("user", "").strip()
    address = request.client.host if request.client else "?"
    if c.throttle_user.blocked(user) or c.throttle_addr.blocked(address):
        c.audit_refusal(request, None, 429, f"login as {user!r}: too many failed attempts")
        return _login_page(request, c, "Too many failed attempts: wait a few minutes.", 429)
    ok = await c.call(c.users().verify, user, form.get("password", ""))
    if not ok:
        c.audit_refusal(request, None, 401, f"login as {user!r}: unknown user or wrong password")
        c.throttle_user.failed(user)
        c.throttle_addr.failed(address)
        return _login_page(request, c, "Unknown user or wrong password.", 401)
    c.throttle_user.succeeded(user)
    token, _ = c.sessions.create(user)
    resp = RedirectResponse(_safe_next(form.get("next")), status_code=303)
    c.set_session_cookie(resp, token)
    resp.delete_cookie(LOGIN_COOKIE)
    return resp


async def logout(request: Request, s: Session, form: dict[str, str]) -> Response:
    c = _console(request)
    c.sessions.drop(request.cookies.get(SESSION_COOKIE))
    resp = RedirectResponse("/login", status_code=303)
    resp.delete_cookie(SESSION_COOKIE)
    return resp


# ------------------------------------------------------------------------------ pages


async def home(request: Request, s: Session) -> Response:
    return RedirectResponse("/runs", status_code=303)


async def runs_list(request: Request, s: Session) -> Response:
    c = _console(request)
    f = pages.Filters.parse(request.query_params)
    data = await c.call(pages.runs_page, c.client, f)
    return c.render(request, s, "runs_page.html", **data)


async def runs_table(request: Request, s: Session) -> Response:
    c = _console(request)
    f = pages.Filters.parse(request.query_params)
    data = await c.call(pages.runs_page, c.client, f)
    return c.render(request, s, "runs_live.html", **data)


def _not_found(request: Request, c: Console, s: Session, exc: Exception) -> HTMLResponse:
    return c.refuse(request, s, 404, str(exc))


async def run_view(request: Request, s: Session) -> Response:
    c = _console(request)
    run_id = request.path_params["run_id"]
    try:
        data = await c.call(pages.run_page, c.client, run_id, c.trust())
        reply = await c.call(live.reply_of, c.client, run_id)
    except RunNotFoundError as exc:
        return _not_found(request, c, s, exc)
    return c.render(request, s, "run_page.html", reply=reply, **data)


async def run_summary(request: Request, s: Session) -> Response:
    c = _console(request)
    run_id = request.path_params["run_id"]
    try:
        live = await c.call(pages.summary, c.client, run_id)
    except RunNotFoundError as exc:
        return _not_found(request, c, s, exc)
    try:
        seen = int(request.query_params.get("seen") or live["last_seq"])
    except ValueError:
        seen = live["last_seq"]
    return c.render(request, s, "run_live.html", live=live, seen=seen)


async def run_events(request: Request, s: Session) -> Response:
    c = _console(request)
    run_id = request.path_params["run_id"]
    try:
        after = max(0, int(request.query_params.get("after") or 0))
        limit = max(1, min(int(request.query_params.get("limit") or 500), 5000))
    except ValueError:
        after, limit = 0, 500
    try:
        evs = await c.call(c.client.events, run_id, after, limit)
    except RunNotFoundError as exc:
        return _not_found(request, c, s, exc)
    return c.render(
        request,
        s,
        "events_page.html",
        run_id=run_id,
        rows=views.timeline(evs),
        after=after,
        limit=limit,
        more=evs[-1].seq if len(evs) == limit else None,
    )


async def approval_review(request: Request, s: Session) -> Response:
    c = _console(request)
    run_id = request.path_params["run_id"]
    aid = request.query_params.get("id", "")
    try:
        data: Any = await c.call(pages.approval_page, c.client, run_id, aid, c.trust())
    except (RunNotFoundError, ArtifactNotFoundError) as exc:
        return _not_found(request, c, s, exc)
    if data is None:
        return c.refuse(request, s, 404, f"run {run_id!r} has no approval {aid!r}")
    row = data["approval"]
    decided_by = [d.approver for d in data["state"].approvals[aid].decisions]
    why_not = await c.call(c.steering.why_not_decide, s.user, row.approvers, decided_by)
    proposed = await c.call(_proposed, c, run_id, aid)
    return c.render(
        request, s, "approval_page.html", run_id=run_id, why_not=why_not, proposed=proposed, **data
    )


def _proposed(c: Console, run_id: str, aid: str) -> str | None:
    """The proposed content as text, for the edit box (None: not a text document)."""
    try:
        return c.client.proposed(run_id, aid)
    except (TorporError, UnicodeDecodeError):
        return None


async def artifact_view(request: Request, s: Session) -> Response:
    c = _console(request)
    run_id, sha = request.path_params["run_id"], request.path_params["sha256"]
    try:
        refs = await c.call(pages.find_by_hash, c.client, run_id, sha)
        shown = await c.call(pages.content, c.client, refs[-1])
    except (RunNotFoundError, ArtifactNotFoundError) as exc:
        return _not_found(request, c, s, exc)
    return c.render(request, s, "artifact_page.html", run_id=run_id, refs=refs, shown=shown)


async def artifact_raw(request: Request, s: Session) -> Response:
    """The bytes, as a download: never rendered by the browser under the recorded media
    type (an artifact of type text/html would otherwise be a page of this origin)."""
    c = _console(request)
    run_id, sha = request.path_params["run_id"], request.path_params["sha256"]
    try:
        refs = await c.call(pages.find_by_hash, c.client, run_id, sha)
        data = await c.call(c.client.artifact_bytes, sha)
    except (RunNotFoundError, ArtifactNotFoundError) as exc:
        return _not_found(request, c, s, exc)
    except TorporError as exc:  # altered or missing in the artifact store: say so
        return c.refuse(request, s, 409, f"{exc}: the bytes were altered or removed")
    name = urllib.parse.quote(refs[-1].name.replace("/", "_"), safe="")
    return Response(
        data,
        media_type="application/octet-stream",
        headers={"content-disposition": f"attachment; filename*=UTF-8''{name}"},
    )


# ------------------------------------------------------------------------------ actions


async def _act(request: Request, s: Session, fn: Any, *args: Any, **kw: Any) -> Response:
    """Run a Steering action for the session's person; flash what happened; back to the run."""
    c = _console(request)
    run_id = request.path_params["run_id"]
    try:
        message = await c.call(fn, s.user, run_id, *args, **kw)
        s.flash.append(("ok", message))
    except TorporError as exc:
        s.flash.append(("error", f"refused: {exc}"))
    return RedirectResponse(_run_url(run_id), status_code=303)


async def approve(request: Request, s: Session, form: dict[str, str]) -> Response:
    return await _decide(request, s, form, "approve")


async def deny(request: Request, s: Session, form: dict[str, str]) -> Response:
    return await _decide(request, s, form, "deny")


async def _decide(request: Request, s: Session, form: dict[str, str], decision: str) -> Response:
    seen = [h for h in form.get("hashes", "").split(",") if h]
    steer = _console(request).steering
    return await _act(
        request,
        s,
        steer.decide,
        form.get("approval_id", ""),
        decision,
        seen,
        form.get("comment", ""),
    )


async def respond(request: Request, s: Session, form: dict[str, str]) -> Response:
    seen = [h for h in form.get("hashes", "").split(",") if h]
    steer = _console(request).steering
    aid = form.get("approval_id", "")
    return await _act(request, s, steer.decide, aid, "respond", seen, form.get("reply", ""))


async def edit_review(request: Request, s: Session, form: dict[str, str]) -> Response:
    """The diff of an edit against the proposed content, shown before anything is signed; its
    form signs exactly these bytes (their sha256 travels with it)."""
    c = _console(request)
    run_id, aid = request.path_params["run_id"], form.get("approval_id", "")
    edited = form.get("edited", "").replace("\r\n", "\n")
    proposed = await c.call(_proposed, c, run_id, aid)
    if proposed is None:
        return c.refuse(request, s, 404, f"approval {aid!r} of run {run_id!r} has no text to edit")
    diff = edit_diff(proposed, edited)
    return c.render(
        request,
        s,
        "edit_page.html",
        run_id=run_id,
        approval_id=aid,
        hashes=form.get("hashes", ""),
        edited=edited,
        edited_sha256=sha256_hex(edited),
        diff=diff,
    )


async def approve_edited(request: Request, s: Session, form: dict[str, str]) -> Response:
    seen = [h for h in form.get("hashes", "").split(",") if h]
    steer = _console(request).steering
    return await _act(
        request,
        s,
        steer.decide,
        form.get("approval_id", ""),
        "approve",
        seen,
        form.get("comment", ""),
        edited=form.get("edited", ""),
        edited_sha256=form.get("edited_sha256", ""),
    )


async def steer_run(request: Request, s: Session, form: dict[str, str]) -> Response:
    steer = _console(request).steering
    interrupt = form.get("interrupt", "") == "on"
    return await _act(request, s, steer.steer, form.get("text", ""), interrupt)


async def revoke(request: Request, s: Session, form: dict[str, str]) -> Response:
    steer = _console(request).steering
    return await _act(request, s, steer.revoke, form.get("approval_id", ""), form.get("reason", ""))


async def resolve(request: Request, s: Session, form: dict[str, str]) -> Response:
    steer = _console(request).steering
    return await _act(
        request,
        s,
        steer.resolve,
        form.get("key", ""),
        form.get("verdict", ""),
        form.get("reason", ""),
        form.get("result", ""),
    )


async def cancel(request: Request, s: Session, form: dict[str, str]) -> Response:
    return await _act(request, s, _console(request).steering.cancel, form.get("reason", ""))


async def signal(request: Request, s: Session, form: dict[str, str]) -> Response:
    steer = _console(request).steering
    return await _act(
        request,
        s,
        steer.signal,
        form.get("name", ""),
        form.get("wait_id", ""),
        form.get("payload", ""),
    )


async def budget(request: Request, s: Session, form: dict[str, str]) -> Response:
    steer = _console(request).steering
    return await _act(
        request,
        s,
        steer.budget,
        tokens=form.get("tokens", ""),
        cost=form.get("cost", ""),
        steps=form.get("steps", ""),
        wall_clock=form.get("wall_clock", ""),
        reason=form.get("reason", ""),
    )


async def retry(request: Request, s: Session, form: dict[str, str]) -> Response:
    steer = _console(request).steering
    return await _act(request, s, steer.retry, form.get("step", ""), form.get("reason", ""))


#: Pages (GET, logged in).
PAGES = [
    ("/", home),
    ("/runs", runs_list),
    ("/runs-live", runs_table),
    ("/runs/{run_id}", run_view),
    ("/runs/{run_id}/live", run_summary),
    ("/runs/{run_id}/sse", live.run_sse),
    ("/runs/{run_id}/events", run_events),
    ("/runs/{run_id}/approval", approval_review),
    ("/runs/{run_id}/artifacts/{sha256}", artifact_view),
    ("/runs/{run_id}/artifacts/{sha256}/raw", artifact_raw),
    ("/sessions/{name}", session_view),
]

#: Actions (POST, logged in, CSRF token checked).
ACTIONS = [
    ("/logout", logout),
    ("/runs/{run_id}/approve", approve),
    ("/runs/{run_id}/deny", deny),
    ("/runs/{run_id}/respond", respond),
    ("/runs/{run_id}/edit", edit_review),
    ("/runs/{run_id}/approve-edited", approve_edited),
    ("/runs/{run_id}/steer", steer_run),
    ("/runs/{run_id}/revoke", revoke),
    ("/runs/{run_id}/resolve", resolve),
    ("/runs/{run_id}/cancel", cancel),
    ("/runs/{run_id}/signal", signal),
    ("/runs/{run_id}/budget", budget),
    ("/runs/{run_id}/retry", retry),
]
