"""Content-addressed chunks: how a large JSON value is stored once however often it is recorded.

A value recorded again and again with small changes — a checkpoint state holding a large static
context and a growing message list, written at every step — would cost its whole size at every
record. Instead, a stored text (an event payload, the engine checkpoint) whose JSON is at least
:data:`CHUNK_MIN_BYTES` is split *structurally* (a Merkle tree) before it is written:

- a sub-value (a string, a dict, a list) of at least :data:`PART_MIN_BYTES` is replaced by a
  reference to a chunk holding its JSON, ``{"$torpor": "chunk", "h": sha256}``, the sub-values
  of that chunk split in turn;
- a long list is cut into pages at *content-defined* boundaries (an item ends a page when its
  own hash says so, with a probability proportional to its size: pages of
  :data:`PAGE_BYTES` on average, like the leaves of a prolly tree) and stored as
  ``{"$torpor": "pages", "p": [sha256, ...]}``: appending to a list rewrites only its last page.
  When the page hashes themselves pass :data:`INDEX_BYTES`, they are paged the same way (an
  index level whose pages are pages nodes), and so on: appending rewrites one page per level.

Chunks are named by the sha256 of their UTF-8 text, so an unchanged sub-value is the same chunk
every time and is written once (the store inserts with ``ON CONFLICT``). A split text is stored
with the prefix :data:`SPLIT_PREFIX`, and only such texts are resolved: inside them a user's dict
that looks like a reference is wrapped as ``{"$torpor": "esc", "v": ...}``, so nothing a workflow
records is ever read as a reference.

Pure functions: :func:`split_text` collects the chunks it makes in a dict the caller writes;
:func:`join` takes a ``fetch(hash) -> text`` that reads (and hash-checks) them. The sizes were
chosen with ``bench/storage.py`` (see ``bench/README.md``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from .. import serde

#: A stored text at least this large (UTF-8 bytes) is split into chunks.
CHUNK_MIN_BYTES = 16 * 1024
#: Inside a split value, a sub-value at least this large becomes a chunk of its own.
PART_MIN_BYTES = 1024
#: The average size of a page of a long list (content-defined boundaries).
PAGE_BYTES = 512
#: A list of more pages than fit in this many bytes gets an index level (pages of page hashes).
INDEX_BYTES = 512
#: A stored text that holds references starts with this (JSON never does).
SPLIT_PREFIX = "~"

_TAG = serde.TAG
_OURS = frozenset({"chunk", "pages", "esc"})

#: ``hash -> chunk text``: the chunks a split made, to be written before the text that refers
#: to them.
Sink = dict[str, str]
#: ``hash -> chunk text`` (hash-checked), raising CorruptRecordError for a missing chunk.
Fetch = Callable[[str], str]


def _key(k: str) -> str:
    return json.dumps(k, ensure_ascii=False)


def _put(text: str, sink: Sink) -> str:
    h = serde.sha256_hex(text)
    sink[h] = text
    return h


def _ref(h: str) -> tuple[Any, str]:
    return {_TAG: "chunk", "h": h}, f'{{"{_TAG}":"chunk","h":"{h}"}}'


def _size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


def _split(v: Any, sink: Sink, part: bool) -> tuple[Any, str]:
    """``(replacement, its canonical JSON text)``; chunks go to ``sink``. ``part``: whether
    ``v`` may itself become a chunk (the root of a stored text never does)."""
    t = type(v)
    if t is dict:
        tag = v.get(_TAG)
        esc = isinstance(tag, str) and tag in _OURS and v.keys() <= {_TAG, "h", "p", "v"}
        items = []
        out: dict[str, Any] = {}
        for k in sorted(v):
            sub, text = _split(v[k], sink, True)
            out[k] = sub
            items.append(f"{_key(k)}:{text}")
        body = "{" + ",".join(items) + "}"
        if esc:  # a value that looks like one of ours: never read as a reference
            out, body = {_TAG: "esc", "v": out}, f'{{"{_TAG}":"esc","v":{body}}}'
        if part and _size(body) >= PART_MIN_BYTES:
            return _ref(_put(body, sink))
        return out, body
    if t is list:
        parts = [_split(x, sink, True) for x in v]
        body = "[" + ",".join(text for _, text in parts) + "]"
        if not part or _size(body) < PART_MIN_BYTES:
            return [x for x, _ in parts], body
        if _size(body) < PAGE_BYTES:
            return _ref(_put(body, sink))
        hashes = _pages([text for _, text in parts], sink, PAGE_BYTES)
        node = {_TAG: "pages", "p": hashes}
        text = serde.dumps(node)
        while _size(text) > INDEX_BYTES and len(hashes) > 1:  # index levels (a prolly tree)
            groups = _pages([f'"{h}"' for h in hashes], sink, INDEX_BYTES, index=True)
            node = {_TAG: "pages", "p": groups}
            hashes, text = groups, serde.dumps(node)
        return node, text
    text = serde.dumps(v)
    if part and t is str and _size(text) >= PART_MIN_BYTES:
        return _ref(_put(text, sink))
    return v, text


def _pages(texts: list[str], sink: Sink, target: int, *, index: bool = False) -> list[str]:
    """Cut the items' ``texts`` into pages at content-defined boundaries (an item ends a page
    with a probability proportional to its size, so pages are ``target`` bytes on average, never
    under a quarter of it — so each index level is smaller than the one below, whatever the
    items — and never beyond four times it); return the pages' hashes. ``index``: the items
    are hashes of pages, and each page is itself a pages node."""
    out: list[str] = []
    page: list[str] = []
    page_bytes = 0

    def cut() -> None:
        body = "[" + ",".join(page) + "]"
        if index:
            body = f'{{"{_TAG}":"pages","p":{body}}}'
        out.append(_put(body, sink))

    for text in texts:
        page.append(text)
        n = _size(text) + 1
        page_bytes += n
        h = int(serde.sha256_hex(text)[:8], 16)
        if (h < (1 << 32) * n / target and page_bytes >= target // 4) or page_bytes >= 4 * target:
            cut()
            page, page_bytes = [], 0
    if page:
        cut()
    return out


def split_text(text: str, sink: Sink) -> str:
    """The text to store for the JSON ``text`` (a canonical :func:`torpor.serde.dumps`): itself
    when smaller than :data:`CHUNK_MIN_BYTES`, else :data:`SPLIT_PREFIX` + the JSON of the value
    with its large parts replaced by references to the chunks added to ``sink``."""
    if _size(text) < CHUNK_MIN_BYTES:
        return text
    _, body = _split(serde.loads(text), sink, False)
    return SPLIT_PREFIX + body


def is_split(text: Any) -> bool:
    """Whether a stored text holds references (see :func:`split_text`)."""
    return isinstance(text, str) and text.startswith(SPLIT_PREFIX)


def join(text: str, fetch: Fetch) -> Any:
    """The JSON value a stored text stands for (parsed): its references resolved through
    ``fetch``. A text that was not split is parsed as is. ValueError for bad JSON.

    When ``fetch`` has a ``prefetch(hashes) -> {hash: text}`` (a store reading several chunks
    in one query), the tree is read level by level first: a round trip per level of the tree,
    not one per chunk."""
    if not is_split(text):
        return serde.loads(text)
    prefetch = getattr(fetch, "prefetch", None)
    if prefetch is not None:
        seen: set[str] = set()
        todo = _ref_hashes(text)
        while todo:
            seen |= todo
            got = prefetch(todo)
            todo = {h for t in got.values() for h in _ref_hashes(t)} - seen
    return _join(serde.loads(text[len(SPLIT_PREFIX) :]), fetch, {})


_CHUNK_RE = re.compile(r'"\$torpor":"chunk","h":"([0-9a-f]{64})"')
_PAGES_RE = re.compile(r'"\$torpor":"pages","p":\[([^\]]*)\]')


def _ref_hashes(text: str) -> set[str]:
    """The hashes a chunk's or a stored text's JSON refers to, found in the text (a superset:
    an escaped user value that looks like a reference is found too; prefetching it is
    harmless)."""
    if '"$torpor"' not in text:
        return set()
    found = set(_CHUNK_RE.findall(text))
    for body in _PAGES_RE.findall(text):
        found.update(h.strip('"') for h in body.split(",") if h)
    return found


def _join(v: Any, fetch: Fetch, memo: dict[str, Any]) -> Any:
    t = type(v)
    if t is list:
        return [_join(x, fetch, memo) for x in v]
    if t is not dict:
        return v
    tag = v.get(_TAG)
    if isinstance(tag, str) and tag in _OURS:
        if tag == "chunk" and v.keys() == {_TAG, "h"}:
            return _chunk(v["h"], fetch, memo)
        if tag == "pages" and v.keys() == {_TAG, "p"}:
            out: list[Any] = []
            for h in v["p"]:
                out.extend(_chunk(h, fetch, memo))
            return out
        if tag == "esc" and v.keys() == {_TAG, "v"}:
            return {k: _join(x, fetch, memo) for k, x in v["v"].items()}
    return {k: _join(x, fetch, memo) for k, x in v.items()}


def _chunk(h: Any, fetch: Fetch, memo: dict[str, Any]) -> Any:
    if not isinstance(h, str):
        raise ValueError(f"a chunk reference is not a hash: {h!r}")
    if h not in memo:
        memo[h] = value = _join(serde.loads(fetch(h)), fetch, memo)
        return value
    # A chunk used twice in one value: the second place gets its own copy.
    value = memo[h]
    return json.loads(json.dumps(value)) if isinstance(value, dict | list) else value


__all__ = [
    "CHUNK_MIN_BYTES",
    "PAGE_BYTES",
    "PART_MIN_BYTES",
    "SPLIT_PREFIX",
    "Fetch",
    "Sink",
    "is_split",
    "join",
    "split_text",
]
