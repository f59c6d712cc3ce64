"""``torpor doctor``: examine the store (see :mod:`torpor.store.doctor`); changes nothing but
the damage marker beside a SQLite file (:mod:`torpor.store.damage`). ``torpor init``: create
the store where the options say, and say where that is."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from ..artifacts import ArtifactStore
from ..blobs import check_references
from ..engine.highwater import WHAT_NOW, audit
from ..errors import BadInputError, StoreMissingError, TorporError
from ..queues import damaged_rows
from ..schedules import schedule_problems
from ..store import damage, open_store
from ..store.doctor import Finding, examine
from ..store.sqlite import path_of
from ..urls import display_url
from .render import console, emit_json, fields, plain
from .root import JsonFlag, options


def doctor(
    ctx: typer.Context,
    deep: Annotated[
        bool,
        typer.Option("--deep", help="Also hash-check every stored value runs refer to."),
    ] = False,
    clear_damaged: Annotated[
        bool,
        typer.Option(
            "--clear-damaged",
            help="SQLite: after restoring a sound copy, remove the damage marker (only when "
            "the full integrity check finds nothing).",
        ),
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Examine the store without changing it: SQLite's integrity check, the WAL and its
    index, a damage marker, the schema version, runs whose history cannot be folded, run rows
    whose status disagrees with their history, chunks and artifacts runs refer to that are
    missing (altered too, with --deep), damaged queue and schedule rows (and queue columns of
    runs), and schedules that cannot fire. Exit 1 when anything is wrong; a damaged store
    gets the next step (restore a copy, or recover what can be read).

    Example: torpor --db sqlite:///.torpor/torpor.db doctor --deep
    """
    settings = options(ctx).settings()
    url = settings.database_url
    if clear_damaged:
        _clear(url)
        return
    findings = examine(url)
    opened = all(f.what != "open" for f in findings) and findings[-1].detail != "no such file"
    if opened:
        findings += _dispatch(url)
        findings += _references(url, settings.artifacts_url, deep)
        findings += _high_water(url, settings.config_dir())
    findings += _damage(url, findings)
    if findings[-1].detail == "no such file":  # a missing SQLite store: say what creates one
        findings.append(
            Finding(
                False,
                "next step",
                f"only `torpor start` or `torpor --db {url} init` creates a store; check --db, "
                "TORPOR_DATABASE_URL or TORPOR_HOME (relative to the current folder)",
            )
        )
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


def _damage(url: str, findings: list[Finding]) -> list[Finding]:
    """The damage marker (a SQLite file found damaged, now or before), and the next step."""
    if not url.startswith("sqlite:"):
        return []
    path = path_of(url)
    integrity = next((f for f in findings if f.what == "integrity check"), None)
    if integrity is not None and not integrity.ok:
        damage.mark(path, f"integrity check: {integrity.detail}")
    why = damage.read_mark(path)
    if why is None:
        return []
    out = [Finding(False, "damage marker", f"{damage.marker_path(path)}: {why}")]
    if integrity is not None and integrity.ok:
        step = (
            f"the file checks sound now (restored?): torpor --db {url} doctor --clear-damaged "
            "lets writers use it again"
        )
    else:
        step = (
            f"writers refuse this store. Restore it from a copy (stop every worker, copy the "
            f"copy over {path}, remove {path}-wal and {path}-shm, then torpor --db {url} doctor "
            f"--clear-damaged), or recover what can be read into a new file: sqlite3 {path} "
            f"'.recover' | sqlite3 {path}.recovered, then check that one with doctor"
        )
    return [*out, Finding(False, "next step", step)]


def _clear(url: str) -> None:
    """``--clear-damaged``: remove the marker only when the full integrity check is clean."""
    if not url.startswith("sqlite:"):
        raise BadInputError("doctor --clear-damaged: only a SQLite store has a damage marker")
    path = path_of(url)
    if damage.read_mark(path) is None:
        console().print(plain(f"{path} has no damage marker"))
        return
    found = damage.problems(path, "integrity_check")
    if found:
        raise BadInputError(
            f"{path} is still damaged (integrity check: {'; '.join(found)}); the marker stays"
        )
    damage.clear(path)
    console().print(plain(f"{path}: integrity check ok; damage marker removed"))


def _references(url: str, artifacts_url: str, deep: bool) -> list[Finding]:
    """Every reference of every run: chunks in the database, blobs in the artifact store."""
    try:
        store = open_store(url, read_only=True)
    except TorporError as exc:
        return [Finding(False, "stored values", str(exc))]
    try:
        found = check_references(store, ArtifactStore(artifacts_url), deep=deep)
    except TorporError as exc:
        return [Finding(False, "stored values", str(exc))]
    finally:
        store.close()
    return [Finding(ok, what, detail) for ok, what, detail in found]


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


def init(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """Create the store the options name (--db, $TORPOR_DATABASE_URL, else
    $TORPOR_HOME/torpor.db, TORPOR_HOME defaulting to ./.torpor in the current folder), or
    migrate the one there; say where it is. Only init and start create a store: every other
    command names a missing one. Pin one for every folder with TORPOR_HOME or
    TORPOR_DATABASE_URL set to an absolute path.

    Example: torpor --db sqlite:////srv/torpor/torpor.db init
    """
    url = options(ctx).settings().database_url
    where = display_url(url)
    if url.startswith("sqlite:"):
        where = str(Path(path_of(url)).resolve())
    try:
        open_store(url, create=False).close()
        existed = True
    except StoreMissingError:
        open_store(url).close()
        existed = False
    said = "existed" if existed else "created"
    if json_out:
        emit_json({"store": where, "url": display_url(url), "created": not existed})
        return
    fields(console(), [("store", where), ("state", said)])


def register(app: typer.Typer) -> None:
    """Add ``doctor`` and ``init`` to ``app``."""
    app.command()(doctor)
    app.command()(init)
