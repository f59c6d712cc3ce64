"""Commands that execute runs in this process: ``start``, ``resume`` and ``worker``."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated, Any

import typer

from ..client import Client
from ..errors import BadInputError, LeaseHeldError, RunNotFoundError, TorporError
from ..history import Outcome, RunStarted, RunStatus
from ..queues import left_to_workers
from ..runtime import RunResult, Runtime
from ..urls import display_url
from .context import open_runtime, parse_json, resume_command
from .exits import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OUTCOME, error_message, fail
from .render import (
    add_row,
    console,
    emit_json,
    fields,
    json_default,
    new_table,
    plain,
    relative,
    short,
    when,
)
from .root import Follow, Imports, JsonFlag

_GOOD_OUTCOMES = frozenset({None, "succeeded", "succeeded_with_warnings"})


@contextmanager
def _interruptible(run_id: str) -> Iterator[None]:
    """Ctrl-C while executing: say how to continue, exit 130 (the record is intact)."""
    try:
        yield
    except KeyboardInterrupt:
        fail(
            f"interrupted; run {run_id!r} continues from its last boundary with: "
            f"torpor resume {run_id}",
            EXIT_INTERRUPTED,
        )


def _print_result(res: RunResult, json_out: bool, resume: str = "") -> None:
    if json_out:
        emit_json(res)
        return
    out = console()
    status = res.status + (f" ({res.wait_kind})" if res.wait_kind else "")
    pairs: list[tuple[str, Any]] = [("run", res.run_id), ("status", status)]
    if res.outcome:
        pairs.append(("outcome", res.outcome))
    if res.reason:
        pairs.append(("reason", res.reason))
    if res.wake_at_ms is not None:
        pairs.append(("wakes", relative(res.wake_at_ms)))
    if res.result is not None:
        pairs.append(("result", short(res.result, 300)))
    fields(out, pairs)
    hint = _next_hint(res, resume or f"torpor resume {res.run_id}")
    if hint:
        out.print(plain(f"next: {hint}", style="cyan"))


def _next_hint(res: RunResult, resume: str) -> str:
    """What to do next with a run left where ``res`` says (``resume``: the command that
    continues it, with ``--import`` when its workflow lives in a script)."""
    rid = res.run_id
    if res.status == RunStatus.WAITING.value:
        if res.wait_kind == "approval":
            return (
                f"review the content hashes with `torpor show {rid}`, then "
                f"`torpor approve {rid} --as NAME --hash PREFIX` (or deny) and `{resume}`"
            )
        if res.wait_kind == "signal":
            return f"`torpor signal {rid} NAME --payload JSON`, then `{resume}`"
        if res.wait_kind == "children":
            return (
                f"it wakes when its child runs end (`torpor ls --tree`, `torpor show {rid}`); "
                f"a worker, or `{resume}`, runs them"
            )
        return f"`{resume}` once it is due"
    if res.outcome == Outcome.UNRESOLVED.value:
        return f"`torpor show {rid}` says which effect is in doubt and why"
    if res.status != RunStatus.FINISHED.value:
        return f"`{resume}`"
    return ""


# --------------------------------------------------------------------------- commands


def start(
    ctx: typer.Context,
    workflow: Annotated[
        str,
        typer.Argument(metavar="WORKFLOW", help="Registered workflow name.", show_default=False),
    ],
    input_json: Annotated[
        str | None,
        typer.Option("--input", "-i", metavar="JSON", help="Run input as JSON, or @FILE."),
    ] = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id",
            metavar="ID",
            help="Run id; starting an existing id rejoins that run (idempotent); one of a "
            "queue or with a start time is only returned (a worker starts it).",
        ),
    ] = None,
    imports: Imports = None,
    no_execute: Annotated[
        bool, typer.Option("--no-execute", help="Only create the run; execute it later.")
    ] = False,
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue", metavar="NAME", help="Queue it: a worker starts it under the queue's limits."
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--key", metavar="KEY", help="Concurrency key within the queue."),
    ] = None,
    priority: Annotated[
        int, typer.Option("--priority", metavar="N", help="Higher is claimed first.")
    ] = 0,
    start_at: Annotated[
        str | None,
        typer.Option(
            "--start-at",
            metavar="TIME",
            help="Not started before this ISO 8601 time with a zone (a worker starts it).",
        ),
    ] = None,
    follow: Follow = True,
    json_out: JsonFlag = False,
    scope: Annotated[
        str | None,
        typer.Option(
            "--scope",
            metavar="SCOPE",
            help="Whom the run works for (a user, a tenant, a team): its episodes are filed "
            "under it and it recalls lessons from it alone.",
        ),
    ] = None,
    task_type: Annotated[
        str | None,
        typer.Option(
            "--task-type",
            metavar="TYPE",
            help="The task type its episodes are filed under (an agent's default: its name).",
        ),
    ] = None,
) -> None:
    """Start a run of WORKFLOW and execute it in this process until it finishes or waits.

    With --queue or --start-at the run is only created: a worker starts it when its queue has
    room and it is due.

    Example: torpor start deploy --import myflows --input '{"env": "prod"}' --run-id deploy-42
    """
    data = parse_json("--input", input_json)
    at = _start_at(start_at)
    with open_runtime(ctx, imports, create=True) as rt:
        if run_id is not None and data is not None:
            _refuse_another_input(rt, run_id, data)
        rid = rt.start(
            workflow,
            data,
            run_id=run_id,
            queue=queue,
            key=key,
            priority=priority,
            start_at=at,
            scope=scope,
            task_type=task_type,
        )
        # A run of a queue or with a start time (this start's, or an existing run's when
        # rejoined) is left to workers: they start it under its queue's limits, when due.
        for_workers = queue is not None or at is not None or left_to_workers(rt.store, rid)
        if no_execute or for_workers:
            rec = Client(rt.store).get(rid)
            res = RunResult(rid, rec.status, rec.outcome)
        else:
            with _interruptible(rid):
                res = rt.resume(rid, follow_timers=follow)
        resume = resume_command(Client(rt.store), rid)
        if for_workers and res.status != "finished":  # a worker starts it
            module = Client(rt.store).state(rid).module
            resume = f"torpor worker --import {module if module != '__main__' else 'MODULE'}"
    _print_result(res, json_out, resume)
    if res.outcome not in _GOOD_OUTCOMES:
        raise typer.Exit(EXIT_OUTCOME)


def _refuse_another_input(rt: Runtime, run_id: str, data: Any) -> None:
    """``start --run-id ID --input ...`` of an existing run started with another input: a
    BadInputError, where the library's start rejoins the run and keeps its first input (as a
    run id deduplicates starts: DBOS's workflow ids, Temporal's use-existing policy): the one
    who typed a new input is told, rather than have it silently dropped."""
    try:
        first = rt.store.read_events(run_id, 0, limit=1)
    except RunNotFoundError:
        return
    if first and isinstance(first[0].payload, RunStarted) and first[0].payload.input != data:
        raise BadInputError(
            f"--input: run {run_id!r} exists and was started with another input; omit --input "
            "to rejoin it, or give a new --run-id"
        )


def _start_at(text: str | None) -> datetime | None:
    """``--start-at``: an ISO 8601 time with a zone (BadInputError otherwise)."""
    if text is None:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise BadInputError(f"--start-at {text!r} is not an ISO 8601 time") from None
    if at.tzinfo is None:
        raise BadInputError(f"--start-at {text!r} has no zone; add one, e.g. {text}+00:00")
    return at


def _resume_one(rt: Runtime, run_id: str, follow: bool, wait: bool, quiet: bool) -> RunResult:
    """Resume ``run_id``, saying what a long silence is: a timer the run sleeps on (and until
    when), a lease it waits for (with ``wait``)."""
    say = (lambda text: None) if quiet else (lambda text: console(stderr=True).print(plain(text)))

    def sleeping(res: RunResult) -> None:
        say(f"run {run_id} sleeps until {when(res.wake_at_ms)} ({res.reason}); staying to "
            "continue it then (Ctrl-C leaves it to a worker)")  # fmt: skip

    while True:
        try:
            return rt.resume(run_id, follow_timers=follow, on_sleep=sleeping)
        except LeaseHeldError as exc:
            if not wait:
                raise
            left_s = (exc.expires_at_ms - rt.store.now_ms()) / 1000
            say(f"run {run_id} is leased by {exc.owner} until {when(exc.expires_at_ms)}; "
                "waiting for the lease to expire (a live holder renews it)")  # fmt: skip
            time.sleep(min(max(left_s, 0.05), 5.0))


def resume(
    ctx: typer.Context,
    run_id: Annotated[
        str | None,
        typer.Argument(metavar="[RUN_ID]", help="The run to resume.", show_default=False),
    ] = None,
    all_runs: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Resume every runnable run (pending, crashed, or woken), each once; never "
            "stays for timers.",
        ),
    ] = False,
    limit: Annotated[
        int, typer.Option("--limit", min=1, help="With --all: at most this many runs.")
    ] = 100,
    imports: Imports = None,
    follow: Follow = True,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="If a live process holds the run's lease, wait for the lease to expire, then "
            "take the run over.",
        ),
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Resume RUN_ID (or --all runnable runs) from the last recorded boundary.

    Example: torpor resume deploy-42 --import myflows
    """
    if (run_id is None) == (not all_runs):
        raise BadInputError("give either a RUN_ID or --all")
    with open_runtime(ctx, imports) as rt:
        if run_id is not None:
            with _interruptible(run_id):
                res = _resume_one(rt, run_id, follow, wait, quiet=json_out)
            _print_result(res, json_out, resume_command(Client(rt.store), run_id))
            if res.outcome not in _GOOD_OUTCOMES:
                raise typer.Exit(EXIT_OUTCOME)
            return
        results: list[RunResult] = []
        failures: list[tuple[str, str]] = []
        for rid in Client(rt.store).runnable(limit):
            try:
                with _interruptible(rid):
                    results.append(rt.resume(rid, follow_timers=False))
            except TorporError as exc:
                failures.append((rid, error_message(exc)))
    if json_out:
        emit_json(
            {
                "resumed": results,
                "errors": [{"run_id": r, "error": m} for r, m in failures],
            }
        )
    else:
        out = console()
        if not results and not failures:
            out.print("no runnable runs")
        table = new_table("RUN", "STATUS", "OUTCOME", "REASON")
        for res in results:
            status = res.status + (f" ({res.wait_kind})" if res.wait_kind else "")
            add_row(table, res.run_id, status, res.outcome, short(res.reason, 80))
        if results:
            out.print(table)
    for rid, msg in failures:
        line = " ".join(msg.split())
        sys.stderr.write(f"error: {line}\n" if rid in line else f"error: run {rid!r}: {line}\n")
    if failures:
        raise typer.Exit(EXIT_ERROR)


def worker(
    ctx: typer.Context,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", min=1, help="Runs executed at once (threads).")
    ] = 1,
    imports: Imports = None,
    until_idle: Annotated[
        bool,
        typer.Option("--until-idle", help="Exit when nothing is runnable or due soon."),
    ] = False,
    max_seconds: Annotated[
        float | None,
        typer.Option("--max-seconds", min=0, metavar="S", help="Exit after S seconds."),
    ] = None,
    poll: Annotated[
        float,
        typer.Option("--poll", min=0.01, metavar="S", help="Longest idle sleep between looks."),
    ] = 1.0,
    lease_ttl: Annotated[
        float,
        typer.Option(
            "--lease-ttl",
            min=0,
            metavar="S",
            help="Lease lifetime; a crashed worker's runs "
            "are taken over this long after its last renewal.",
        ),
    ] = 30.0,
    heartbeat: Annotated[
        float | None,
        typer.Option(
            "--heartbeat",
            min=0,
            metavar="S",
            help="Lease renewal interval (default and at most a third of --lease-ttl).",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log more.")] = False,
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Print one JSON line per result, then one with the stats."),
    ] = False,
) -> None:
    """Run a worker: execute runnable runs under leases until stopped (Ctrl-C, SIGTERM).

    Any number of workers, on any number of machines, may share one database. On stop,
    running executions release their run at the next boundary.

    Example: torpor worker --import myflows --concurrency 4
    """
    from ..worker import Worker

    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    out = console()

    def report(res: RunResult) -> None:
        if json_out:
            sys.stdout.write(json.dumps(res, default=json_default) + "\n")
            sys.stdout.flush()
            return
        status = res.outcome or res.status + (f" ({res.wait_kind})" if res.wait_kind else "")
        reason = f": {short(res.reason, 120)}" if res.reason else ""
        now = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S")
        out.print(plain(f"{now} {res.run_id} {status}{reason}"))

    with open_runtime(ctx, imports, lease_ttl_s=lease_ttl, heartbeat_s=heartbeat) as rt:
        w = Worker(rt, concurrency=concurrency, poll_s=poll, on_result=report)
        w.install_signal_handlers()
        if not json_out:
            out.print(
                plain(
                    f"worker {rt.owner} on {display_url(rt.settings.database_url)} "
                    f"(concurrency {concurrency})"
                )
            )
        stats = w.run(until_idle=until_idle, max_seconds=max_seconds)
    if json_out:
        sys.stdout.write(json.dumps({"stats": stats}, default=json_default) + "\n")
        return
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(stats.outcomes.items())) or "none"
    out.print(
        plain(
            f"worker stopped: {stats.runs} run(s) in {stats.executed} execution(s); finished "
            f"{stats.finished} ({outcomes}), left waiting {stats.waiting}, errors {stats.errors}"
        )
    )
    if stats.errors:
        raise typer.Exit(EXIT_ERROR)


def register(app: typer.Typer) -> None:
    """Add ``start``, ``resume`` and ``worker`` to ``app``."""
    app.command()(start)
    app.command()(resume)
    app.command()(worker)
