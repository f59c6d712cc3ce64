"""``torpor doctor``: what is wrong with a store, found without changing it.

For a SQLite store: whether the file exists, its WAL and shared-memory files, SQLite's own
``PRAGMA integrity_check``, and the schema version — each read through a read-only connection
of its own, so a file too damaged to open as a store is still examined. For every store: each
run's history folded (a run that cannot be folded is named with the reason), and the run
row's status columns compared with what the history says (a hand-edited row, G10).
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from ..errors import TorporError
from ..urls import display_url

#: At most this many problems of SQLite's integrity check are reported.
MAX_INTEGRITY_LINES = 20


@dataclass(frozen=True)
class Finding:
    """One thing the doctor looked at: ``ok`` False is a problem; ``what`` names it (a file, a
    run), ``detail`` says what was found."""

    ok: bool
    what: str
    detail: str


def examine(url: str, *, max_runs: int = 100_000) -> list[Finding]:
    """Everything :mod:`this module <torpor.store.doctor>` checks about the store at ``url``,
    in order; the list ends early when there is no file, or the store cannot be opened."""
    out = [Finding(True, "store", display_url(url))]
    if url.startswith("sqlite:"):
        out += _sqlite_file(url)
        if out[-1].detail == "no such file":
            return out
    from . import open_store

    try:
        store = open_store(url, read_only=True)
    except TorporError as exc:
        return [*out, Finding(False, "open", str(exc))]
    try:
        with store.driver.read() as cur:
            row = store.driver.fetchone(cur, "SELECT max(version) FROM torpor_schema", {})
        out.append(Finding(True, "schema version", str(row[0] if row else None)))
        damaged = store.damaged_runs(limit=max_runs)  # text in a number column (SQLite)
        for run_id, damage in damaged:
            column, _, value = damage.partition("=")
            out.append(
                Finding(False, f"run {run_id}", f"column {column} holds {value}, not a number")
            )
        if damaged:
            return [
                *out,
                Finding(
                    False,
                    "runs",
                    f"{len(damaged)} damaged run rows: set them right (or delete those runs) "
                    "and run doctor again to check the other runs",
                ),
            ]
        runs = store.list_runs(limit=max_runs)
        bad = 0
        for rec in runs:
            try:
                state = store.load(rec.run_id)
            except TorporError as exc:
                bad += 1
                out.append(Finding(False, f"run {rec.run_id}", f"cannot be folded: {exc}"))
                continue
            why = store.checkpoint_problem(rec.run_id)
            if why:
                bad += 1
                out.append(
                    Finding(False, f"run {rec.run_id}", f"{why}; its state is folded from history")
                )
            told = (rec.status, rec.outcome)
            found = (state.status.value, state.outcome.value if state.outcome else None)
            if told != found:
                bad += 1
                out.append(
                    Finding(
                        False,
                        f"run {rec.run_id}",
                        f"the run row says {_st(told)} but its history says {_st(found)} "
                        "(the row was edited or is stale; the history is the authority)",
                    )
                )
        out.append(Finding(bad == 0, "runs", f"{len(runs)} read, {bad} with problems"))
    except TorporError as exc:
        out.append(Finding(False, "runs", str(exc)))
    finally:
        store.close()
    return out


def _st(pair: tuple[str, str | None]) -> str:
    return pair[0] + (f"/{pair[1]}" if pair[1] else "")


def _sqlite_file(url: str) -> list[Finding]:
    from .sqlite import path_of

    path = Path(path_of(url))
    if not path.is_file():
        return [Finding(False, str(path), "no such file")]
    out = [Finding(True, str(path), f"{path.stat().st_size:,} bytes")]
    for suffix, meaning in (("-wal", "write-ahead log"), ("-shm", "WAL index")):
        side = Path(f"{path}{suffix}")
        text = f"{side.stat().st_size:,} bytes" if side.exists() else "absent"
        out.append(Finding(True, f"{meaning} {side.name}", text))
    mode = "ro" if os.access(path.parent, os.W_OK | os.X_OK) else "immutable=1"
    mode = "mode=ro" if mode == "ro" else mode
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True)
        try:
            rows = conn.execute(f"PRAGMA integrity_check({MAX_INTEGRITY_LINES})").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return [*out, Finding(False, "integrity check", f"cannot be run: {_printable(exc)}")]
    problems = [_printable(r[0]) for r in rows if r[0] != "ok"]
    if problems:
        out.append(Finding(False, "integrity check", "; ".join(problems)))
    else:
        out.append(Finding(True, "integrity check", "ok"))
    return out


def _printable(value: object) -> str:
    text = "; ".join(str(value).split(" with text ", 1)[0].splitlines())
    return "".join(ch if ch.isprintable() and ch.isascii() else "?" for ch in text)
