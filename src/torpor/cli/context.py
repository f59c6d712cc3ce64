"""What a command opens from its context: a :class:`~torpor.Client` or
:class:`~torpor.Runtime` on the store the global options name (workflow modules imported
first), and JSON input given in an option.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from .. import telemetry
from ..client import Client
from ..errors import BadInputError, TorporError

if TYPE_CHECKING:
    from ..history import Event
    from ..runtime import Runtime

from ..queues import queue_snapshot
from ..store import open_store
from ..workflows import import_modules
from .listing import tell_store
from .render import console, plain
from .root import options

#: Deepest nesting accepted in JSON given on the command line.
MAX_JSON_DEPTH = 64


def parse_json(option: str, text: str | None) -> Any:
    """JSON from an option value; ``@FILE`` reads the file. Refuses (BadInputError, one line
    naming the option) what JSON data cannot hold or torpor cannot record: ``NaN`` and
    ``Infinity``, nesting deeper than :data:`MAX_JSON_DEPTH`, lone surrogates."""
    if text is None:
        return None
    source = text
    if text.startswith("@"):
        try:
            source = Path(text[1:]).read_text()
        except OSError as exc:
            raise BadInputError(f"{option}: cannot read {text[1:]!r}: {exc.strerror}") from None

    def constant(name: str) -> Any:
        raise BadInputError(f"{option}: {name} is not JSON data (use null, a number or a string)")

    try:
        value = json.loads(source, parse_constant=constant)
    except RecursionError:
        raise BadInputError(f"{option} is nested too deeply (at most {MAX_JSON_DEPTH})") from None
    except json.JSONDecodeError as exc:
        shown = text if len(text) <= 60 else text[:57] + "..."
        hint = ""
        word = source.strip()
        if not text.startswith("@") and word and word[0] not in '{["-0123456789':
            # A bare word (``--input world``): the shell took the quotes; JSON needs its own.
            hint = f"; a string must be JSON-quoted: {option} '{json.dumps(word[:40])}'"
        raise BadInputError(
            f"{option} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): "
            f"{shown!r}{hint}"
        ) from None
    _check_json(option, value)
    return value


def _check_json(option: str, value: Any) -> None:
    """Depth and lone surrogates (json.loads accepts ``"\\ud800"``), without recursion."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        v, path, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise BadInputError(f"{option} is nested too deeply (at most {MAX_JSON_DEPTH})")
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise BadInputError(
                    f"{option}: {path} holds a lone surrogate (not a Unicode character)"
                ) from None
        elif isinstance(v, list):
            stack.extend((x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v))
        elif isinstance(v, dict):
            for k, x in v.items():
                stack.append((k, f"{path} (a key)", depth + 1))
                stack.append(
                    (x, f"{path}.{k.encode('utf-8', 'backslashreplace').decode()}", depth + 1)
                )


def _import(modules: Sequence[str]) -> None:
    """Import workflow modules; the working directory is importable like ``python -m``."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    for m in modules:
        try:
            import_modules([m])
        except ImportError as exc:
            raise BadInputError(f"cannot import module {m!r} (--import): {exc}") from None


@contextmanager
def open_client(
    ctx: typer.Context,
    *,
    read_only: bool = False,
    create: bool = False,
    say_store: bool = True,
    check: bool = False,
) -> Iterator[Client]:
    """A Client on the global options' store, closed afterwards. ``read_only`` (commands that
    change nothing): a SQLite store is opened read-only — never created, migrated or written
    (:func:`torpor.store.open_store`); what the open had to say goes to stderr. ``create``:
    this command may create the store (one that schedules runs); any other names a missing
    store (StoreMissingError) instead of creating an empty one. Which store is said on stderr
    at a terminal (unless ``say_store`` is False: ``ls`` says it itself, always). ``check``
    (a command that deletes or rewrites): SQLite's quick check first
    (:func:`torpor.store.open_store`)."""
    settings = options(ctx).settings()
    store = open_store(settings.database_url, read_only=read_only, create=create, check=check)
    if say_store:
        tell_store(settings.database_url)
    note = store.note
    if note:
        console(stderr=True).print(plain(f"warning: {note}", style="yellow"))
    client = Client(store, settings=settings)
    try:
        yield client
    finally:
        client.close()


@contextmanager
def open_runtime(
    ctx: typer.Context, imports: list[str] | None, *, create: bool = False, **kw: Any
) -> Iterator[Runtime]:
    """A Runtime on the global options' store, after importing the workflow modules (global
    ``--import``, ``$TORPOR_IMPORT`` and the command's own); closed afterwards. ``create``
    (``start``): a store that does not exist is created; otherwise it is named
    (StoreMissingError), never silently replaced by an empty one."""
    opts = options(ctx)
    _import([*opts.imports, *(imports or [])])
    on_event = _progress_printer() if sys.stderr.isatty() else None
    settings = opts.settings()
    telemetry.get()  # a bad OTEL_* value stops here, before a store is opened or created
    from ..runtime import Runtime, heartbeat_for  # the engine: only for commands that execute

    if "lease_ttl_s" in kw:  # and a bad lease timing
        heartbeat_for(kw["lease_ttl_s"], kw.get("heartbeat_s"))
    store = open_store(settings.database_url, create=create)
    tell_store(settings.database_url)
    try:
        rt = Runtime(store, settings=settings, on_event=on_event, **kw)
    except BaseException:
        store.close()
        raise
    try:
        yield rt
    finally:
        rt.close()


def _progress_printer() -> Any:
    err = console(stderr=True)

    def show(ev: Event) -> None:
        step = f" {ev.step_id}" if ev.step_id else ""
        err.print(plain(f"  {ev.run_id} #{ev.seq} {ev.type}{step}", style="dim"))

    return show


def resume_command(client: Client, run_id: str) -> str:
    """The command that continues ``run_id``: ``--import`` is needed only when the module that
    defines its workflow was not recorded (a script run as ``python file.py``); a worker for a
    run of a queue or with a start time that has not started (one reopened, say)."""
    try:
        module = client.state(run_id).module
        snap = queue_snapshot(client.store, run_id)
    except TorporError:
        module, snap = "", None
    if snap is not None and (snap.queue is not None or snap.not_before_ms is not None):
        # Not started, and left to workers: under its queue's limits, when due.
        shown = module if module and module != "__main__" else "MODULE"
        return f"torpor worker --import {shown} (or torpor resume {run_id}: now, whatever limits)"
    if module and module != "__main__":
        return f"torpor resume {run_id}"
    return f"torpor resume {run_id} --import MODULE (the module that defines its workflow)"
