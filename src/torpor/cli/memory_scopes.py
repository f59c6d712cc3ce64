"""``torpor memory ls``, ``export``, ``import`` and ``forget``: a scope's memory as a whole
(:meth:`torpor.episodes.EpisodeStore.iter_scope`, :meth:`~torpor.episodes.EpisodeStore.forget`,
:meth:`~torpor.episodes.EpisodeStore.bulk_import`), added to the ``memory`` group by
:func:`.episodes.register`."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import BadInputError
from .context import open_client
from .render import add_row, console, emit_json, new_table, when
from .root import JsonFlag

ScopeRequired = Annotated[
    str,
    typer.Option(
        "--scope", metavar="SCOPE", help='The scope ("" for the empty one).', show_default=False
    ),
]


def ls(
    ctx: typer.Context,
    scope: Annotated[
        str | None,
        typer.Option("--scope", metavar="SCOPE", help="List this scope's episodes."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=100_000)] = 50,
    json_out: JsonFlag = False,
) -> None:
    """List the scopes holding episodes (with how many), or with --scope the scope's
    episodes in the order written (superseded ones marked), then the facts of its ledgers
    that changed (the newer holds; `torpor memory conflicts` lists them all).

    Example: torpor memory ls --scope acme
    """
    from ..episodes import EpisodeStore

    with open_client(ctx, read_only=True) as client:
        es = EpisodeStore(client.store)
        if scope is None:
            scopes = es.scopes()
        else:
            eps = []
            for ep in es.iter_scope(scope, page=min(limit, 500)):
                eps.append(ep)
                if len(eps) == limit:
                    break
            changed = es.conflicts(scope, limit=limit)
    if scope is None:
        if json_out:
            emit_json([{"scope": s, "episodes": n} for s, n in scopes.items()])
            return
        table = new_table("SCOPE", "EPISODES", title="scopes holding episodes")
        for s, n in scopes.items():
            add_row(table, repr(s), n)
        console().print(table if scopes else "no episodes in this store")
        return
    if json_out:
        emit_json(eps)
        return
    table = new_table("EPISODE", "WHEN", "TASK TYPE", "OUTCOME", "VALID UNTIL", "SUMMARY")
    for e in eps:
        until = when(e.valid_until_ms) + f" (by {e.superseded_by})" if e.superseded_by else "-"
        add_row(
            table, e.episode_id, when(e.created_at_ms), e.task_type, e.outcome, until, e.summary
        )
    console().print(table if eps else f"no episodes in scope {scope!r}")
    if changed:
        console().print(_conflict_table(changed))


def _conflict_table(changed: list[Any]) -> Any:
    table = new_table(
        "SUBJECT", "NOW", "STATED BY", "WHEN", "WAS", "STATED BY (SUPERSEDED)",
        title="facts that changed (the newer holds)",
    )  # fmt: skip
    for c in changed:
        add_row(
            table,
            c.subject,
            c.new_value,
            f"{c.newer.run_id}@{c.newer.seq}: {c.newer.text}",
            when(c.newer.at_ms),
            c.old_value,
            f"{c.older.run_id}@{c.older.seq}: {c.older.text}",
        )
    return table


def conflicts(
    ctx: typer.Context,
    scope: ScopeRequired,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=100_000)] = 50,
    json_out: JsonFlag = False,
) -> None:
    """List the contradictions recorded among the fact-ledger records of a scope's runs, newest
    first: two records giving one subject different values (a port, a version, a decision and
    its reversal), the newer superseding the older.

    Example: torpor memory conflicts --scope acme
    """
    from ..episodes import EpisodeStore

    with open_client(ctx, read_only=True) as client:
        changed = EpisodeStore(client.store).conflicts(scope, limit=limit)
    if json_out:
        emit_json([dataclasses.asdict(c) for c in changed])
        return
    console().print(_conflict_table(changed) if changed else f"no conflicts in scope {scope!r}")


def _record(ep: Any) -> dict[str, Any]:
    out = dataclasses.asdict(ep)
    out.pop("score", None)
    return out


def export(
    ctx: typer.Context,
    scope: ScopeRequired,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="FILE", help="Write here (default: stdout)."),
    ] = None,
) -> None:
    """Export every episode of a scope, superseded or not, as JSON Lines (one episode a line,
    in the order written): what `torpor memory import` reads back.

    Example: torpor memory export --scope acme -o acme-episodes.jsonl
    """
    from ..episodes import EpisodeStore

    n = 0
    with open_client(ctx, read_only=True) as client:
        sink = out.open("w", encoding="utf-8") if out is not None else sys.stdout
        try:
            for ep in EpisodeStore(client.store).iter_scope(scope):
                sink.write(json.dumps(_record(ep), sort_keys=True, ensure_ascii=False) + "\n")
                n += 1
        finally:
            if out is not None:
                sink.close()
    if out is not None:
        console().print(f"exported {n} episode(s) of scope {scope!r} to {out}")


def import_(
    ctx: typer.Context,
    path: Annotated[
        Path,
        typer.Argument(
            metavar="FILE", help="JSON Lines, as `memory export` writes.", show_default=False
        ),
    ],
) -> None:
    """Import episodes from JSON Lines (`torpor memory export`'s format): each written once
    (an episode whose run and boundary exist is left as it is), in batches.

    Example: torpor memory import acme-episodes.jsonl
    """
    from ..episodes import Episode, EpisodeStore

    fields = {f.name for f in dataclasses.fields(Episode)}

    def read() -> Any:
        try:
            lines = path.open(encoding="utf-8")
        except OSError as e:
            raise BadInputError(f"{path}: cannot read ({e.strerror})") from None
        with lines:
            for no, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                    yield Episode(**{k: v for k, v in obj.items() if k in fields})
                except (ValueError, TypeError) as e:
                    raise BadInputError(f"{path}:{no}: not an episode ({e})") from None

    with open_client(ctx) as client:
        n = EpisodeStore(client.store).bulk_import(read())
    console().print(f"imported {n} new episode(s)")


def forget(
    ctx: typer.Context,
    scope: ScopeRequired,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    json_out: JsonFlag = False,
) -> None:
    """Delete everything memory holds of a scope: its episodes, the artifact references they
    held, its fact-ledger records; says what it removed. The scope's runs are left to run
    retention; artifacts nothing else names go with the next `torpor gc`.

    Example: torpor memory forget --scope acme --yes
    """
    from ..episodes import EpisodeStore

    if not yes and not typer.confirm(f"forget all memory of scope {scope!r}?"):
        raise typer.Exit(1)
    with open_client(ctx) as client:
        removed = EpisodeStore(client.store).forget(scope)
    if json_out:
        emit_json({"scope": scope, "removed": removed})
        return
    what = ", ".join(f"{n} {name.replace('_', ' ')}" for name, n in removed.items())
    console().print(f"forgot scope {scope!r}: removed {what}")


def add_commands(memory_app: typer.Typer) -> None:
    """Add ``ls``, ``export``, ``import`` and ``forget`` to the ``memory`` group."""
    memory_app.command("ls")(ls)
    memory_app.command("conflicts")(conflicts)
    memory_app.command("export")(export)
    memory_app.command("import")(import_)
    memory_app.command("forget")(forget)


__all__ = ["add_commands", "conflicts", "export", "forget", "import_", "ls"]
