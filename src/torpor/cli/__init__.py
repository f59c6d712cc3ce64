"""The ``torpor`` command line: a thin Typer + Rich adapter over :class:`~torpor.Runtime` and
:class:`~torpor.Client`.

Every read command prints a human table by default and JSON with ``--json``. Every expected
error — a torpor error, bad JSON input, a usage mistake — is one line ``error: …`` on stderr and
a non-zero exit code, never a traceback. They are caught in one place, :func:`main`.

Exit codes: 0 done (``start``/``resume``: the run succeeded, possibly with warnings, or waits);
1 torpor refused or failed (unknown run, finished run, store error …); 2 bad usage or input
(malformed JSON, missing option); 3 ``start``/``resume`` ended the run with another outcome
(failed, blocked, unresolved, stopped_safe, cancelled); 75 the run is leased by another live
process (retry later, ``EX_TEMPFAIL``); 130 interrupted.

The store is ``--db URL`` or ``$TORPOR_DATABASE_URL`` or ``sqlite:///$TORPOR_HOME/torpor.db``;
workflows are referenced by their registered name, their modules imported with ``--import``
(repeatable) or ``$TORPOR_IMPORT`` (comma-separated).

Layout: ``root.py`` holds the Typer ``app`` and the global options; the commands live in
``execute.py`` (start, resume, worker), ``read.py`` (ls, show, events), ``watch.py``
(watch: a run's stream as it is written), ``steer.py`` (approve,
deny, revoke, signal, cancel, resolve, budget), ``keys.py`` (keys init/add/remove/list),
``artifacts.py``, ``storage.py`` (storage, gc, retention, archive), ``memory.py`` (context),
``episodes.py`` (memory search/show/sync/prune), ``schedule.py`` (schedule
add/ls/rm/pause/resume, queue set/ls/rm), ``doctor.py`` (examine a store), ``explore.py`` and
``console.py`` (the web console; its web framework is imported only when it serves), each
adding its commands to the app in its ``register``; they open a Client or Runtime through
``context.py``, print through ``render.py`` and stop with the codes in ``exits.py``.

This module stays light: the app and its commands are loaded on first use (:func:`main`, or
``from torpor.cli import app``), so ``torpor --version`` answers from ``version.py`` without
importing Typer, Rich or the commands.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .version import version_line

if TYPE_CHECKING:
    import typer

    from .root import app

__all__ = ["app", "main"]

_app: typer.Typer | None = None
_command: Any = None

#: Commands whose module alone is registered when one of them is invoked, so that a read
#: command imports only what it prints (issue 48): ``torpor ls`` loads neither the engine nor
#: the other commands. Every other invocation (``--help`` too) registers them all.
_LIGHT = {
    "ls": "read",
    "show": "read",
    "events": "read",
    "watch": "watch",
    "session": "session",
}
#: The root options that take a value (see ``root.py``), skipped to find the command's name.
_VALUED = {"--db", "--artifacts", "--import"}


def _command_of(args: Sequence[str]) -> str | None:
    """The name of the command ``args`` invoke (the first word that is not a root option or
    its value), or None."""
    it = iter(args)
    for a in it:
        if a in _VALUED:
            next(it, None)
        elif not a.startswith("-"):
            return a
    return None


_light: set[str] = set()


def _load_one(module_name: str) -> typer.Typer:
    """The app with the commands of one module only (for :data:`_LIGHT`); :func:`_load_app`
    registers them all afresh later if asked, in their order."""
    import importlib

    from .root import app

    if module_name not in _light:
        importlib.import_module(f"{__name__}.{module_name}").register(app)
        _light.add(module_name)
    return app


def _load_app() -> typer.Typer:
    """The app with every command registered (once, on first use)."""
    global _app
    if _app is None:
        from . import (
            artifacts,
            console,
            doctor,
            episodes,
            execute,
            explore,
            fork,
            keys,
            marks,
            memory,
            read,
            sandbox,
            schedule,
            session,
            steer,
            storage,
            talk,
            watch,
        )
        from .root import app, reflow_help

        app.registered_commands.clear()  # any registered by _load_one, re-added in order
        # Each command module adds its commands to the app; this order is the order
        # ``torpor --help`` lists them in.
        for module in (
            execute,
            read,
            watch,
            fork,
            memory,
            episodes,
            steer,
            talk,
            schedule,
            session,
            keys,
            artifacts,
            storage,
            marks,
            explore,
            console,
            doctor,
            sandbox,
        ):
            module.register(app)
        reflow_help(app)
        _app = app
    return _app


def _load_command() -> Any:
    """The app as one Click command, built once, its numbers bounded (:mod:`.numbers`)."""
    global _command
    if _command is None:
        import typer

        from .numbers import bound_numbers

        _command = bound_numbers(typer.main.get_command(_load_app()))
    return _command


def __getattr__(name: str) -> Any:
    """``torpor.cli.app``, loaded when first asked for."""
    if name == "app":
        return _load_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _fast_ls(args: list[str]) -> None:
    """``torpor ls`` without Typer (:func:`torpor.cli.listing.fast_ls`), inside the same error
    boundary as the app; returns when ``args`` are not a plain ``ls``."""
    from .exits import error_boundary
    from .listing import fast_ls

    with error_boundary():
        done = fast_ls(args)
    if done:
        raise SystemExit(0)


def main(argv: Sequence[str] | None = None) -> None:
    """The ``torpor`` script: run the app inside the one error boundary."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--version"]:
        # The fast path: no Typer, Rich or commands to import (other options go through Typer,
        # whose --version prints the same line).
        sys.stdout.write(version_line())
        raise SystemExit(0)

    if _command_of(args) == "ls" and _app is None:
        _fast_ls(args)  # returns only when the app must handle these words

    import typer

    from .exits import EXIT_ERROR, EXIT_USAGE, error_boundary, fail

    light = _LIGHT.get(_command_of(args) or "")
    if light and _app is None:  # a read command: only its module's commands (issue 48)
        from .numbers import bound_numbers
        from .root import reflow_help

        one = _load_one(light)
        reflow_help(one)
        command = bound_numbers(typer.main.get_command(one))
    else:
        command = _load_command()
    if not args:
        args = ["--help"]
    try:
        with error_boundary():
            rv = command.main(args=args, prog_name="torpor", standalone_mode=False)
    except typer.TyperException as exc:  # click usage errors (missing option, bad value, ...)
        usage_ctx = getattr(exc, "ctx", None)
        hint = f" (see '{usage_ctx.command_path} --help')" if usage_ctx is not None else ""
        # (pydantic's "Value error, " prefix, which Typer's parameter checks pass on, says nothing)
        message = exc.format_message().replace("Value error, ", "")
        fail(message + hint, getattr(exc, "exit_code", EXIT_USAGE))
    except typer.Abort:
        fail("aborted", EXIT_ERROR)
    raise SystemExit(rv if isinstance(rv, int) else 0)
