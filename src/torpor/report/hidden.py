"""Characters a reviewer cannot see (issue 34, item 5): bidirectional controls and invisible
format characters in content someone is asked to approve.

A text with ``U+202E RIGHT-TO-LEFT OVERRIDE`` or the isolates ``U+2066`` to ``U+2069`` is shown
reordered, and zero-width characters are not shown at all (the "Trojan Source" attack,
CVE-2021-42574): the reviewer would approve bytes that differ from what they read. The console's
approval and artifact pages and ``torpor artifacts`` name every such character and show it
escaped (``U+202E``), never raw. Which characters: every Unicode format character (category
``Cf``: the bidi embeddings, overrides, isolates and marks, zero-width space/joiners, the word
joiner, the BOM, the Arabic letter mark…), the line and paragraph separators, and control
characters other than tab, newline and carriage return.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

__all__ = ["HIDDEN_NOTE", "escape_hidden", "hidden_chars", "is_hidden"]

#: The flag a page or the CLI shows for such content.
HIDDEN_NOTE = "this content contains invisible or bidi characters"

_VISIBLE_CONTROLS = frozenset("\t\n\r")


def is_hidden(ch: str) -> bool:
    """Whether ``ch`` is shown reordered, invisibly or not at all (see the module doc)."""
    if ch in _VISIBLE_CONTROLS:
        return False
    cat = unicodedata.category(ch)
    return cat in ("Cf", "Zl", "Zp", "Cc")


def hidden_chars(text: str) -> list[str]:
    """The distinct hidden characters of ``text`` as ``U+XXXX`` names, in code point order
    (empty for plain text; one fast check when the text is ASCII without controls)."""
    if text.isascii() and text.isprintable():
        return []
    found = {ch for ch in text if is_hidden(ch)}
    return [f"U+{ord(ch):04X}" for ch in sorted(found)]


def escape_hidden(text: str, mark: Callable[[str], str] | None = None) -> str:
    """``text`` with each hidden character replaced by ``mark("U+202E")`` (default ``<U+202E>``:
    visible, and unlike ``\\u202e`` it cannot be mistaken for the six characters a text might
    hold)."""
    if not hidden_chars(text):
        return text
    show = mark or (lambda name: f"<{name}>")
    return "".join(show(f"U+{ord(ch):04X}") if is_hidden(ch) else ch for ch in text)
