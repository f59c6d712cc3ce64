"""What a SQLite store's failures become. A store found damaged stays refused by writers: a
marker file beside the database.

When any torpor process — a reader (``ls``, ``show``, ``doctor``), a worker's scan, a writer —
meets SQLite saying the file is not a sound database (``SQLITE_CORRUPT``, ``SQLITE_NOTADB``),
it writes ``<database>-damaged`` next to it (like SQLite's own ``-wal`` and ``-shm``): one line
of what was found, where and when. The marker is outside the damaged file, so it survives the
damage. Every later open for writing (``start``, ``signal``, ``resume``, ``worker``, ``gc`` …)
refuses while it is there (:class:`~torpor.errors.DamagedStoreError`) — without a full-file
check per command. Commands that delete or rewrite (``gc``, ``retention``, ``archive restore``,
``gc --vacuum``) also run SQLite's ``PRAGMA quick_check`` first (:func:`quick_check`) and refuse
on any finding, marking the store.

The marker goes once the file is sound again: ``torpor doctor --clear-damaged`` runs the full
``PRAGMA integrity_check`` and removes it only when that finds nothing (after restoring a copy,
say). PostgreSQL checks its own pages; a damaged row there is refused by the run it belongs to
(:class:`~torpor.errors.CorruptRecordError`), so there is no marker.

Also here: the one-line errors of a store that is missing (:func:`missing`: nothing is
created) and of SQLite errors that are not damage (:func:`io_error`: a read-only folder, a full
disk), instead of a raw ``sqlite3.OperationalError``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path

from ..errors import DamagedStoreError, StoreError, StoreMissingError

#: The marker's name is the database's with this suffix.
SUFFIX = "-damaged"
#: At most this many problems of a check are reported.
MAX_PROBLEMS = 20


def marker_path(db_path: str) -> Path:
    """Where the marker of the database at ``db_path`` lives."""
    return Path(f"{db_path}{SUFFIX}")


def read_mark(db_path: str) -> str | None:
    """What the marker says (one line), or None when the store was never found damaged."""
    try:
        return marker_path(db_path).read_text(errors="replace").strip() or "damaged"
    except FileNotFoundError:
        return None
    except OSError as exc:  # unreadable: still a marker
        return f"a damage marker that cannot be read ({exc.strerror})"


def mark(db_path: str, reason: str) -> None:
    """Record that the database at ``db_path`` was found damaged (kept if it exists: the first
    finding is the one that counts). Best effort: a folder that cannot be written (a read-only
    copy) gets no marker, and nothing can be written there anyway."""
    if db_path == ":memory:" or marker_path(db_path).exists():
        return
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    line = f"{reason} (found {when} by pid {os.getpid()})\n"
    target = marker_path(db_path)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    with contextlib.suppress(OSError):
        tmp.write_text(line)
        os.replace(tmp, target)
    with contextlib.suppress(OSError):
        tmp.unlink()


def clear(db_path: str) -> bool:
    """Remove the marker; whether there was one."""
    try:
        marker_path(db_path).unlink()
    except FileNotFoundError:
        return False
    return True


def refusal(db_path: str, why: str) -> DamagedStoreError:
    """The error a writer raises for a marked store: what was found and what to do."""
    url = f"sqlite:///{db_path}"
    return DamagedStoreError(
        f"sqlite database {db_path} was found damaged: {why}; nothing is written to it: "
        f"run torpor doctor (torpor --db {url} doctor: it says how to restore a copy or "
        f"recover what can be read, and --clear-damaged once the file is sound)"
    )


def problems(db_path: str, pragma: str = "quick_check") -> list[str]:
    """What SQLite's ``PRAGMA quick_check`` (or ``integrity_check``) finds in the file, read
    through a read-only connection of its own (empty: nothing found). A file SQLite cannot read
    at all is one problem."""
    folder_writable = os.access(Path(db_path).parent, os.W_OK | os.X_OK)
    query = "mode=ro" if folder_writable else "immutable=1"
    try:
        conn = sqlite3.connect(f"{Path(db_path).resolve().as_uri()}?{query}", uri=True)
        try:
            rows = conn.execute(f"PRAGMA {pragma}({MAX_PROBLEMS})").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return [f"cannot be checked: {printable(exc)}"]
    return [printable(r[0]) for r in rows if r[0] != "ok"]


def quick_check(db_path: str) -> None:
    """Before a command deletes or rewrites: SQLite's quick check of the whole file; on any
    finding the store is marked and DamagedStoreError raised (nothing was changed)."""
    if db_path == ":memory:":
        return
    found = problems(db_path)
    if found:
        why = "PRAGMA quick_check: " + "; ".join(found)
        mark(db_path, why)
        raise refusal(db_path, why)


def printable(value: object) -> str:
    """SQLite's message without the undecodable bytes it may quote (terminal sequences)."""
    text = "; ".join(str(value).split(" with text ", 1)[0].splitlines())
    return "".join(ch if ch.isprintable() and ch.isascii() else "?" for ch in text)


def missing(path: str) -> StoreMissingError:
    """No store at ``path``: nothing is created, the path named (a relative one resolved)."""
    shown = path if Path(path).is_absolute() else f"{path} (in {os.getcwd()})"
    return StoreMissingError(
        f"no torpor store at {shown}; nothing was created: only `torpor start` or `torpor init` "
        "creates a store. Check --db, TORPOR_DATABASE_URL or TORPOR_HOME (default ./.torpor, "
        "relative to the current folder)"
    )


def io_error(path: str, exc: BaseException) -> BaseException:
    """A SQLite error that is not damage, as the one-line StoreError to raise: a read-only
    file or folder, a full disk, a file that cannot be opened (anything else as itself)."""
    if not isinstance(exc, sqlite3.OperationalError | sqlite3.DatabaseError) or isinstance(
        exc, sqlite3.IntegrityError
    ):
        return exc
    text = str(exc)
    low = text.lower()
    if "readonly" in low or "read-only" in low:
        hint = "the file or its folder is read-only (the folder must be writable for the WAL)"
    elif "disk is full" in low or "disk i/o" in low:
        hint = "the disk is full or failing; nothing of this write was recorded"
    elif "unable to open" in low:
        hint = "the file or its folder cannot be opened (permissions, a missing folder)"
    else:
        return StoreError(f"sqlite {path}: {text}")
    return StoreError(f"sqlite database {path}: {text}: {hint}")


__all__ = [
    "SUFFIX",
    "clear",
    "io_error",
    "mark",
    "marker_path",
    "missing",
    "problems",
    "quick_check",
    "read_mark",
]
