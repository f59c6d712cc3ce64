"""A deterministic cpio "newc" archive writer (the initramfs format the Linux kernel unpacks:
``Documentation/driver-api/early-userspace/buffer-format.rst``), so building the initramfs
needs no ``cpio`` binary and gives the same bytes on every build: entries sorted by path, every
mtime 0, owner root, inode numbers in path order."""

from __future__ import annotations

import gzip
from dataclasses import dataclass

_DIR, _FILE, _LINK = 0o040000, 0o100000, 0o120000


@dataclass(frozen=True)
class Entry:
    """One archive member: ``path`` without a leading slash, ``mode`` permission bits,
    ``data`` the file's bytes (a symlink's target for a link)."""

    path: str
    kind: int
    mode: int = 0o755
    data: bytes = b""


def directory(path: str, mode: int = 0o755) -> Entry:
    return Entry(path, _DIR, mode)


def file(path: str, data: bytes, mode: int = 0o644) -> Entry:
    return Entry(path, _FILE, mode, data)


def symlink(path: str, target: str) -> Entry:
    return Entry(path, _LINK, 0o777, target.encode())


def _pad(n: int) -> bytes:
    return b"\0" * (-n % 4)


def _member(ino: int, name: str, mode: int, data: bytes) -> bytes:
    raw = name.encode() + b"\0"
    fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(raw), 0)
    head = b"070701" + b"".join(b"%08X" % f for f in fields)
    return head + raw + _pad(len(head) + len(raw)) + data + _pad(len(data))


def newc(entries: list[Entry]) -> bytes:
    """The uncompressed archive of ``entries`` (sorted by path; parents must be listed)."""
    out = []
    for ino, e in enumerate(sorted(entries, key=lambda e: e.path), start=1):
        out.append(_member(ino, e.path, e.kind | e.mode, e.data))
    out.append(_member(0, "TRAILER!!!", 0, b""))
    return b"".join(out)


def gzipped(entries: list[Entry]) -> bytes:
    """:func:`newc` compressed with gzip, mtime 0 (reproducible)."""
    return gzip.compress(newc(entries), compresslevel=6, mtime=0)
