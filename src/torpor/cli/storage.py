"""Storage commands: ``storage`` (the largest runs), ``gc`` (retention and garbage
collection), ``retention`` (a workflow's policy) and ``archive restore``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from .. import retention
from ..artifacts import ArtifactStore
from ..errors import BadInputError
from ..store.base import RunStorage
from .context import open_client
from .render import add_row, console, emit_json, fields, new_table
from .root import JsonFlag


def size_text(n: int) -> str:
    """``n`` bytes, readable (``1.2 MB``)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def storage_text(st: RunStorage) -> str:
    """One line of what a run occupies, for ``show``."""
    return (
        f"{size_text(st.total_bytes)} in the database (history {size_text(st.history_bytes)}, "
        f"checkpoint {size_text(st.checkpoint_bytes)}, chunks {size_text(st.chunk_bytes)}, "
        f"inbox {size_text(st.inbox_bytes)}); artifacts {size_text(st.artifact_bytes)}"
    )


def storage(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", "-n", help="How many runs.")] = 20,
    workflow: Annotated[
        str | None, typer.Option("--workflow", "-w", help="Only this workflow's runs.")
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """The runs that occupy the most: history, checkpoint, chunks (shared content counted for
    each run that refers to it) and artifacts, largest first.

    Example: torpor storage -n 5
    """
    with open_client(ctx) as client:
        rows = client.store.largest_runs(limit, workflow)
    if json_out:
        emit_json([{**r.__dict__, "total_bytes": r.total_bytes} for r in rows])
        return
    table = new_table(
        "RUN", "WORKFLOW", "STATUS", "HISTORY", "CHECKPOINT", "CHUNKS", "ARTIFACTS", "TOTAL"
    )
    for r in rows:
        status = r.status + (f" ({r.outcome})" if r.outcome else "")
        add_row(
            table,
            r.run_id,
            r.workflow,
            status,
            *(size_text(n) for n in (r.history_bytes, r.checkpoint_bytes, r.chunk_bytes)),
            size_text(r.artifact_bytes),
            size_text(r.total_bytes),
        )
    console().print(table)


def gc_command(
    ctx: typer.Context,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Change nothing; say what would go.")
    ] = False,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            metavar="SECONDS",
            help="Keep chunks and artifacts younger than this, referenced or not.",
        ),
    ] = retention.GRACE_MS / 1000,
    vacuum: Annotated[
        bool,
        typer.Option(
            "--vacuum",
            help="SQLite: switch a file made before incremental auto-vacuum to it (a full "
            "VACUUM, once).",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help=f"Accept a --grace below {retention.GRACE_FLOOR_S:g} seconds (see below).",
        ),
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Delete finished runs past their workflow's retention (archiving them first when the
    policy says so), then chunks and artifacts no retained run refers to, and give SQLite
    pages back. Waiting, running and reopenable runs are never deleted, nor anything a run
    that is not finished refers to or is storing, whatever the grace. Workers do this on a
    schedule (TORPOR_GC_INTERVAL_S). A SQLite file is quick-checked first: a damaged one is
    refused, never rewritten. A grace under the floor needs --force: below it, a blob another
    machine stored just now may look old when the artifact store's clock is behind.

    Example: torpor gc --dry-run
    """
    if grace < retention.GRACE_FLOOR_S and not force and not dry_run:
        raise BadInputError(
            f"gc --grace {grace:g} is below {retention.GRACE_FLOOR_S:g} seconds: a blob another "
            "machine stored just now can look that old when the artifact store's clock is "
            "behind this one's (runs' own values are pinned whatever the grace); pass --force "
            "to collect anyway"
        )
    with open_client(ctx, check=not dry_run) as client:
        artifacts = ArtifactStore(client.settings.artifacts_url)
        rep = retention.collect(
            client.store, artifacts, dry_run=dry_run, grace_s=grace, vacuum=vacuum, check=False
        )
    if json_out:
        emit_json(rep)
        return
    would = "would delete" if dry_run else "deleted"
    pairs: list[tuple[str, Any]] = [
        (f"runs ({would})", ", ".join(rep.runs) or "none"),
        ("archived", ", ".join(f"{k} -> {v}" for k, v in rep.archived.items()) or None),
        (f"chunks ({would})", f"{rep.chunks} ({size_text(rep.chunk_bytes)})"),
        (f"artifacts ({would})", f"{rep.artifacts} ({size_text(rep.artifact_bytes)})"),
        ("others", "; ".join(rep.others) or None),
        ("pages", rep.pages or None),
    ]
    fields(console(), [(k, v) for k, v in pairs if v is not None])


def retention_command(
    ctx: typer.Context,
    workflow: Annotated[str, typer.Argument(metavar="WORKFLOW", help="The workflow's name.")],
    days: Annotated[
        float | None,
        typer.Option("--days", help="Keep finished runs this many days after they finished."),
    ] = None,
    last: Annotated[
        int | None, typer.Option("--last", help="Keep the last N finished runs.")
    ] = None,
    forever: Annotated[bool, typer.Option("--forever", help="Keep every run.")] = False,
    archive: Annotated[
        str | None,
        typer.Option(
            "--archive", metavar="URL", help="Archive a run's history here before deleting it."
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Show or set how long WORKFLOW's finished runs are kept (no policy: forever). A run
    outside any limit set is deleted by the next `torpor gc` (unresolved and blocked runs
    are kept until a person settles them).

    Example: torpor retention deploy --days 30 --archive s3://bucket/torpor-archive
    """
    changing = forever or days is not None or last is not None or archive is not None
    # (a policy deletes runs: never set on a damaged file)
    with open_client(ctx, check=changing) as client:
        if changing:
            if forever and (days is not None or last is not None):
                raise typer.BadParameter("--forever with --days or --last")
            retention.set_policy(
                client.store, workflow, keep_days=days, keep_last=last, archive_url=archive
            )
        policy = next(
            (p for p in client.store.retention_policies() if p.workflow == workflow), None
        )
    if json_out:
        emit_json(policy)
        return
    if policy is None or policy.forever:
        kept = "forever"
    else:
        limits = [f"{policy.keep_days:g} days" if policy.keep_days is not None else ""]
        limits.append(f"the last {policy.keep_last}" if policy.keep_last is not None else "")
        kept = " and ".join(x for x in limits if x)
    fields(console(), [("workflow", workflow), ("finished runs kept", kept)] + (
        [("archive", policy.archive_url)] if policy and policy.archive_url else []
    ))  # fmt: skip


archive_app = typer.Typer(
    name="archive",
    help="Runs archived by retention (torpor retention WORKFLOW --archive URL): restore.\n\n"
    "Example: torpor archive restore .torpor/archive/deploy-42.jsonl",
    no_args_is_help=True,
)


@archive_app.command("restore")
def archive_restore(
    ctx: typer.Context,
    url: Annotated[str, typer.Argument(metavar="URL", help="The archive file (fsspec URL).")],
) -> None:
    """Bring back a run archived before retention deleted it; it shows and replays as
    before (its artifacts, if collected since, are not brought back).

    Example: torpor archive restore s3://bucket/torpor-archive/deploy-42.jsonl
    """
    with open_client(ctx, check=True) as client:
        run_id = retention.restore_archive(client.store, url)
    console().print(f"restored run {run_id}")


def register(app: typer.Typer) -> None:
    """Add ``storage``, ``gc``, ``retention`` and ``archive`` to ``app``."""
    app.command()(storage)
    app.command("gc")(gc_command)
    app.command("retention")(retention_command)
    app.add_typer(archive_app, name="archive")
