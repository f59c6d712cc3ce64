"""The ``memory`` command group: episodic memory across runs (:mod:`torpor.episodes`) —
``torpor memory search``, ``show``, ``sync`` and ``prune`` (``ls``, ``export``, ``import``,
``forget``: :mod:`.memory_scopes`)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.text import Text

from ..errors import BadInputError
from .context import open_client
from .render import add_row, console, emit_json, new_table, when
from .root import JsonFlag

memory_app = typer.Typer(
    name="memory",
    help="Episodic memory: what earlier runs did, what failed and why.\n\n"
    "Episodes are written when a run ends, goes to sleep or passes a milestone (a step that "
    "succeeds after failures), filed under the run's scope, agent and task type.\n\n"
    'Example: torpor memory search "deploy timeout" --scope acme --task-type deploy',
    no_args_is_help=True,
)

_DURATION = re.compile(r"^(\d+)\s*([smhdw])$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}


def parse_since(option: str, text: str, now_ms: int) -> int:
    """``30m``/``12h``/``7d``/``2w`` ago, or an ISO date or time (UTC unless it says), as epoch
    ms. BadInputError naming ``option`` otherwise."""
    m = _DURATION.match(text.strip())
    if m:
        return now_ms - int(m.group(1)) * _UNIT_MS[m.group(2)]
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadInputError(
            f"{option}: expected a duration (30m, 12h, 7d, 2w) or a date (2026-11-30), not {text!r}"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


@memory_app.command()
def search(
    ctx: typer.Context,
    query: Annotated[
        str,
        typer.Argument(
            metavar="QUERY",
            help="Plain words (any of them, stemmed); no query syntax.",
            show_default=False,
        ),
    ],
    scope: Annotated[
        str | None,
        typer.Option(
            "--scope",
            metavar="SCOPE",
            help='The scope searched; required once a store holds scopes other than "".',
        ),
    ] = None,
    all_scopes: Annotated[
        bool,
        typer.Option("--all-scopes", help="Search every scope (each ranked within itself)."),
    ] = False,
    agent: Annotated[str | None, typer.Option("--agent", metavar="NAME")] = None,
    task_type: Annotated[str | None, typer.Option("--task-type", metavar="TYPE")] = None,
    outcome: Annotated[
        str | None,
        typer.Option(
            "--outcome",
            metavar="OUTCOME",
            help="succeeded, failed, blocked, … (an ended run's), waiting, or progress.",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="WHEN", help="7d, 12h, 30m, or a date: newer only."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=1000)] = 10,
    superseded: Annotated[
        bool, typer.Option("--superseded", help="Include superseded episodes.")
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Search the episodes of a scope, most relevant first.

    Example: torpor memory search "deploy timeout" --scope acme --task-type deploy --since 7d
    """
    from ..episodes import EpisodeStore

    if scope is not None and all_scopes:
        raise BadInputError("memory search: give --scope SCOPE or --all-scopes, not both")
    with open_client(ctx) as client:
        es = EpisodeStore(client.store)
        if scope is None and not all_scopes and es.scopes_in_use():
            raise BadInputError(
                "memory search: this store holds episodes of several scopes; name one with "
                "--scope SCOPE (--scope '' for the empty one) or search them all with --all-scopes"
            )
        since_ms = parse_since("--since", since, client.store.now_ms()) if since else None
        hits = []
        for sc in es.scopes() if all_scopes else [scope or ""]:
            hits += es.search(
                query,
                scope=sc,
                agent=agent,
                task_type=task_type,
                outcome=outcome,
                since_ms=since_ms,
                limit=limit,
                include_superseded=superseded,
            )
        hits.sort(key=lambda e: (-e.score, -e.created_at_ms))
        hits = hits[:limit]
    if json_out:
        emit_json(hits)
        return
    if not hits:
        where = "any scope" if all_scopes else f"scope {scope or ''!r}"
        console().print(f"no episodes match in {where}")
        return
    table = new_table("EPISODE", "WHEN", "SCOPE", "AGENT", "TASK TYPE", "OUTCOME", "SUMMARY")
    for e in hits:
        eid = e.episode_id + (" (superseded)" if e.superseded_by else "")
        add_row(
            table, eid, when(e.created_at_ms), e.scope, e.agent, e.task_type, e.outcome, e.summary
        )
    console().print(table)


@memory_app.command()
def show(
    ctx: typer.Context,
    episode: Annotated[
        str,
        typer.Argument(metavar="EPISODE", help="Episode id (RUN:KIND@SEQ).", show_default=False),
    ],
    json_out: JsonFlag = False,
) -> None:
    """Show one episode: what happened, its conditions, outcome, lesson and references.

    Example: torpor memory show deploy-42:ended@57
    """
    from ..episodes import EpisodeStore

    with open_client(ctx) as client:
        ep = EpisodeStore(client.store).get(episode)
    if json_out:
        emit_json(ep)
        return
    c = ep.conditions
    lines = [
        f"episode      {ep.episode_id}",
        f"run          {ep.run_id} ({ep.kind} at seq {ep.at_seq})",
        f"when         {when(ep.created_at_ms)}",
        f"scope        {ep.scope!r}",
        f"agent        {ep.agent}   task type {ep.task_type}",
        f"outcome      {ep.outcome}",
        f"tools        {', '.join(c.get('tools', [])) or '-'}",
        f"input        sha256:{c.get('input_fingerprint', '')}…",
        f"events       {', '.join(str(s) for s in ep.refs.get('events', []))}",
        f"artifacts    {', '.join(ep.refs.get('artifacts', [])) or '-'}",
    ]
    if ep.superseded_by:
        until = f", valid until {when(ep.valid_until_ms)}" if ep.valid_until_ms else ""
        lines.append(f"superseded   by {ep.superseded_by}{until}")
    lines += ["", ep.summary, "", "lesson:", ep.lesson or "  (none)"]
    console().print(Text("\n".join(lines)), soft_wrap=True)


@memory_app.command()
def sync(ctx: typer.Context) -> None:
    """Write the episodes of waiting and finished runs whose boundaries have none yet (a
    process that died between a boundary and its episode). Safe to repeat. With an embedder
    configured (TORPOR_EMBEDDER), also embed the episodes that have no vector yet.

    Example: torpor memory sync
    """
    from ..episodes import EpisodeStore, backfill

    with open_client(ctx) as client:
        es = EpisodeStore(client.store)
        n = es.catch_up()
        console().print(f"wrote {n} episode(s)")
        if es.embedder is not None:
            done = backfill(client.store, es.embedder, limit=1_000_000)
            console().print(f"embedded {done} episode(s) ({es.embedder.model_id})")


@memory_app.command()
def prune(
    ctx: typer.Context,
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            metavar="AGE",
            help="Delete episodes created before this (90d, 12w, or a date).",
            show_default=False,
        ),
    ],
    superseded_only: Annotated[
        bool, typer.Option("--superseded-only", help="Delete only superseded episodes.")
    ] = False,
) -> None:
    """Delete old episodes (episodes have their own retention: they outlive their runs, and
    pruning them never touches a run).

    Example: torpor memory prune --older-than 180d --superseded-only
    """
    from ..episodes import EpisodeStore

    with open_client(ctx) as client:
        before = parse_since("--older-than", older_than, client.store.now_ms())
        n = EpisodeStore(client.store).prune(before_ms=before, superseded_only=superseded_only)
    console().print(f"deleted {n} episode(s)")


def register(app: typer.Typer) -> None:
    """Add the ``memory`` command group to ``app`` (with :mod:`.memory_scopes`' commands)."""
    from .memory_scopes import add_commands

    add_commands(memory_app)
    app.add_typer(memory_app)
