"""``torpor doctor``: examine the store (see :mod:`torpor.store.doctor`); changes nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer
from rich.text import Text

from ..engine.highwater import WHAT_NOW, audit
from ..errors import TorporError
from ..queues import damaged_rows
from ..schedules import schedule_problems
from ..store import open_store
from ..store.doctor import Finding, examine
from .render import console, emit_json, plain
from .root import JsonFlag, options


def doctor(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """Examine the store without changing it: SQLite's integrity check, the WAL and its
    index, the schema version, runs whose history cannot be folded, run rows whose status
    disagrees with their history, damaged queue and schedule rows (and queue columns of runs),
    and schedules that cannot fire. Exit 1 when anything is wrong.

    Example: torpor --db sqlite:///.torpor/torpor.db doctor
    """
    url = options(ctx).settings().database_url
    findings = examine(url)
    if all(f.what != "open" for f in findings) and findings[-1].detail != "no such file":
        findings += _dispatch(url)
        findings += _high_water(url, options(ctx).settings().config_dir())
    if json_out:
        emit_json([dataclasses.asdict(f) for f in findings])
    else:
        out = console()
        for f in findings:
            mark = plain("ok     ", style="green") if f.ok else plain("PROBLEM", style="bold red")
            # One finding a line, never wrapped (grep-able).
            line = Text.assemble(mark, " ", plain(f.what), ": ", plain(f.detail))
            out.print(line, soft_wrap=True)
    if not all(f.ok for f in findings):
        raise typer.Exit(1)


def _high_water(url: str, config_dir: Path) -> list[Finding]:
    """The store against this host's high-water mark (G16): recreated, rolled back or restored
    behind what this host saw committed (:func:`torpor.engine.highwater.audit`)."""
    what = "high-water mark"
    try:
        store = open_store(url, read_only=True)
    except TorporError as exc:
        return [Finding(False, what, str(exc))]
    try:
        found = audit(config_dir, store)
    except TorporError as exc:
        return [Finding(False, what, str(exc))]
    finally:
        store.close()
    if found is None:
        return [Finding(True, what, "no mark on this host yet")]
    if not found:
        return [Finding(True, what, f"store {found.store_id} is not behind this host's mark")]
    out = []
    if found.recreated:
        out.append(
            Finding(
                False,
                what,
                f"store {found.location} has identity {found.store_id}, but this host pinned "
                f"{found.pinned} there: it was recreated or replaced; {WHAT_NOW}",
            )
        )
    for run_id, now, seen in found.runs:
        out.append(
            Finding(
                False,
                what,
                f"run {run_id!r}: history ends at seq {now}, but this host saw seq {seen} "
                f"committed: the store was rolled back or restored; {WHAT_NOW}",
            )
        )
    if not out:
        out.append(Finding(False, what, f"{found.flagged}; {WHAT_NOW}"))
    return out


def _dispatch(url: str) -> list[Finding]:
    """Damaged queue and schedule rows, damaged queue columns of runs, and schedules that
    cannot be computed here or last failed to fire."""
    try:
        store = open_store(url, read_only=True)
    except TorporError as exc:
        return [Finding(False, "queues and schedules", str(exc))]
    try:
        problems = damaged_rows(store) + schedule_problems(store)
    except TorporError as exc:
        return [Finding(False, "queues and schedules", str(exc))]
    finally:
        store.close()
    found = [Finding(False, what, detail) for what, detail in problems]
    return [*found, Finding(not found, "queues and schedules", f"{len(found)} with problems")]


def register(app: typer.Typer) -> None:
    """Add ``doctor`` to ``app``."""
    app.command()(doctor)
