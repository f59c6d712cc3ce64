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
from typing import Any

import typer
from rich.text import Text

from ..client import Client
from ..errors import BadInputError, TorporError
from ..history import Event
from ..runtime import Runtime
from ..store import open_store
from ..workflows import import_modules
from .render import console
from .root import options


def parse_json(option: str, text: str | None) -> Any:
    """JSON from an option value; ``@FILE`` reads the file."""
    if text is None:
        return None
    source = text
    if text.startswith("@"):
        try:
            source = Path(text[1:]).read_text()
        except OSError as exc:
            raise BadInputError(f"{option}: cannot read {text[1:]!r}: {exc.strerror}") from None
    try:
        return json.loads(source)
    except json.JSONDecodeError as exc:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise BadInputError(
            f"{option} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): "
            f"{shown!r}"
        ) from None


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
def open_client(ctx: typer.Context, *, read_only: bool = False) -> Iterator[Client]:
    """A Client on the global options' store, closed afterwards. ``read_only`` (commands that
    change nothing): a SQLite store is opened read-only — never created, migrated or written
    (:func:`torpor.store.open_store`); what the open had to say goes to stderr."""
    settings = options(ctx).settings()
    if read_only:
        store = open_store(settings.database_url, read_only=True)
        note = getattr(store.driver, "note", None)
        if note:
            console(stderr=True).print(Text(f"warning: {note}", style="yellow"))
        client = Client(store, settings=settings)
    else:
        client = Client(settings=settings)
    try:
        yield client
    finally:
        client.close()


@contextmanager
def open_runtime(ctx: typer.Context, imports: list[str] | None, **kw: Any) -> Iterator[Runtime]:
    """A Runtime on the global options' store, after importing the workflow modules (global
    ``--import``, ``$TORPOR_IMPORT`` and the command's own); closed afterwards."""
    opts = options(ctx)
    _import([*opts.imports, *(imports or [])])
    on_event = _progress_printer() if sys.stderr.isatty() else None
    rt = Runtime(settings=opts.settings(), on_event=on_event, **kw)
    try:
        yield rt
    finally:
        rt.close()


def _progress_printer() -> Any:
    err = console(stderr=True)

    def show(ev: Event) -> None:
        step = f" {ev.step_id}" if ev.step_id else ""
        err.print(Text(f"  {ev.run_id} #{ev.seq} {ev.type}{step}", style="dim"))

    return show


def resume_command(client: Client, run_id: str) -> str:
    """The command that continues ``run_id``: ``--import`` is needed only when the module that
    defines its workflow was not recorded (a script run as ``python file.py``)."""
    try:
        module = client.state(run_id).module
    except TorporError:
        module = ""
    if module and module != "__main__":
        return f"torpor resume {run_id}"
    return f"torpor resume {run_id} --import MODULE (the module that defines its workflow)"
