"""How the ``torpor`` command prints: Rich consoles and tables, times, JSON.

Pure rendering: nothing here opens a store or knows a command. Recorded values are printed as
plain text (:func:`add_row`, :func:`fields`), never as Rich markup.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text


def console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr) that prints recorded text as is."""
    stream = sys.stderr if stderr else sys.stdout
    # Not a terminal (a pipe, a log, a test): do not wrap tables at 80 columns.
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 240
    return Console(file=stream, highlight=False, width=width, soft_wrap=False)


def json_default(o: Any) -> Any:
    """``json.dumps`` fallback: pydantic models, dataclasses, else ``str``."""
    if isinstance(o, BaseModel):
        return o.model_dump(mode="json")
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    return str(o)


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout (the ``--json`` output)."""
    sys.stdout.write(json.dumps(data, indent=2, default=json_default, ensure_ascii=False) + "\n")


def when(ms: int | None) -> str:
    """Epoch milliseconds as local time."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def relative(ms: int | None) -> str:
    """Epoch milliseconds as local time with a relative hint (``in 4m``, ``3s ago``)."""
    if ms is None:
        return "-"
    delta = (ms - datetime.now().timestamp() * 1000) / 1000
    span = abs(delta)
    if span < 60:
        rel = f"{span:.0f}s"
    elif span < 3600:
        rel = f"{span / 60:.0f}m"
    elif span < 86400:
        rel = f"{span / 3600:.1f}h"
    else:
        rel = f"{span / 86400:.1f}d"
    return f"{when(ms)} ({'in ' + rel if delta >= 0 else rel + ' ago'})"


def short(value: Any, limit: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=json_default)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def new_table(*columns: str, title: str | None = None) -> Table:
    table = Table(
        *columns,
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
    )
    return table


def add_row(table: Table, *cells: Any) -> None:
    """Add a row of plain text (no Rich markup is interpreted in recorded values)."""
    table.add_row(*(Text("-" if c is None or c == "" else str(c)) for c in cells))


def fields(out: Console, pairs: Sequence[tuple[str, Any]]) -> None:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for k, v in pairs:
        grid.add_row(Text(k), Text("-" if v is None or v == "" else str(v)))
    out.print(grid)


def heading(out: Console, text: str) -> None:
    out.print()
    out.print(Text(text, style="bold underline"))
