"""Decoding a tool's buffered result for fact extraction (:mod:`.facts`): its JSON text as
the value it is (never searched as escaped text), and every scalar of a value as
``(key, text)``. Pure."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any


def decode_result(text: str) -> Any:
    """A buffered result's JSON text as its value; a clipped one (not valid JSON any more) as
    its decoded string literals joined by line breaks (never the escaped text)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    out: list[str] = []
    for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', text):
        try:
            out.append(json.loads(f'"{m.group(1)}"'))
        except ValueError:
            out.append(m.group(1))
    return "\n".join(out) if out else text


def leaves(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """``(key, text)`` for every scalar of a JSON value (a string holding JSON is decoded and
    walked in turn; a number or boolean becomes ``key: value``)."""
    if isinstance(value, dict):
        if 1 < len(value) <= 12 and all(_short(v) for v in value.values()):
            # A record (an event, a row): one segment, so what it says stays together.
            yield key, "; ".join(f"{k}: {_scalar(value[k])}" for k in value)
            return
        for k in value:
            yield from leaves(value[k], str(k))
    elif isinstance(value, list | tuple):
        for x in value:
            yield from leaves(x, key)
    elif isinstance(value, str):
        s = value.strip()
        if len(s) > 1 and s[0] in "[{" and s[-1] in "]}":
            try:
                inner = json.loads(s)
            except ValueError:
                inner = None
            if isinstance(inner, dict | list):
                yield from leaves(inner, key)
                return
        # A short value says what it is by its key ("release: rel-…"); a long one is a text.
        yield key, f"{key}: {value}" if key and len(value) < 80 and "\n" not in value else value
    elif value is not None and not isinstance(value, bool):
        if key:
            yield key, f"{key}: {value}"
    elif isinstance(value, bool) and key:
        yield key, f"{key}: {str(value).lower()}"


def _short(v: Any) -> bool:
    return (
        v is None
        or isinstance(v, bool | int | float)
        or (isinstance(v, str) and len(v) < 80 and "\n" not in v)
    )


def _scalar(v: Any) -> str:
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
