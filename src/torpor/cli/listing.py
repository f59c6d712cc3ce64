"""``torpor ls`` without Typer: the listing itself, and the fast path :func:`main` takes for a
plain ``ls`` (issue 48, "read commands import only what they print").

Typer coerces every parameter through pydantic and imports Rich's whole help machinery, and
the app would load every command; a listing needs none of that. :func:`fast_ls` parses the
few words a plain ``ls`` takes (the root's ``--db``/``--artifacts``/``--import`` and ``ls``'s
``--status``, ``--outcome``, ``--limit``, ``--json``) and prints exactly what the Typer command
prints, through the same :func:`print_runs`; anything else — ``--help``, an unknown option, a
bad value — returns None and the Typer app handles it as always, with its own messages.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING

from ..config import Settings
from ..history.kinds import Outcome, RunStatus
from ..queues import why_not_running
from ..report.lease import lease_text
from ..urls import display_url
from .render import add_row, console, emit_json, new_table, plain, relative, short, when

if TYPE_CHECKING:
    from ..client import Client
    from ..store.base import RunRecord


@contextmanager
def read_client(settings: Settings) -> Iterator[Client]:
    """A Client on ``settings``' store opened read-only (a SQLite store is never created,
    migrated or written: :func:`torpor.store.open_store`); what the open had to say goes to
    stderr. Closed afterwards."""
    from ..client import Client
    from ..store import open_store

    store = open_store(settings.database_url, read_only=True)
    note = store.note
    if note:
        console(stderr=True).print(plain(f"warning: {note}", style="yellow"))
    client = Client(store, settings=settings)
    try:
        yield client
    finally:
        client.close()


def store_text(url: str) -> str:
    """The store a command uses, as said on stderr: its URL (no password), and for a SQLite
    file given relative to the current folder the absolute path too — a user who ``cd``s
    elsewhere reads another store (pin one: TORPOR_HOME or TORPOR_DATABASE_URL, absolute)."""
    shown = display_url(url)
    if url.startswith("sqlite:"):
        path = url.split("://", 1)[1].split("?", 1)[0]
        path = path[1:] if path.startswith("/") else path
        if path and path != ":memory:" and not os.path.isabs(path):
            shown += f" ({os.path.abspath(path)})"
    return shown


def tell_store(url: str, *, always: bool = False) -> None:
    """Say on stderr which store this command reads or writes (one dim line): to a person at
    a terminal, or ``always`` (``ls``); a script reading stderr gets only what went wrong."""
    if always or sys.stderr.isatty():
        line = plain(f"store: {store_text(url)}", style="dim")
        console(stderr=True).print(line, soft_wrap=True)


def _flat(_depth: int, run_id: str) -> str:
    return run_id


def print_runs(
    settings: Settings,
    status: str | None,
    outcome: str | None,
    limit: int,
    json_out: bool,
    *,
    tree: bool = False,
) -> None:
    """Print the newest ``limit`` runs (optionally of one ``status``/``outcome``) as a table,
    or as JSON rows with why a queued run is not running; ``tree``: each run's children under
    it, indented (issue 37)."""
    with read_client(settings) as client:
        runs = client.runs(status=status, outcome=outcome, limit=limit)
        now = client.store.now_ms()
        order: list[tuple[int, RunRecord, str | None]] = [(0, r, None) for r in runs]
        label: Callable[[int, str], str] = _flat
        if tree:  # (the tree's module imports the client's models: only when asked)
            from .tree import tree_label, tree_order

            order, label = tree_order(client, runs), tree_label
            runs = [r for _, r, _ in order]
        why = {
            r.run_id: why_not_running(client.store, r.run_id) for r in runs if r.status == "pending"
        }
    tell_store(settings.database_url, always=True)
    if json_out:  # each run row, with why a queued run is not running
        emit_json(
            [
                {
                    **asdict(r),
                    "not_running": why.get(r.run_id),
                    **({"depth": d, "parent": p} if tree else {}),
                }
                for d, r, p in order
            ]
        )
        return
    out = console()
    if not runs:
        out.print("no runs")
        return
    attention = any(r.attention for r in runs)
    columns = ["RUN", "WORKFLOW", "VERSION", "STATUS", "OUTCOME", "UPDATED", "WAKE", "EVENTS"]
    queued = any(why.values())
    columns += ["WHY NOT RUNNING"] if queued else []
    table = new_table(*columns, *(["NEEDS ATTENTION"] if attention else []))
    for depth, r, _ in order:
        add_row(
            table,
            label(depth, r.run_id),
            r.workflow,
            r.version,
            lease_text(r, now),
            r.outcome,
            when(r.updated_at_ms),
            relative(r.wake_at_ms) if r.status == RunStatus.WAITING.value else None,
            r.last_seq,
            *([why.get(r.run_id)] if queued else []),
            *([short((r.attention or "").split(": ", 1)[0], 60)] if attention else []),
        )
    out.print(table)


_ROOT = {"--db": "db", "--artifacts": "artifacts", "--import": "import"}
_LS = {"--status", "--outcome", "--limit"}


def fast_ls(args: Sequence[str]) -> bool:
    """Run ``torpor ls`` from ``args`` (the whole command line after ``torpor``) if it is a
    plain one, and say so; False (nothing done) for anything the Typer app must handle."""
    root: dict[str, str] = {}
    opts: dict[str, str] = {}
    json_out, seen_ls = False, False
    it = iter(args)
    for a in it:
        name, eq, val = a.partition("=") if a.startswith("--") else (a, "", "")
        if not seen_ls:
            if a == "ls":
                seen_ls = True
                continue
            if name not in _ROOT:
                return False
            value = val if eq else next(it, None)
            if value is None or (not eq and value.startswith("-")):
                return False
            if name != "--import":  # imports matter to start/resume only
                root[name] = value
        elif a == "--json":
            json_out = True
        elif name in _LS:
            value = val if eq else next(it, None)
            if value is None or name in opts:
                return False
            opts[name] = value
        else:
            return False
    try:
        status = RunStatus(opts["--status"]).value if "--status" in opts else None
        outcome = Outcome(opts["--outcome"]).value if "--outcome" in opts else None
        limit = int(opts.get("--limit", "50"))
    except ValueError:
        return False
    if not seen_ls or limit < 1:
        return False
    print_runs(
        Settings.from_env(root.get("--db"), root.get("--artifacts")),
        status,
        outcome,
        limit,
        json_out,
    )
    return True
