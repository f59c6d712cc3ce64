"""What a reader of a stream gets (pure data, no I/O): :class:`StreamItem`, one per stored
item, and :func:`fold`, the items made into the :class:`Part` s a person reads.

A stream is an ordered list of items, offset 1, 2, … (dense). An item is one of:

- ``data`` — a delta: text (a model's reply as it is written) or JSON data (a workflow's
  progress object). ``part`` names what wrote it: ``""`` for the workflow itself, else the
  step attempt that streamed it (``model#2@7``: the step ``model#2`` under lease epoch 7);
- ``end`` — that part is complete (a model call's full text is also in its recorded result);
- ``retract`` — that part was abandoned (its process died mid-stream, or the call raised) and
  will not be completed: a reader drops what it showed of it. The step is retried as a
  whole, under a new part, whose items all come after the ``retract`` — never interleaved.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..store.stream_rows import StreamRow

__all__ = ["Part", "StreamItem", "fold", "item_of"]


@dataclass(frozen=True)
class StreamItem:
    """One item: ``offset`` (its place, from 1), ``kind`` (``data``, ``end``, ``retract``),
    ``part``, ``data`` (a text delta, JSON data, or for ``retract`` the reason), ``at_ms``
    (when its batch was written, epoch milliseconds)."""

    offset: int
    kind: str
    part: str
    data: Any
    at_ms: int

    @property
    def text(self) -> str:
        """The delta as text: a string as it is, other data as compact JSON ('' for an
        ``end`` or ``retract``)."""
        if self.kind != "data":
            return ""
        return self.data if isinstance(self.data, str) else json.dumps(self.data)

    def to_json(self) -> dict[str, Any]:
        """The item as JSON data (what the console's server-sent events carry)."""
        return {
            "offset": self.offset,
            "kind": self.kind,
            "part": self.part,
            "data": self.data,
            "at_ms": self.at_ms,
        }


def item_of(row: StreamRow) -> StreamItem:
    """The item of a stored row."""
    return StreamItem(row.offset, row.kind, row.part, json.loads(row.data), row.at_ms)


@dataclass
class Part:
    """What one writer (a step attempt, or the workflow) wrote, as a person reads it: its
    ``text`` so far, ``state`` (``open``, ``ended``, ``retracted``; the workflow's own part is
    always ``open``), the ``reason`` of a retraction, and its ``items``."""

    part: str
    state: str = "open"
    reason: str = ""
    items: list[StreamItem] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(i.text for i in self.items)


def fold(items: list[StreamItem]) -> list[Part]:
    """The parts of ``items`` (in offset order), in the order each began."""
    parts: dict[str, Part] = {}
    for it in items:
        p = parts.get(it.part)
        if p is None:
            p = parts[it.part] = Part(it.part)
        if it.kind == "data":
            p.items.append(it)
        elif it.kind == "end":
            p.state = "ended"
        elif it.kind == "retract":
            p.state, p.reason = "retracted", str(it.data or "")
    return list(parts.values())


def shown(items: list[StreamItem]) -> str:
    """The text a reader shows after ``items``: every part's text but the retracted ones."""
    return "".join(p.text for p in fold(items) if p.state != "retracted")
