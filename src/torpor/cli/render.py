"""How the ``torpor`` command prints: Rich consoles and tables, times, JSON.

Pure rendering: nothing here opens a store or knows a command. Recorded values are printed as
plain text (:func:`add_row`, :func:`fields`, :func:`plain`), never as Rich markup, and with
terminal control sequences neutralised (:func:`safe_text`): a name anyone could record — a run
id, a step id, an artifact, an approver, a signal — cannot move the cursor, recolour or hide
what follows.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO, cast

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import scrub
from ..report.text import local_time as when

#: Every line the CLI prints (through :func:`safe_text`, :func:`emit_json` and the one-line
#: error): no secret this process knows, in any encoding (G12).
CLI = scrub.sink("cli", "every line the torpor command prints: torpor.cli.render")


class _LineEnds:
    """A text stream that drops the spaces a Rich table pads its last column with at the end
    of each line: piped output (a file, ``grep``) has no trailing blanks up to the width."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.partial = ""

    def write(self, text: str) -> int:
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()
        if lines:
            self.stream.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self.partial:  # (printed with end="": its spaces may be meant; kept)
            self.stream.write(self.partial)
            self.partial = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # (Rich picks box characters the stream can encode by it)
        return getattr(self.stream, "encoding", None) or "utf-8"

    def fileno(self) -> int:
        return self.stream.fileno()


def console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr) that prints recorded text as is."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(file=stream, highlight=False, soft_wrap=False)
    # Not a terminal (a pipe, a log, a test): do not wrap tables at 80 columns (unless COLUMNS
    # says so), and do not pad lines with blanks to that width either.
    width = None if os.environ.get("COLUMNS") else 240
    return Console(
        file=cast(TextIO, _LineEnds(stream)), highlight=False, width=width, soft_wrap=False
    )


def safe_text(value: Any) -> str:
    """``value`` as text safe to print on a terminal: control characters (C0 but newline and
    tab, DEL, C1), invisible format characters (bidirectional overrides), line separators and
    lone surrogates are shown as escapes (``\\x1b``, ``\\u202e``, ``\\ud800``)."""
    s = CLI.text(str(value))
    if s.isprintable():
        return s
    return "".join(
        ch if ch.isprintable() or ch in "\n\t" else ch.encode("unicode_escape").decode("ascii")
        for ch in s
    )


def plain(value: Any, style: str = "", **kw: Any) -> Text:
    """A Rich ``Text`` of :func:`safe_text` of ``value``: printed as is, no markup interpreted.
    Every line the CLI prints goes through it (or :func:`add_row` / :func:`fields`)."""
    return Text(safe_text(value), style=style, **kw)


def json_default(o: Any) -> Any:
    """``json.dumps`` fallback: pydantic models, dataclasses, else ``str``."""
    pyd = sys.modules.get("pydantic")  # not imported: no value here is one of its models
    if pyd is not None and isinstance(o, pyd.BaseModel):
        return o.model_dump(mode="json")
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    return str(o)


#: What JSON output escapes beyond what ``json.dumps`` does (it escapes C0 controls only):
#: DEL and C1 controls, bidirectional and invisible format characters, line separators, lone
#: surrogates — still valid JSON (``\\u009b``), never a terminal sequence.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ud800-\udfff]")


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout (the ``--json`` output)."""
    text = CLI.text(json.dumps(data, indent=2, default=json_default, ensure_ascii=False))
    sys.stdout.write(_JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n")


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
    table.add_row(*(plain("-" if c is None or c == "" else c) for c in cells))


def fields(out: Console, pairs: Sequence[tuple[str, Any]]) -> None:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for k, v in pairs:
        grid.add_row(plain(k), plain("-" if v is None or v == "" else v))
    out.print(grid)


def heading(out: Console, text: str) -> None:
    out.print()
    out.print(plain(text, style="bold underline"))
