"""``torpor store``: this host's high-water mark of the store (issue 33, G16).

``torpor store mark`` shows what this host pinned and saw; ``torpor store accept-restore --as
NAME`` records a person's decision that the store as it is now — rolled back, restored from an
older copy, or recreated — is the one to go on with (:func:`torpor.engine.highwater.accept`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..engine.highwater import accept, audit
from ..keys import check_name
from ..store import open_store
from .render import console, emit_json, plain
from .root import JsonFlag, options

store_app = typer.Typer(
    name="store",
    help="This host's high-water mark of the store (G16): show it, accept a restore.\n\n"
    "Example: torpor store accept-restore --as alice --reason 'restored last night's backup'",
    no_args_is_help=True,
)


def _lines(found: object) -> list[str]:
    from ..engine.highwater import Behind

    assert isinstance(found, Behind)
    out = []
    if found.recreated:
        out.append(
            f"store identity {found.store_id}, but this host pinned {found.pinned} at "
            f"{found.location}: recreated or replaced"
        )
    elif found.flagged:
        out.append(f"found behind: {found.flagged}")
    out += [
        f"run {run_id}: history ends at seq {now}, this host saw seq {seen}"
        for run_id, now, seen in found.runs
    ]
    return out


@store_app.command("mark")
def show_mark(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """Show this host's mark of the store: the identity pinned, and whether the store is
    behind it (exit 1 when it is).

    Example: torpor store mark
    """
    settings = options(ctx).settings()
    store = open_store(settings.database_url, read_only=True)
    try:
        found = audit(settings.config_dir(), store)
        sid = store.store_id()
    finally:
        store.close()
    behind = _lines(found) if found else []
    if json_out:
        emit_json({"store_id": sid, "pinned": found.pinned if found else None, "behind": behind})
    else:
        out = console()
        out.print(f"store identity {sid}", soft_wrap=True)
        if found is None:
            out.print("no mark on this host yet (pinned when a run first executes here)")
        for line in behind or ["not behind this host's mark"]:
            out.print(line, soft_wrap=True)
    if behind:
        raise typer.Exit(1)


@store_app.command("accept-restore")
def accept_restore(
    ctx: typer.Context,
    by: Annotated[
        str, typer.Option("--as", metavar="NAME", help="Who accepts the store as it is.")
    ],
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded).")] = "",
) -> None:
    """Accept the store as it is now — rolled back, restored from an older copy, or recreated
    — as the one to go on with: this host's mark is lowered to it and the decision recorded
    there (who, when, why, what was behind). Runs go on; each new effect of a run that was
    behind is first reconciled with the outside world (it may have run before the restore).

    Example: torpor store accept-restore --as alice --reason "restored last night's backup"
    """
    check_name(by, "--as")
    settings = options(ctx).settings()
    store = open_store(settings.database_url)
    try:
        decision = accept(settings.config_dir(), store, by, reason)
    finally:
        store.close()
    runs = decision.get("runs", {})
    out = console()
    out.print(
        f"accepted store {decision.get('store_id')} as it is, by {by}"
        + (
            f" (was {decision['was_store_id']})"
            if decision.get("was_store_id") != decision.get("store_id")
            else ""
        ),
        soft_wrap=True,
    )
    for run_id, (now, seen) in sorted(runs.items()):
        out.print(
            plain(
                f"run {run_id}: from seq {now} (this host had seen {seen}); its new effects "
                "are reconciled before they are called"
            ),
            soft_wrap=True,
        )


def register(app: typer.Typer) -> None:
    """Add ``store`` to ``app``."""
    app.add_typer(store_app)
