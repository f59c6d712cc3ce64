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

from collections.abc import Iterator, Sequence
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


def print_runs(
    settings: Settings, status: str | None, outcome: str | None, limit: int, json_out: bool
) -> None:
    """Print the newest ``limit`` runs (optionally of one ``status``/``outcome``) as a table,
    or as JSON rows with why a queued run is not running."""
    with read_client(settings) as client:
        runs = client.runs(status=status, outcome=outcome, limit=limit)
        now = client.store.now_ms()
        read_from = display_url(client.store.url)
        why = {
            r.run_id: why_not_running(client.store, r.run_id) for r in runs if r.status == "pending"
        }
    console(stderr=True).print(plain(f"store: {read_from}", style="dim"))
    if json_out:  # each run row, with why a queued run is not running
        emit_json([{**asdict(r), "not_running": why.get(r.run_id)} for r in runs])
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
    for r in runs:
        add_row(
            table,
            r.run_id,
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
