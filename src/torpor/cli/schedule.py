"""``torpor schedule`` (add, ls, rm, pause, resume) and ``torpor queue`` (set, ls, rm): thin
commands over :mod:`torpor.schedules` and :mod:`torpor.queues`."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import BadInputError
from ..queues import Queues
from ..schedules import CATCHUP_POLICIES, Schedule, Schedules
from .context import open_client, parse_json
from .render import add_row, console, emit_json, new_table, plain, when
from .root import JsonFlag

schedule_app = typer.Typer(
    name="schedule",
    help="Start a workflow on a cron schedule in a time zone: add, ls, rm, pause, resume.\n\n"
    "Workers fire due schedules: one run per slot (run id NAME@UTC-TIME), however many "
    "workers run.\n\n"
    'Example: torpor schedule add report --cron "0 17 * * *" --tz America/New_York daily_report',
    no_args_is_help=True,
)
queue_app = typer.Typer(
    name="queue",
    help="Limits on the runs of a queue: set, ls, rm.\n\n"
    "Runs started with --queue are claimed only while every limit of their queue has room.\n\n"
    "Example: torpor queue set deploys --concurrency 1",
    no_args_is_help=True,
)

ScheduleName = Annotated[str, typer.Argument(metavar="NAME", help="The schedule's name.")]


def _row(s: Schedule) -> dict[str, object]:
    return {
        "name": s.name,
        "workflow": s.workflow,
        "cron": s.cron,
        "tz": s.tz,
        "catchup": s.catchup,
        "queue": s.queue,
        "paused": s.paused,
        "next_fire": s.next_fire.isoformat(),
        "next_fire_ms": s.next_fire_ms,
        "last_fire_ms": s.last_fire_ms,
        "input": s.input,
        "last_error": s.last_error,
        "retry_at_ms": s.retry_at_ms,
    }


def _said(s: Schedule, verb: str, json_out: bool) -> None:
    if json_out:
        emit_json(_row(s))
        return
    state = "paused" if s.paused else f"next fire {s.next_fire.isoformat()} ({s.tz})"
    console().print(plain(f"schedule {s.name} {verb}: {s.cron} -> {s.workflow}; {state}"))


@schedule_app.command("add")
def add(
    ctx: typer.Context,
    name: ScheduleName,
    workflow: Annotated[str, typer.Argument(metavar="WORKFLOW", help="Registered workflow name.")],
    cron: Annotated[
        str, typer.Option("--cron", metavar="EXPR", help='5-field cron, e.g. "0 17 * * *".')
    ],
    tz: Annotated[str, typer.Option("--tz", metavar="ZONE", help="IANA time zone.")] = "UTC",
    input_json: Annotated[
        str | None,
        typer.Option("--input", "-i", metavar="JSON", help="Input of each run, JSON or @FILE."),
    ] = None,
    catchup: Annotated[
        str,
        typer.Option(
            "--catchup",
            metavar="POLICY",
            help=f"Slots missed while no worker ran: {', '.join(CATCHUP_POLICIES)}.",
        ),
    ] = "one",
    queue: Annotated[
        str | None, typer.Option("--queue", metavar="NAME", help="Start its runs in this queue.")
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Add a schedule, or replace the one of that name (no slot fires twice).

    Example: torpor schedule add report --cron "0 17 * * *" --tz America/New_York daily_report
    """
    data = parse_json("--input", input_json)
    with open_client(ctx, create=True) as client:  # it starts runs: it may create the store
        s = Schedules(client.store).add(
            name, cron=cron, workflow=workflow, tz=tz, input=data, catchup=catchup, queue=queue
        )
    _said(s, "saved", json_out)


@schedule_app.command("ls")
def ls(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """List schedules with their next fire (local to each schedule's zone) and, for one that
    could not fire, why (a worker retries it every minute).

    Example: torpor schedule ls --json
    """
    with open_client(ctx, read_only=True) as client:
        rows = Schedules(client.store).list()
    if json_out:
        emit_json([_row(s) for s in rows])
        return
    if not rows:
        console().print("no schedules")
        return
    columns = ["NAME", "CRON", "ZONE", "WORKFLOW", "NEXT FIRE", "LAST FIRE", "CATCH-UP"]
    errors = any(s.last_error for s in rows)
    table = new_table(*columns, *(["LAST ERROR"] if errors else []))
    for s in rows:
        nxt = "paused" if s.paused else s.next_fire.strftime("%Y-%m-%d %H:%M %Z")
        cells = [s.name, s.cron, s.tz, s.workflow, nxt, when(s.last_fire_ms), s.catchup]
        add_row(table, *cells, *([s.last_error or "-"] if errors else []))
    console().print(table)


@schedule_app.command("rm")
def rm(ctx: typer.Context, name: ScheduleName) -> None:
    """Remove a schedule (the runs it started stay).

    Example: torpor schedule rm report
    """
    with open_client(ctx) as client:
        gone = Schedules(client.store).remove(name)
    console().print(plain(f"schedule {name} removed" if gone else f"no schedule named {name}"))
    if not gone:
        raise typer.Exit(1)


@schedule_app.command("pause")
def pause(ctx: typer.Context, name: ScheduleName, json_out: JsonFlag = False) -> None:
    """Stop firing a schedule until it is resumed.

    Example: torpor schedule pause report
    """
    with open_client(ctx) as client:
        _said(Schedules(client.store).pause(name), "paused", json_out)


@schedule_app.command("resume")
def resume(ctx: typer.Context, name: ScheduleName, json_out: JsonFlag = False) -> None:
    """Fire again from the next slot after now (the paused period is not caught up).

    Example: torpor schedule resume report
    """
    with open_client(ctx) as client:
        _said(Schedules(client.store).resume(name), "resumed", json_out)


@queue_app.command("set")
def set_queue(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The queue's name.")],
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", metavar="N", help="Runs holding a slot at once.")
    ] = None,
    per_key: Annotated[
        int | None, typer.Option("--per-key", metavar="N", help="Such runs per concurrency key.")
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option("--rate", metavar="N/SECONDS", help="Starts per period, e.g. 10/60."),
    ] = None,
    key_rate: Annotated[
        str | None,
        typer.Option("--key-rate", metavar="N/SECONDS", help="Starts per key per period."),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Define a queue's limits, replacing those it had (an omitted limit no longer applies).

    Example: torpor queue set ci --per-key 1 --rate 30/60
    """
    r, rp = _rate("--rate", rate)
    kr, krp = _rate("--key-rate", key_rate)
    with open_client(ctx, create=True) as client:  # configures runs to come
        q = Queues(client.store).set(
            name,
            concurrency=concurrency,
            key_concurrency=per_key,
            rate_limit=r,
            rate_period_s=rp,
            key_rate_limit=kr,
            key_rate_period_s=krp,
        )
    if json_out:
        emit_json(q)
        return
    console().print(plain(f"queue {q.name}: {q.describe()}"))


def _rate(flag: str, text: str | None) -> tuple[int | None, float | None]:
    """``N/SECONDS`` as (N, seconds); BadInputError naming the option otherwise."""
    if text is None:
        return None, None
    n, _, period = text.partition("/")
    try:
        return int(n), float(period)
    except ValueError:
        raise BadInputError(f"{flag} {text!r}: expected N/SECONDS, e.g. 10/60") from None


@queue_app.command("ls")
def list_queues(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """List the defined queues and their limits.

    Example: torpor queue ls
    """
    with open_client(ctx, read_only=True) as client:
        rows = Queues(client.store).list()
    if json_out:
        emit_json(rows)
        return
    if not rows:
        console().print("no queues")
        return
    table = new_table("QUEUE", "LIMITS")
    for q in rows:
        add_row(table, q.name, q.describe())
    console().print(table)


@queue_app.command("rm")
def rm_queue(
    ctx: typer.Context, name: Annotated[str, typer.Argument(metavar="NAME", help="Queue.")]
) -> None:
    """Remove a queue's limits (its runs are then not limited).

    Example: torpor queue rm deploys
    """
    with open_client(ctx) as client:
        gone = Queues(client.store).remove(name)
    console().print(plain(f"queue {name} removed" if gone else f"no queue named {name}"))
    if not gone:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the ``schedule`` and ``queue`` command groups to ``app``."""
    app.add_typer(schedule_app)
    app.add_typer(queue_app)
