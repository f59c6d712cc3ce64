"""Putting the console together (:func:`build_app`) and serving it with uvicorn (:func:`serve`)."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ..client import Client
from . import routes
from .app import HERE, Console, ConsoleConfig, SecurityHeaders


def build_app(cfg: ConsoleConfig, client: Client | None = None) -> Starlette:
    """The console as an ASGI app. Only the login form and the static files are reachable
    without a session: every other route is a guarded page or action (:mod:`.routes`)."""
    console = Console(cfg, client)
    table: list[BaseRoute] = [
        Route("/login", routes.login_form, methods=["GET"]),
        Route("/login", routes.login, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    table += [Route(path, console.page(fn), methods=["GET"]) for path, fn in routes.PAGES]
    table += [Route(path, console.action(fn), methods=["POST"]) for path, fn in routes.ACTIONS]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if client is None:  # the console opened it
            console.close()

    async def wrong_method(request: Request, exc: Exception) -> Response:
        """A GET (say) to an action: refused as before (405), and written to the audit log."""
        message = f"{request.method} is not allowed here: nothing was done."
        console.audit_refusal(request, console.session_of(request), 405, message)
        return PlainTextResponse(message, status_code=405)

    app = Starlette(
        routes=table,
        exception_handlers={405: wrong_method},
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(TrustedHostMiddleware, allowed_hosts=cfg.allowed_hosts),
        ],
        lifespan=lifespan,
    )
    app.state.console = console
    return app


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(
    cfg: ConsoleConfig,
    host: str = "127.0.0.1",
    port: int = 8470,
    *,
    announce: Callable[[str], None] = print,
    log_level: str = "warning",
) -> None:
    """Serve the console until interrupted. ``announce`` gets the URL once listening."""
    import uvicorn

    sock = bind(host, port)
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}/"
    app = build_app(cfg)
    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        lifespan="on",
        # An open event stream (the run page's, :mod:`.live`) is not waited for long.
        timeout_graceful_shutdown=3,
    )
    server = uvicorn.Server(config)
    announce(url)
    server.run(sockets=[sock])


__all__ = ["bind", "build_app", "is_loopback", "serve"]
