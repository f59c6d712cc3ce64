"""Reading the structure of a tool's output (issue 29): what :mod:`.facts` scores a line of
output by, besides its words.

A tool's output states its facts in its *layout* more often than in sentences with cue words:

- a **markdown table row** (``| topic | **choice** | other | reason |``) is one record of the
  table: its cells are read with the header's names when the table has one
  (``topic: …; choice: …``), an emphasised cell (``**x**``) is what its author marked;
- a **setext heading** (a line underlined with ``---`` or ``===``) titles what follows, like
  an ATX ``## heading``;
- a **named value** — ``label -> value``, ``label => value``, ``label: value``,
  ``label = value`` with words on the left and an identifier on the right — says what the
  identifier is, as ``release rel-…`` does in prose;
- a **person's comment** (a string under a ``body``, ``comment``, ``text``, ``content``,
  ``description`` or ``note`` key, camelCase or not: ``bodyText``) is authored prose, not
  machine output;
- **repetition by skeleton**: two lines whose :func:`skeleton` (identifiers, numbers and every
  word masked, punctuation kept) is the same are rows of one template (a stack frame, a log
  line of a daemon, a listing's entry), however their names differ.

Pure; no word of any benchmark's templates is matched here: these are the generic layouts of
markdown, logs, listings and JSON APIs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ROW = re.compile(r"^\s*\|(.+)\|\s*$")
_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$")
_UNDERLINE = re.compile(r"^\s*(?:-{3,}|={3,})\s*$")
_EMPHASIS = re.compile(r"\*\*([^*]+)\*\*|__([^_]+)__")
#: A named value: words on the left of an arrow, ``:``, or ``=``, a value on the right.
_NAMED = re.compile(
    r"^[\s#>*+-]*(?P<label>[A-Za-z][A-Za-z0-9 ._'()/-]{1,60}?)\s*"
    r"(?P<sep>->|=>|\u2192|:|=)\s*(?P<value>\S.*)$"
)
_PROSE_KEY = re.compile(r"(body|comment|comments|text|content|description|note|notes)$")
_SKELETON_WORD = re.compile(r"[A-Za-z0-9_]+(?:[-.:@][A-Za-z0-9_]+)*")
_SYSLOG_HEAD = re.compile(
    r"^(?:[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d[T ][\d:.]+\S*) +\S+ +"
    r"[\w./-]+(?:\[\d+\])?: +"
)


@dataclass(frozen=True, slots=True)
class Row:
    """A markdown table row as one record: ``text`` (``name: cell; …`` with the header's
    names, else the cells joined by ``; ``) and whether a cell was ``emphasised``."""

    text: str
    emphasised: bool


def _cells(line: str) -> list[str]:
    m = _ROW.match(line)
    return [c.strip() for c in m.group(1).split("|")] if m else []


def table_rows(lines: list[str]) -> dict[int, Row]:
    """The markdown table rows among ``lines`` (by index) read as records; header and
    separator lines map to no row (they are not facts), a table's header names its cells."""
    out: dict[int, Row] = {}
    header: list[str] = []
    for i, line in enumerate(lines):
        cells = _cells(line)
        if not cells:
            header = []
            continue
        if _SEPARATOR.match(line):
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if _SEPARATOR.match(nxt) and _ROW.match(line):
            header = cells
            continue
        emph = bool(_EMPHASIS.search(line))
        plain = [_EMPHASIS.sub(lambda m: m.group(1) or m.group(2), c) for c in cells]
        if header and len(header) == len(plain):
            text = "; ".join(f"{h}: {c}" if h else c for h, c in zip(header, plain, strict=True))
        else:
            text = "; ".join(c for c in plain if c)
        out[i] = Row(text, emph)
    return out


def setext_heading(lines: list[str], i: int) -> str:
    """The heading text when ``lines[i]`` is underlined by the next line (``---``, ``===``),
    else ``""``."""
    if i + 1 >= len(lines) or not _UNDERLINE.match(lines[i + 1]):
        return ""
    text = lines[i].strip()
    return text if text and "|" not in text and re.search(r"[A-Za-z]", text) else ""


def is_underline(line: str) -> bool:
    """Whether ``line`` only underlines a setext heading (or rules the page)."""
    return bool(_UNDERLINE.match(line))


def named_value(text: str, ids: list[str]) -> bool:
    """Whether ``text`` names its first identifier: words on the left of ``->``, ``=>``,
    ``:`` or ``=`` and that identifier starting the right side."""
    if not ids:
        return False
    m = _NAMED.match(text)
    if not m or not re.search(r"[A-Za-z]{3}", m.group("label")):
        return False
    if any(i in m.group("label") for i in ids):
        return False  # the left side is itself an identifier (``a.py -> b.so``)
    return m.group("value").lstrip("`'\"(").startswith(ids[0])


def prose_key(key: str) -> bool:
    """Whether a JSON ``key`` holds a person's words (a comment's body, a description)."""
    return bool(_PROSE_KEY.search(key.lower()))


def skeleton(text: str) -> str:
    """``text`` with a syslog or timestamped log header dropped and every word, number and
    identifier (``a-b.c``, ``x:1``) masked as ``a``, whitespace collapsed: rows of one
    template share it however their names differ."""
    body = _SYSLOG_HEAD.sub("", text.strip())
    return " ".join(_SKELETON_WORD.sub("a", body).split())
