"""``torpor doctor``: examine the store (see :mod:`torpor.store.doctor`); changes nothing."""

from __future__ import annotations

import dataclasses

import typer
from rich.text import Text

from ..store.doctor import examine
from .render import console, emit_json, plain
from .root import JsonFlag, options


def doctor(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """Examine the store without changing it: SQLite's integrity check, the WAL and its
    index, the schema version, runs whose history cannot be folded, and run rows whose status
    disagrees with their history. Exit 1 when anything is wrong.

    Example: torpor --db sqlite:///.torpor/torpor.db doctor
    """
    findings = examine(options(ctx).settings().database_url)
    if json_out:
        emit_json([dataclasses.asdict(f) for f in findings])
    else:
        out = console()
        for f in findings:
            mark = plain("ok     ", style="green") if f.ok else plain("PROBLEM", style="bold red")
            # One finding a line, never wrapped (grep-able).
            line = Text.assemble(mark, " ", plain(f.what), ": ", plain(f.detail))
            out.print(line, soft_wrap=True)
    if not all(f.ok for f in findings):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``doctor`` to ``app``."""
    app.command()(doctor)
