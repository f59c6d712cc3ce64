"""The ``console`` command: serve the web console (:mod:`torpor.console`), or add a person to
its users file. Starlette, Jinja2 and uvicorn are imported here, only when serving."""

from __future__ import annotations

import getpass
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import ConfigError, UsersFileError
from .render import console as rich_console
from .render import plain
from .root import options


def _password(stdin: bool) -> str:
    if stdin:
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        raise UsersFileError("the two passwords differ; nothing was written")
    return first


def console(
    ctx: typer.Context,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (loopback by default).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, help="Port (0: any free port).")] = 8470,
    users: Annotated[
        Path | None,
        typer.Option(
            "--users",
            metavar="FILE",
            help="Users file (names, scrypt password hashes). Default: $TORPOR_CONSOLE_USERS, "
            "else $TORPOR_CONFIG_DIR/console-users; never inside TORPOR_HOME.",
        ),
    ] = None,
    delegate: Annotated[
        str | None,
        typer.Option(
            "--delegate",
            metavar="NAME",
            help="Sign decisions with this delegate's key (keyring line `NAME "
            "delegate-for=alice,bob ssh-ed25519 …`) for the logged-in person. Without it the "
            "console decides no approvals.",
        ),
    ] = None,
    delegate_key: Annotated[
        Path | None,
        typer.Option(
            "--delegate-key",
            metavar="PATH",
            help="The delegate's private key (default: $TORPOR_CONFIG_DIR/keys/NAME).",
        ),
    ] = None,
    audit_log: Annotated[
        Path | None,
        typer.Option("--audit-log", metavar="FILE", help="Append every action as a JSON line."),
    ] = None,
    allowed_hosts: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            metavar="NAME",
            help="Also answer requests for this host name (a reverse proxy's; repeatable).",
        ),
    ] = None,
    secure_cookie: Annotated[
        bool,
        typer.Option("--secure-cookie", help="Mark the session cookie Secure (served over HTTPS)."),
    ] = False,
    poll: Annotated[
        float, typer.Option("--poll", metavar="S", min=0.5, help="Seconds between refreshes.")
    ] = 3.0,
    add_user: Annotated[
        str | None,
        typer.Option(
            "--add-user",
            metavar="NAME",
            help="Add NAME to the users file (or set their password), then exit.",
        ),
    ] = None,
    password_stdin: Annotated[
        bool,
        typer.Option("--password-stdin", help="With --add-user: read the password from stdin."),
    ] = False,
) -> None:
    """Serve the web console: see runs and steer them (approve, deny, revoke, resolve, cancel,
    signal, raise a budget, retry) in a browser, as a logged-in person.

    Example: torpor console --delegate console@ops --port 8470
    """
    settings = options(ctx).settings()
    users_path = settings.console_users_path(users)
    out = rich_console()
    if add_user is not None:
        from ..console.users import Users

        table = Users.load(users_path, missing_ok=True)
        table.with_user(add_user, _password(password_stdin)).save()
        out.print(plain(f"{add_user} may log in to the console (users file {users_path})"))
        return
    try:
        from ..console.actions import Delegate
        from ..console.app import ConsoleConfig, redacted
        from ..console.server import is_loopback, serve
        from ..console.users import Users
    except ImportError as exc:
        raise ConfigError(
            f"the console needs its extra ({exc.name} is missing): pip install 'torpor[console]'"
        ) from None
    if not Users.load(users_path).hashes:
        raise UsersFileError(
            f"the users file {users_path} lists nobody: add a user with "
            f"`torpor console --add-user NAME --users {users_path}`"
        )
    hosts = ["127.0.0.1", "localhost", "::1", *(allowed_hosts or [])]
    if host not in ("0.0.0.0", "::", "") and host.strip("[]") not in hosts:
        hosts.append(host.strip("[]"))
    cfg = ConsoleConfig(
        settings=settings,
        users=users_path,
        delegate=Delegate.load(settings, delegate, delegate_key) if delegate else None,
        audit=audit_log,
        allowed_hosts=hosts,
        secure_cookie=secure_cookie,
        poll_s=poll,
    )
    err = rich_console(stderr=True)
    if not is_loopback(host):
        err.print(
            plain(
                f"warning: listening on {host}, not loopback: put the console behind a reverse "
                "proxy that terminates TLS (and pass --secure-cookie)",
                style="yellow",
            )
        )
    signer = f"decisions signed by {delegate}" if delegate else "no decisions (no --delegate)"
    audit = logging.getLogger("torpor.console")  # every action, done or refused, on stderr too
    if not audit.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        audit.addHandler(handler)
        audit.setLevel(logging.INFO)

    def announce(url: str) -> None:
        out.print(plain(f"torpor console on {url} ({redacted(settings.database_url)}; {signer})"))
        sys.stdout.flush()

    serve(cfg, host, port, announce=announce)


def register(app: typer.Typer) -> None:
    """Add ``console`` to ``app``."""
    app.command()(console)
