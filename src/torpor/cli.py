"""The ``torpor`` command line: a thin Typer + Rich adapter over :class:`~torpor.Runtime` and
:class:`~torpor.Client`.

Every read command prints a human table by default and JSON with ``--json``. Every expected
error — a torpor error, bad JSON input, a usage mistake — is one line ``error: …`` on stderr and
a non-zero exit code, never a traceback. They are caught in one place, :func:`main`.

Exit codes: 0 done (``start``/``resume``: the run succeeded, possibly with warnings, or waits);
1 torpor refused or failed (unknown run, finished run, store error …); 2 bad usage or input
(malformed JSON, missing option); 3 ``start``/``resume`` ended the run with another outcome
(failed, blocked, unresolved, stopped_safe, cancelled); 75 the run is leased by another live
process (retry later, ``EX_TEMPFAIL``); 130 interrupted.

The store is ``--db URL`` or ``$TORPOR_DATABASE_URL`` or ``sqlite:///$TORPOR_HOME/torpor.db``;
workflows are referenced by their registered name, their modules imported with ``--import``
(repeatable) or ``$TORPOR_IMPORT`` (comma-separated).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import BaseModel, ValidationError
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import __version__
from .client import Client
from .config import Settings
from .errors import BadInputError, LeaseHeldError, TorporError
from .history import Event, Outcome, RunStatus
from .owners import owner_is_dead
from .runtime import RunResult, Runtime
from .workflows import import_modules

app = typer.Typer(
    name="torpor",
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_OUTCOME = 3
EXIT_LEASED = 75
_GOOD_OUTCOMES = frozenset({None, "succeeded", "succeeded_with_warnings"})
EXIT_INTERRUPTED = 130


@dataclasses.dataclass
class Options:
    """Global options, shared by every command through the Typer context."""

    db: str | None = None
    artifacts: str | None = None
    imports: list[str] = dataclasses.field(default_factory=list)

    def settings(self) -> Settings:
        return Settings.from_env(self.db, self.artifacts)


# --------------------------------------------------------------------------- option types

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
Imports = Annotated[
    list[str] | None,
    typer.Option(
        "--import",
        metavar="MODULE",
        help="Import MODULE first so its workflows register (repeatable).",
    ),
]
Follow = Annotated[
    bool,
    typer.Option(
        "--follow/--no-follow",
        help="While the run sleeps on a timer, stay and continue it when due.",
    ),
]
RunId = Annotated[str, typer.Argument(metavar="RUN_ID", help="The run id.", show_default=False)]
Approver = Annotated[
    str, typer.Option("--as", metavar="NAME", help="Who decides (recorded and signed).")
]
Person = Annotated[str, typer.Option("--as", metavar="NAME", help="Who does this (recorded).")]


# --------------------------------------------------------------------------- helpers


def _opts(ctx: typer.Context) -> Options:
    obj = ctx.find_root().obj
    return obj if isinstance(obj, Options) else Options()


def _console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    # Not a terminal (a pipe, a log, a test): do not wrap tables at 80 columns.
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 160
    return Console(file=stream, highlight=False, width=width, soft_wrap=False)


def _json_default(o: Any) -> Any:
    if isinstance(o, BaseModel):
        return o.model_dump(mode="json")
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    return str(o)


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=_json_default, ensure_ascii=False) + "\n")


def _parse_json(option: str, text: str | None) -> Any:
    """JSON from an option value; ``@FILE`` reads the file."""
    if text is None:
        return None
    source = text
    if text.startswith("@"):
        try:
            source = Path(text[1:]).read_text()
        except OSError as exc:
            raise BadInputError(f"{option}: cannot read {text[1:]!r}: {exc.strerror}") from None
    try:
        return json.loads(source)
    except json.JSONDecodeError as exc:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise BadInputError(
            f"{option} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): "
            f"{shown!r}"
        ) from None


def _import(modules: Sequence[str]) -> None:
    """Import workflow modules; the working directory is importable like ``python -m``."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    for m in modules:
        try:
            import_modules([m])
        except ImportError as exc:
            raise BadInputError(f"cannot import module {m!r} (--import): {exc}") from None


def _env_imports() -> list[str]:
    return [m.strip() for m in os.environ.get("TORPOR_IMPORT", "").split(",") if m.strip()]


@contextmanager
def _client(ctx: typer.Context) -> Iterator[Client]:
    client = Client(settings=_opts(ctx).settings())
    try:
        yield client
    finally:
        client.close()


@contextmanager
def _runtime(ctx: typer.Context, imports: list[str] | None, **kw: Any) -> Iterator[Runtime]:
    opts = _opts(ctx)
    _import([*opts.imports, *(imports or [])])
    on_event = _progress_printer() if sys.stderr.isatty() else None
    rt = Runtime(settings=opts.settings(), on_event=on_event, **kw)
    try:
        yield rt
    finally:
        rt.close()


def _resume_cmd(client: Client, run_id: str) -> str:
    """The command that continues ``run_id``: ``--import`` is needed only when the module that
    defines its workflow was not recorded (a script run as ``python file.py``)."""
    try:
        module = client.state(run_id).module
    except TorporError:
        module = ""
    if module and module != "__main__":
        return f"torpor resume {run_id}"
    return f"torpor resume {run_id} --import MODULE (the module that defines its workflow)"


@contextmanager
def _interruptible(run_id: str) -> Iterator[None]:
    """Ctrl-C while executing: say how to continue, exit 130 (the record is intact)."""
    try:
        yield
    except KeyboardInterrupt:
        _fail(
            f"interrupted; run {run_id!r} continues from its last boundary with: "
            f"torpor resume {run_id}",
            EXIT_INTERRUPTED,
        )


def _progress_printer() -> Any:
    err = _console(stderr=True)

    def show(ev: Event) -> None:
        step = f" {ev.step_id}" if ev.step_id else ""
        err.print(Text(f"  {ev.run_id} #{ev.seq} {ev.type}{step}", style="dim"))

    return show


def _when(ms: int | None) -> str:
    """Epoch milliseconds as local time."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _relative(ms: int | None) -> str:
    """Epoch milliseconds as local time with a relative hint (``in 4m``, ``3s ago``)."""
    if ms is None:
        return "-"
    delta = (ms - datetime.now().timestamp() * 1000) / 1000
    span = abs(delta)
    if span < 60:
        rel = f"{span:.0f}s"
    elif span < 3600:
        rel = f"{span / 60:.0f}m"
    elif span < 86400:
        rel = f"{span / 3600:.1f}h"
    else:
        rel = f"{span / 86400:.1f}d"
    return f"{_when(ms)} ({'in ' + rel if delta >= 0 else rel + ' ago'})"


def _short(value: Any, limit: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=_json_default)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _table(*columns: str, title: str | None = None) -> Table:
    table = Table(
        *columns,
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
    )
    return table


def _row(table: Table, *cells: Any) -> None:
    """Add a row of plain text (no Rich markup is interpreted in recorded values)."""
    table.add_row(*(Text("-" if c is None or c == "" else str(c)) for c in cells))


def _fields(console: Console, pairs: Sequence[tuple[str, Any]]) -> None:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for k, v in pairs:
        grid.add_row(Text(k), Text("-" if v is None or v == "" else str(v)))
    console.print(grid)


def _heading(console: Console, text: str) -> None:
    console.print()
    console.print(Text(text, style="bold underline"))


def _print_result(res: RunResult, json_out: bool) -> None:
    if json_out:
        _emit_json(res)
        return
    out = _console()
    status = res.status + (f" ({res.wait_kind})" if res.wait_kind else "")
    pairs: list[tuple[str, Any]] = [("run", res.run_id), ("status", status)]
    if res.outcome:
        pairs.append(("outcome", res.outcome))
    if res.reason:
        pairs.append(("reason", res.reason))
    if res.wake_at_ms is not None:
        pairs.append(("wakes", _relative(res.wake_at_ms)))
    if res.result is not None:
        pairs.append(("result", _short(res.result, 300)))
    _fields(out, pairs)
    hint = _next_hint(res)
    if hint:
        out.print(Text(f"next: {hint}", style="cyan"))


def _next_hint(res: RunResult) -> str:
    rid = res.run_id
    if res.status == RunStatus.WAITING.value:
        if res.wait_kind == "approval":
            return (
                f"review the content hashes with `torpor show {rid}`, then "
                f"`torpor approve {rid} --as NAME --hash PREFIX` (or deny) and "
                f"`torpor resume {rid}`"
            )
        if res.wait_kind == "signal":
            return f"`torpor signal {rid} NAME --payload JSON`, then `torpor resume {rid}`"
        return f"`torpor resume {rid}` once it is due"
    if res.outcome == Outcome.UNRESOLVED.value:
        return f"`torpor show {rid}` says which effect is in doubt and why"
    if res.status != RunStatus.FINISHED.value:
        return f"`torpor resume {rid}`"
    return ""


def _fail(message: str, code: int) -> NoReturn:
    """Print one line on stderr and exit."""
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    sys.stderr.write(f"error: {line}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def _lease_message(exc: LeaseHeldError) -> str:
    return (
        f"run {exc.run_id!r} is being executed by {exc.owner} until "
        f"{_relative(exc.expires_at_ms)}; retry after that (or when it finishes)"
    )


def _error_message(exc: BaseException) -> str:
    if isinstance(exc, LeaseHeldError):
        return _lease_message(exc)
    if isinstance(exc, ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()
        )
        return f"invalid {exc.title}: {problems}"
    return str(exc) or type(exc).__name__


# --------------------------------------------------------------------------- root


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"torpor {__version__}\n")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            metavar="URL",
            help="Store URL. Default: $TORPOR_DATABASE_URL, else "
            "sqlite:///$TORPOR_HOME/torpor.db (TORPOR_HOME defaults to ./.torpor).",
        ),
    ] = None,
    artifacts: Annotated[
        str | None,
        typer.Option(
            "--artifacts",
            metavar="URL",
            help="Artifact store (folder or fsspec URL). Default: $TORPOR_ARTIFACTS_URL, else "
            "$TORPOR_HOME/artifacts.",
        ),
    ] = None,
    imports: Annotated[
        list[str] | None,
        typer.Option(
            "--import",
            metavar="MODULE",
            help="Import MODULE before start/resume so its workflows register (repeatable; "
            "also $TORPOR_IMPORT, comma-separated).",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """torpor: durable runs for long-running AI agents. Start and resume runs, inspect them,
    and steer them (approve, signal, cancel, resolve). Read commands take --json.

    Example: torpor --import myflows start deploy --input '{"env": "prod"}'
    """
    ctx.obj = Options(db=db, artifacts=artifacts, imports=[*_env_imports(), *(imports or [])])


# --------------------------------------------------------------------------- execute


@app.command()
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
            help="Run id; starting an existing id rejoins that run (idempotent).",
        ),
    ] = None,
    imports: Imports = None,
    no_execute: Annotated[
        bool, typer.Option("--no-execute", help="Only create the run; execute it later.")
    ] = False,
    follow: Follow = True,
    json_out: JsonFlag = False,
) -> None:
    """Start a run of WORKFLOW and execute it in this process until it finishes or waits.

    Example: torpor start deploy --import myflows --input '{"env": "prod"}' --run-id deploy-42
    """
    data = _parse_json("--input", input_json)
    with _runtime(ctx, imports) as rt:
        rid = rt.start(workflow, data, run_id=run_id)
        if no_execute:
            rec = Client(rt.store).get(rid)
            res = RunResult(rid, rec.status, rec.outcome)
        else:
            with _interruptible(rid):
                res = rt.resume(rid, follow_timers=follow)
    _print_result(res, json_out)
    if res.outcome not in _GOOD_OUTCOMES:
        raise typer.Exit(EXIT_OUTCOME)


@app.command()
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
    json_out: JsonFlag = False,
) -> None:
    """Resume RUN_ID (or --all runnable runs) from the last recorded boundary.

    Example: torpor resume deploy-42 --import myflows
    """
    if (run_id is None) == (not all_runs):
        raise BadInputError("give either a RUN_ID or --all")
    with _runtime(ctx, imports) as rt:
        if run_id is not None:
            with _interruptible(run_id):
                res = rt.resume(run_id, follow_timers=follow)
            _print_result(res, json_out)
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
                failures.append((rid, _error_message(exc)))
    if json_out:
        _emit_json(
            {
                "resumed": results,
                "errors": [{"run_id": r, "error": m} for r, m in failures],
            }
        )
    else:
        out = _console()
        if not results and not failures:
            out.print("no runnable runs")
        table = _table("RUN", "STATUS", "OUTCOME", "REASON")
        for res in results:
            status = res.status + (f" ({res.wait_kind})" if res.wait_kind else "")
            _row(table, res.run_id, status, res.outcome, _short(res.reason, 80))
        if results:
            out.print(table)
    for rid, msg in failures:
        line = " ".join(msg.split())
        sys.stderr.write(f"error: {line}\n" if rid in line else f"error: run {rid!r}: {line}\n")
    if failures:
        raise typer.Exit(EXIT_ERROR)


@app.command()
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
            help="Lease renewal interval (default a third of --lease-ttl; at most half).",
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
    from .worker import Worker

    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    out = _console()

    def report(res: RunResult) -> None:
        if json_out:
            sys.stdout.write(json.dumps(res, default=_json_default) + "\n")
            sys.stdout.flush()
            return
        status = res.outcome or res.status + (f" ({res.wait_kind})" if res.wait_kind else "")
        reason = f": {_short(res.reason, 120)}" if res.reason else ""
        now = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S")
        out.print(Text(f"{now} {res.run_id} {status}{reason}"))

    with _runtime(ctx, imports, lease_ttl_s=lease_ttl, heartbeat_s=heartbeat) as rt:
        w = Worker(rt, concurrency=concurrency, poll_s=poll, on_result=report)
        w.install_signal_handlers()
        if not json_out:
            out.print(
                Text(f"worker {rt.owner} on {rt.settings.database_url} (concurrency {concurrency})")
            )
        stats = w.run(until_idle=until_idle, max_seconds=max_seconds)
    if json_out:
        sys.stdout.write(json.dumps({"stats": stats}, default=_json_default) + "\n")
        return
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(stats.outcomes.items())) or "none"
    out.print(
        Text(
            f"worker stopped: executed {stats.executed}, finished {stats.finished} ({outcomes}), "
            f"waiting {stats.waiting}, errors {stats.errors}"
        )
    )
    if stats.errors:
        raise typer.Exit(EXIT_ERROR)


# --------------------------------------------------------------------------- read


@app.command("ls")
def list_runs(
    ctx: typer.Context,
    status: Annotated[
        RunStatus | None, typer.Option("--status", help="Only runs with this status.")
    ] = None,
    outcome: Annotated[
        Outcome | None, typer.Option("--outcome", help="Only finished runs with this outcome.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many runs.")] = 50,
    json_out: JsonFlag = False,
) -> None:
    """List runs, newest first.

    Example: torpor ls --outcome unresolved
    """
    with _client(ctx) as client:
        runs = client.runs(
            status=status.value if status else None,
            outcome=outcome.value if outcome else None,
            limit=limit,
        )
        now = client.store.now_ms()
    if json_out:
        _emit_json(runs)
        return
    out = _console()
    if not runs:
        out.print("no runs")
        return
    table = _table("RUN", "WORKFLOW", "VERSION", "STATUS", "OUTCOME", "UPDATED", "WAKE", "EVENTS")
    for r in runs:
        status_text = r.status
        if r.lease_owner and r.lease_expires_at_ms > now:
            # A holder on this machine proven dead (kill -9) is taken over at once by resume.
            status_text += " (holder dead)" if owner_is_dead(r.lease_owner) else " (leased)"
        _row(
            table,
            r.run_id,
            r.workflow,
            r.version,
            status_text,
            r.outcome,
            _when(r.updated_at_ms),
            _relative(r.wake_at_ms) if r.status == RunStatus.WAITING.value else None,
            r.last_seq,
        )
    out.print(table)


@app.command()
def show(ctx: typer.Context, run_id: RunId, json_out: JsonFlag = False) -> None:
    """Show a run: checkpoint answers, steps, effects, artifacts, waits, approvals, outcome.

    The four answers of the latest checkpoint (what it is establishing, the evidence, effects
    that may have happened, what permits the next transition); steps with status and attempts;
    effects with status and, when in doubt, why; artifacts with sha256; the open wait; approvals
    with the content hashes they bind; the outcome and its reason.

    Example: torpor show deploy-42
    """
    with _client(ctx) as client:
        rec = client.get(run_id)
        state = client.state(run_id)
        answers = client.answers(run_id)
        steps = client.steps(run_id)
        effects = client.effects(run_id)
        artifacts = client.artifacts(run_id)
        inbox = client.inbox(run_id)
    pending = {k: v.hashes for k, v in state.approvals.items() if v.status == "requested"}
    if json_out:
        _emit_json(
            {
                "run": rec,
                "status": state.status.value,
                "outcome": state.outcome.value if state.outcome else None,
                "reason": state.outcome_reason,
                "result": state.result,
                "answers": answers,
                "steps": steps,
                "effects": effects,
                "artifacts": artifacts,
                "wait": state.wait,
                "approvals": state.approvals,
                "pending_approvals": pending,
                "inbox": inbox,
                "warnings": state.warnings,
                "cancel_requested": state.cancel_requested,
                "plan_version": state.plan_version,
                "plan": state.plan,
                "usage": {**state.usage.model_dump(), "tokens": state.usage.tokens},
                "budget": state.budget,
            }
        )
        return

    out = _console()
    status = state.status.value + (f" ({state.wait.kind})" if state.wait else "")
    pairs: list[tuple[str, Any]] = [
        ("run", run_id),
        ("workflow", f"{rec.workflow} (version {rec.version})"),
        ("status", status),
        ("outcome", state.outcome.value if state.outcome else None),
    ]
    if state.outcome_reason:
        pairs.append(("reason", state.outcome_reason))
    if state.result is not None:
        pairs.append(("result", _short(state.result, 300)))
    if state.goal:
        pairs.append(("goal", state.goal))
    pairs.append(("created", _when(rec.created_at_ms)))
    pairs.append(("updated", _when(rec.updated_at_ms)))
    pairs.append(("events", f"{rec.last_seq} (latest checkpoint at seq {rec.checkpoint_seq})"))
    if state.cancel_requested:
        pairs.append(("cancel", "requested"))
    if state.warnings:
        pairs.append(("warnings", "; ".join(state.warnings)))
    _fields(out, pairs)

    _heading(out, "Checkpoint")
    ev = answers.get("evidence", {})
    verifs = ", ".join(
        f"{k}: {'passed' if v.get('passed') else 'FAILED'}"
        for k, v in ev.get("verifications", {}).items()
    )
    arts = ", ".join(f"{k} {v}" for k, v in ev.get("artifacts", {}).items())
    evidence = "; ".join(x for x in (verifs, arts) if x) or "none yet"
    effects_now = ", ".join(f"{k}: {v}" for k, v in answers.get("effects", {}).items())
    _fields(
        out,
        [
            ("establishing", answers.get("establishing") or "-"),
            ("evidence", evidence),
            ("effects", effects_now or "none that may have happened"),
            ("next", answers.get("next")),
        ],
    )

    u, b = state.usage, state.budget
    if state.plan_version or u.model_calls or any(v is not None for v in b.model_dump().values()):
        _heading(out, "Agent")  # plan, usage and budget (issue 4)
        counts: dict[str, int] = {}
        for call in state.plan.values():
            counts[call.status] = counts.get(call.status, 0) + 1

        def of(used: Any, limit: Any) -> str:
            return f"{used}" + (f" of {limit}" if limit is not None else "")

        _fields(
            out,
            [
                (
                    "plan",
                    f"v{state.plan_version}: "
                    + (", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no steps"),
                ),
                ("tokens", of(u.tokens, b.tokens)),
                (
                    "cost",
                    of(f"${u.cost_usd:.4f}", b.cost_usd)
                    + (f" (+{u.cost_unknown} call(s) of unknown cost)" if u.cost_unknown else ""),
                ),
                ("steps", of(f"{u.steps} ({u.model_calls} model, {u.tool_calls} tool)", b.steps)),
                ("wall-clock limit", f"{b.wall_clock_s:g} s" if b.wall_clock_s else "none"),
            ],
        )

    if steps:
        table = _table("STEP", "POLICY", "STATUS", "ATTEMPTS", "PURPOSE", title="Steps")
        for s in steps:
            _row(table, s.step_id, s.policy, s.status, s.attempts, s.purpose)
        out.print()
        out.print(table)

    if effects:
        table = _table("KEY", "STEP", "OPERATION", "STATUS", "ATTEMPT", "REASON", title="Effects")
        for e in effects:
            _row(table, e.key, e.step_id, e.operation, e.status, e.attempt, e.reason)
        out.print()
        out.print(table)
        for e in effects:
            if e.status == "unknown":
                out.print(
                    Text(
                        f"effect {e.key} is in doubt: {e.reason or 'outcome unknown'}. "
                        f"A person settles it: torpor resolve {run_id} {e.key} "
                        "(--applied [--result JSON] | --absent) --as NAME",
                        style="yellow",
                    )
                )
            elif e.status == "intended":
                out.print(
                    Text(
                        f"effect {e.key} was intended but never observed; resuming reconciles "
                        f"it: torpor resume {run_id}",
                        style="yellow",
                    )
                )

    if artifacts:
        table = _table("NAME", "VERSION", "SHA256", "SIZE", "MEDIA TYPE", title="Artifacts")
        table.columns[2].overflow = "fold"
        for a in artifacts:
            _row(table, a.name, a.version, a.sha256, a.size, a.media_type)
        out.print()
        out.print(table)

    if state.wait is not None:
        w = state.wait
        _heading(out, "Waiting")
        _fields(
            out,
            [
                ("kind", w.kind),
                ("name", w.name),
                ("reason", w.reason),
                ("deadline", _relative(w.deadline_ms) if w.deadline_ms else "none"),
            ],
        )

    if state.approvals:
        _heading(out, "Approvals")
        decided = {m.body.get("approval_id") for m in inbox if m.kind == "decision"}
        for aid, info in state.approvals.items():
            line = f"{aid}  {info.status}"
            if info.approver:
                line += f" by {info.approver} at {_when(info.decided_at_ms)}"
            if aid in decided and info.status == "requested":
                line += " (a decision is in the inbox; it applies on resume)"
            out.print(Text(line, style="bold" if aid in pending else ""))
            for h in info.hashes:
                out.print(Text(f"  sha256:{h}"))
            if aid in pending and aid not in decided:
                out.print(
                    Text(
                        f"  decide: torpor approve {run_id} {aid} --as NAME "
                        f"--hash {info.hashes[0][:12]}"
                        f"   (or: torpor deny {run_id} {aid} --as NAME)",
                        style="cyan",
                    )
                )

    if inbox:
        _heading(out, "Inbox (applied when the run resumes)")
        table = _table("MESSAGE", "KIND", "AT", "BODY")
        for m in inbox:
            _row(table, m.message_id, m.kind, _when(m.at_ms), _short(m.body, 80))
        out.print(table)


@app.command()
def events(
    ctx: typer.Context,
    run_id: RunId,
    after: Annotated[
        int, typer.Option("--after", metavar="SEQ", min=0, help="Only events after SEQ.")
    ] = 0,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many events.")] = 1000,
    json_out: JsonFlag = False,
) -> None:
    """Print the run's history: its events in order.

    Example: torpor events deploy-42 --after 10 --limit 20
    """
    with _client(ctx) as client:
        evs = client.events(run_id, after_seq=after, limit=limit)
    if json_out:
        _emit_json(
            [
                {
                    "run_id": e.run_id,
                    "seq": e.seq,
                    "type": e.type,
                    "at_ms": e.at_ms,
                    "epoch": e.epoch,
                    "payload": e.payload.model_dump(mode="json"),
                }
                for e in evs
            ]
        )
        return
    out = _console()
    if not evs:
        out.print(f"no events after seq {after}")
        return
    table = _table("SEQ", "AT", "EPOCH", "TYPE", "STEP", "DETAIL")
    for column in table.columns[:-1]:
        column.no_wrap = True  # one line per event: only the detail shrinks, with an ellipsis
    for e in evs:
        detail = e.payload.model_dump(mode="json", exclude={"step_id"})
        table.add_row(
            str(e.seq),
            _when(e.at_ms),
            str(e.epoch),
            e.type,
            Text(e.step_id or "-"),
            Text(_short(detail, 90), no_wrap=True, overflow="ellipsis"),
        )
    out.print(table)
    if len(evs) == limit:
        out.print(Text(f"more: torpor events {run_id} --after {evs[-1].seq}", style="cyan"))


# --------------------------------------------------------------------------- approvals


def _decide(
    ctx: typer.Context,
    decision: str,
    run_id: str,
    approval_id: str | None,
    approver: str,
    expect_hash: str | None,
    comment: str,
    json_out: bool,
) -> None:
    prefix = expect_hash.strip().lower().removeprefix("sha256:") if expect_hash else None
    if expect_hash is not None and not prefix:
        raise BadInputError("--hash needs a prefix of the sha256 you reviewed")
    with _client(ctx) as client:
        aid, hashes = client.decide(
            run_id, approval_id, decision, approver, expect_hash=prefix, comment=comment
        )
        resume = _resume_cmd(client, run_id)
    verb = "approved" if decision == "approve" else "denied"
    if json_out:
        _emit_json(
            {
                "run_id": run_id,
                "approval_id": aid,
                "decision": decision,
                "approver": approver,
                "hashes": hashes,
            }
        )
        return
    out = _console()
    out.print(Text(f"{verb} {aid} of run {run_id} as {approver}; the decision binds:"))
    for h in hashes:
        out.print(Text(f"  sha256:{h}"))
    out.print(Text(f"it applies when the run resumes: {resume}", style="cyan"))


HashOpt = Annotated[
    str | None,
    typer.Option(
        "--hash",
        metavar="PREFIX",
        help="Refuse unless the approval binds content whose sha256 starts with PREFIX "
        "(what you reviewed).",
    ),
]
CommentOpt = Annotated[str, typer.Option("--comment", help="A note recorded with the decision.")]
ApprovalIdOpt = Annotated[
    str | None,
    typer.Argument(
        metavar="[APPROVAL_ID]",
        help="The approval id; may be omitted when exactly one is pending.",
        show_default=False,
    ),
]


@app.command()
def approve(
    ctx: typer.Context,
    run_id: RunId,
    approver: Approver,
    approval_id: ApprovalIdOpt = None,
    expect_hash: HashOpt = None,
    comment: CommentOpt = "",
    json_out: JsonFlag = False,
) -> None:
    """Approve exactly the content an approval binds; prints the sha256 hashes approved.

    Example: torpor approve deploy-42 --as alice --hash 3f2a9c
    """
    _decide(ctx, "approve", run_id, approval_id, approver, expect_hash, comment, json_out)


@app.command()
def deny(
    ctx: typer.Context,
    run_id: RunId,
    approver: Approver,
    approval_id: ApprovalIdOpt = None,
    expect_hash: HashOpt = None,
    comment: CommentOpt = "",
    json_out: JsonFlag = False,
) -> None:
    """Deny an approval (prints the sha256 hashes denied); the run ends blocked on resume.

    Example: torpor deny deploy-42 --as alice --comment "touches prod config"
    """
    _decide(ctx, "deny", run_id, approval_id, approver, expect_hash, comment, json_out)


@app.command()
def revoke(
    ctx: typer.Context,
    run_id: RunId,
    approval_id: Annotated[
        str, typer.Argument(metavar="APPROVAL_ID", help="The approval id.", show_default=False)
    ],
    by: Person,
    reason: Annotated[str, typer.Option("--reason", help="Why, recorded.")] = "",
    json_out: JsonFlag = False,
) -> None:
    """Revoke an approval before it is consumed (prints the hashes); its effect won't happen.

    Example: torpor revoke deploy-42 ship@3f2a9c01d4e5 --as alice --reason "wrong branch"
    """
    with _client(ctx) as client:
        hashes = client.revoke(run_id, approval_id, by, reason)
        resume = _resume_cmd(client, run_id)
    if json_out:
        _emit_json({"run_id": run_id, "approval_id": approval_id, "by": by, "hashes": hashes})
        return
    out = _console()
    out.print(Text(f"revoked {approval_id} of run {run_id} as {by}; it bound:"))
    for h in hashes:
        out.print(Text(f"  sha256:{h}"))
    out.print(Text(f"it applies when the run resumes: {resume}", style="cyan"))


# --------------------------------------------------------------------------- steering


@app.command()
def signal(
    ctx: typer.Context,
    run_id: RunId,
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="The signal name.", show_default=False)
    ],
    payload: Annotated[
        str | None,
        typer.Option("--payload", "-p", metavar="JSON", help="Signal payload as JSON, or @FILE."),
    ] = None,
    message_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            metavar="MESSAGE_ID",
            help="Deduplication id: a signal sent twice with one id is delivered once.",
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Send signal NAME to a run (it wakes a run waiting for it).

    Example: torpor signal deploy-42 go --payload '{"window": "22:00"}' --id ticket-981
    """
    data = _parse_json("--payload", payload)
    mid = message_id or uuid.uuid4().hex
    with _client(ctx) as client:
        delivered = client.signal(run_id, name, data, message_id=mid)
    if json_out:
        _emit_json({"run_id": run_id, "name": name, "message_id": mid, "delivered": delivered})
        return
    if delivered:
        _console().print(Text(f"signal {name!r} delivered to run {run_id} (message id {mid})"))
    else:
        _console().print(
            Text(f"signal {name!r} with message id {mid} was already delivered; not sent again")
        )


@app.command()
def cancel(
    ctx: typer.Context,
    run_id: RunId,
    reason: Annotated[str, typer.Option("--reason", help="Why, recorded.")] = "",
    by: Annotated[str, typer.Option("--as", metavar="NAME", help="Who cancels.")] = "user",
    json_out: JsonFlag = False,
) -> None:
    """Cancel a run: it ends cancelled at its next boundary (a waiting run when it resumes).

    Example: torpor cancel deploy-42 --reason "superseded by deploy-43"
    """
    with _client(ctx) as client:
        client.cancel(run_id, by=by, reason=reason)
        resume = _resume_cmd(client, run_id)
    if json_out:
        _emit_json({"run_id": run_id, "cancel_requested": True, "by": by, "reason": reason})
        return
    _console().print(Text(f"cancel of run {run_id} requested"))
    _console().print(Text(f"it ends cancelled at its next boundary: {resume}", style="cyan"))


@app.command()
def resolve(
    ctx: typer.Context,
    run_id: RunId,
    key: Annotated[
        str,
        typer.Argument(
            metavar="EFFECT_KEY", help="The effect's idempotency key (see `torpor show`)."
        ),
    ],
    by: Person,
    applied: Annotated[
        bool, typer.Option("--applied", help="The effect happened (give --result if any).")
    ] = False,
    absent: Annotated[
        bool, typer.Option("--absent", help="The effect did not happen: perform it on resume.")
    ] = False,
    result: Annotated[
        str | None,
        typer.Option("--result", metavar="JSON", help="With --applied: its result, as JSON."),
    ] = None,
    reason: Annotated[str, typer.Option("--reason", help="How you know, recorded.")] = "",
    json_out: JsonFlag = False,
) -> None:
    """Settle an effect in doubt (an unresolved run): --applied or --absent, then resume.

    Example: torpor resolve deploy-42 deploy-42/push --applied --result '{"sha": "9f1c"}' --as bob
    """
    if applied == absent:
        raise BadInputError("give exactly one of --applied or --absent")
    if result is not None and not applied:
        raise BadInputError("--result goes with --applied")
    data = _parse_json("--result", result)
    verdict = "applied" if applied else "absent"
    with _client(ctx) as client:
        client.resolve(run_id, key, verdict, by, result=data, reason=reason)
    if json_out:
        _emit_json({"run_id": run_id, "key": key, "verdict": verdict, "by": by})
        return
    _console().print(Text(f"effect {key} of run {run_id} resolved as {verdict} by {by}"))
    _console().print(Text(f"continue the run: torpor resume {run_id}", style="cyan"))


@app.command()
def budget(
    ctx: typer.Context,
    run_id: RunId,
    tokens: Annotated[
        int | None, typer.Option("--tokens", min=1, help="New limit on model tokens.")
    ] = None,
    cost: Annotated[
        float | None, typer.Option("--cost", metavar="USD", help="New limit on model cost.")
    ] = None,
    steps: Annotated[
        int | None,
        typer.Option("--steps", min=1, help="New limit on steps (model calls + tool calls)."),
    ] = None,
    wall_clock: Annotated[
        float | None,
        typer.Option("--wall-clock", metavar="SECONDS", help="New wall-clock limit."),
    ] = None,
    by: Annotated[str, typer.Option("--as", metavar="NAME", help="Who raises it.")] = "user",
    reason: Annotated[str, typer.Option("--reason", help="Why, recorded.")] = "",
    json_out: JsonFlag = False,
) -> None:
    """Raise an agent run's budget and reopen it if it is blocked (then resume it).

    Example: torpor budget triage-7 --tokens 200000 --as alice
    """
    if cost is not None and cost <= 0:
        raise BadInputError("--cost must be positive")
    if wall_clock is not None and wall_clock <= 0:
        raise BadInputError("--wall-clock must be positive")
    with _client(ctx) as client:
        info = client.reopen(
            run_id,
            by,
            reason=reason,
            tokens=tokens,
            cost_usd=cost,
            steps=steps,
            wall_clock_s=wall_clock,
        )
    if json_out:
        _emit_json({"run_id": run_id, "by": by, **info})
        return
    u, lim = info["usage"], info["limits"]
    for k in ("tokens", "cost_usd", "steps", "wall_clock_s"):
        limit = lim.get(k)
        _console().print(
            Text(f"{k:<13} used {u[k]}  limit {limit if limit is not None else 'none'}")
        )
    _console().print(Text(f"continue the run: torpor resume {run_id}", style="cyan"))


# --------------------------------------------------------------------------- artifacts


@app.command()
def artifacts(
    ctx: typer.Context,
    run_id: RunId,
    ref: Annotated[
        str | None,
        typer.Argument(
            metavar="[NAME_OR_SHA]",
            help="Print this artifact's bytes: a name (latest version), NAME@VERSION, or a "
            "sha256 prefix.",
            show_default=False,
        ),
    ] = None,
    out_file: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="FILE", help="Write the bytes to FILE, not stdout."),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """List a run's artifacts, or print one (by name or sha256) to stdout or --out FILE.

    Example: torpor artifacts deploy-42 patch --out patch.diff
    """
    with _client(ctx) as client:
        if ref is None:
            refs = client.artifacts(run_id)
            if json_out:
                _emit_json(refs)
                return
            if not refs:
                _console().print(f"run {run_id} has no artifacts")
                return
            table = _table("NAME", "VERSION", "SHA256", "SIZE", "MEDIA TYPE", "STEP")
            table.columns[2].overflow = "fold"
            for a in refs:
                _row(table, a.name, a.version, a.sha256, a.size, a.media_type, a.step_id)
            _console().print(table)
            return
        art = client.find_artifact(run_id, ref)
        if json_out:
            _emit_json(art)
            return
        data = client.artifact_bytes(art.sha256)
    if out_file is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    try:
        out_file.write_bytes(data)
    except OSError as exc:
        raise BadInputError(f"cannot write {str(out_file)!r}: {exc.strerror}") from None
    what = f"{art.name} v{art.version} ({len(data)} bytes, sha256:{art.sha256})"
    _console().print(Text(f"wrote {what} to {out_file}"))


# --------------------------------------------------------------------------- explore


@app.command()
def explore(
    target: Annotated[
        str, typer.Argument(metavar="MODULE:WORKFLOW", help="Module to import : workflow name.")
    ],
    input_json: Annotated[
        str | None,
        typer.Option(
            "--input",
            "-i",
            metavar="JSON",
            help="Run input (JSON or @FILE); "
            "'{world}' in strings becomes each case's world directory.",
        ),
    ] = None,
    sample: Annotated[
        int | None, typer.Option(help="At most N cases, drawn with --seed (default: all).")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Seed of the sample and the recovery crashes.")
    ] = None,
    ledger: Annotated[
        str | None,
        typer.Option(
            metavar="MODULE:FUNC",
            help="The effects' own ledger: "
            "FUNC(world_dir, run_id) -> {idempotency key: deliveries}.",
        ),
    ] = None,
    kinds: Annotated[str, typer.Option(help="Fault kinds: crash,ack,break.")] = "crash,ack,break",
    case: Annotated[
        list[str] | None, typer.Option(metavar="PLAN", help="Run only this case (repeatable).")
    ] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", help="Cases at once.")] = None,
    ignore_result_keys: Annotated[
        str, typer.Option(help="Comma-separated result keys that may differ between runs.")
    ] = "",
    workdir: Annotated[Path | None, typer.Option(help="Keep the worlds here.")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Crash a workflow at every boundary it crosses (or a seeded sample), resume, and check
    effects, steps, outcome and history against a crash-free run. Exit 1 on a violation.

    Example: torpor explore myapp.flows:nightly --input '{"team": "infra"}' --sample 40 --seed 7
    """
    from .testing.explorer import cli_explore

    code = cli_explore(
        target,
        _parse_json("--input", input_json),
        sample=sample,
        seed=seed,
        ledger=ledger,
        kinds=kinds,
        cases=case,
        jobs=jobs,
        ignore_result_keys=ignore_result_keys,
        workdir=workdir,
        json_out=json_out,
    )
    if code:
        raise SystemExit(code)


# --------------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> None:
    """The ``torpor`` script: run the app inside the one error boundary."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        args = ["--help"]
    try:
        rv = app(args=args, prog_name="torpor", standalone_mode=False)
    except typer.TyperException as exc:  # click usage errors (missing option, bad value, ...)
        usage_ctx = getattr(exc, "ctx", None)
        hint = f" (see '{usage_ctx.command_path} --help')" if usage_ctx is not None else ""
        _fail(exc.format_message() + hint, getattr(exc, "exit_code", EXIT_USAGE))
    except typer.Abort:
        _fail("aborted", EXIT_ERROR)
    except LeaseHeldError as exc:
        _fail(_lease_message(exc), EXIT_LEASED)
    except (BadInputError, ValidationError) as exc:
        _fail(_error_message(exc), EXIT_USAGE)
    except TorporError as exc:
        _fail(_error_message(exc), EXIT_ERROR)
    except KeyboardInterrupt:
        _fail("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:
        # `torpor events X | head`: the reader left; nothing to report.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(EXIT_ERROR) from None
    raise SystemExit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
