"""The ``context`` command: the context an agent's next model call would get, section by
section with token counts (read from the run's latest checkpoint, built by the same function
the agent uses: :func:`torpor.memory.view.context_view`)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from ..errors import BadInputError
from ..store.ledger_rows import LedgerEntry
from .context import open_client
from .render import add_row, console, emit_json, new_table
from .root import JsonFlag, RunId


def show_context(
    ctx: typer.Context,
    run_id: RunId,
    full: Annotated[
        bool, typer.Option("--full", help="Print every section's text, not only its head.")
    ] = False,
    ledger: Annotated[
        bool,
        typer.Option(
            "--ledger",
            help="List the run's fact ledger instead: every record with its provenance and "
            "what superseded it.",
        ),
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Show the context an agent's next model call would get: each section (goal, summary,
    plan, checkpoint, recall, buffer, …) with its priority and tokens, what the budget cut,
    the total. With --ledger: the run's fact ledger (typed records, provenance, supersession).

    Example: torpor context triage-7 --full; torpor context triage-7 --ledger
    """
    from ..memory.view import context_view, holds, limits_line, no_context_reason

    with open_client(ctx, read_only=True) as client:  # never creates or migrates a store
        state = client.state(run_id)
        records = client.ledger(run_id) if ledger else []
    view = context_view(state)
    if view is None and not records:  # (a ledger is kept by an agent's working memory alone)
        raise BadInputError(no_context_reason(state))
    if ledger:
        _show_ledger(run_id, records, json_out)
        return
    if view is None:
        raise BadInputError(no_context_reason(state))
    if json_out:
        emit_json(
            {
                "run_id": view.run_id,
                "total_tokens": view.total_tokens,
                "budget_tokens": view.budget_tokens,
                "context_hash": view.context_hash,
                "model_turns": view.model_turns,
                "compactions": view.compactions,
                "checkpoint_seq": view.checkpoint_seq,
                "limits": view.limits,
                "sections": [vars(s) for s in view.sections],
            }
        )
        return
    out = console()
    table = new_table(
        "SECTION", "PRIORITY", "TOKENS", "CUT", "HOLDS", title=f"next context of {run_id}"
    )
    for s in view.sections:
        add_row(table, s.name, s.priority, s.tokens, "cut" if s.cut else "", holds(s.name))
    out.print(table)
    out.print(
        Text(
            f"total {view.total_tokens} of {view.budget_tokens} tokens; {view.model_turns} model "
            f"turns, "
            f"{view.compactions} compactions; from the checkpoint at seq {view.checkpoint_seq}; "
            f"sha256:{view.context_hash[:16]}"
        )
    )
    if view.limits:
        out.print(Text(limits_line(view.limits)))
    for s in view.sections:
        if not s.text:
            continue
        text = s.text if full or len(s.text) <= 600 else s.text[:600] + " [...] (--full)"
        out.print(Text(f"\n── {s.name} ({s.tokens} tokens)", style="bold"))
        out.print(Text(text))


def _show_ledger(run_id: str, records: list[LedgerEntry], json_out: bool) -> None:
    """The ledger as ``--ledger`` prints it (records were scrubbed before they were stored)."""
    if json_out:
        emit_json({"run_id": run_id, "records": [r.as_json() for r in records]})
        return
    out = console()
    shown = [r for r in records if r.kind != "unit"]
    table = new_table(
        "SEQ", "TURN", "KIND", "STEP", "RECORD", "SUPERSEDED", title=f"fact ledger of {run_id}"
    )
    for r in shown:
        gone = (
            f"by seq {r.superseded_seq} ({r.superseded_source}, turn of {r.superseded_step})"
            if r.superseded_by
            else ""
        )
        add_row(table, r.seq, r.turn, r.kind, r.step or "", r.text, gone)
    out.print(table)
    units = len(records) - len(shown)
    live = sum(1 for r in shown if not r.superseded_by)
    out.print(
        Text(
            f"{len(shown)} records ({live} in force, {len(shown) - live} superseded, kept); "
            f"{units} earlier turns indexed for recall"
        )
    )


def register(app: typer.Typer) -> None:
    """Add ``context`` to ``app``."""
    app.command("context")(show_context)
