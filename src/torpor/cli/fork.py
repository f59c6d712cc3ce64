"""``torpor fork``: a new run whose history is another's up to a step or a seq, then runs on
without repeating the origin's effects (issue 45; :mod:`torpor.forks` says what a fork is)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ..client import Client
from ..forks import KEEP, check_point
from ..runtime import RunResult
from .context import open_runtime, parse_json
from .exits import EXIT_OUTCOME
from .render import console, emit_json, fields, plain, short
from .root import Follow, JsonFlag, Person, RunId


def fork(
    ctx: typer.Context,
    run_id: RunId,
    at: Annotated[
        str,
        typer.Option(
            "--at",
            metavar="STEP|SEQ",
            help="Copy the history up to seq SEQ, or up to just before step STEP first started.",
            show_default=False,
        ),
    ],
    new_run_id: Annotated[
        str | None,
        typer.Option("--run-id", metavar="ID", help="The fork's run id (default: generated)."),
    ] = None,
    input_json: Annotated[
        str | None,
        typer.Option(
            "--input", "-i", metavar="JSON", help="The fork's input (default: the origin's)."
        ),
    ] = None,
    imports: Annotated[
        list[str] | None,
        typer.Option(
            "--import",
            metavar="MODULE",
            help="The code the fork runs on: import MODULE (repeatable; the last one is recorded "
            "as the fork's module, imported when it resumes).",
        ),
    ] = None,
    workflow: Annotated[
        str | None,
        typer.Option(
            "--workflow",
            metavar="NAME",
            help="Run the fork as this registered workflow (default: the origin's name, from "
            "the last --import when given).",
        ),
    ] = None,
    redo_effects: Annotated[
        bool,
        typer.Option(
            "--redo-effects",
            help="Perform again, under new keys, effects the origin performed after the point "
            "(recorded); without it they are refused.",
        ),
    ] = False,
    no_execute: Annotated[
        bool, typer.Option("--no-execute", help="Only create the fork; execute it later.")
    ] = False,
    by: Person = "user",
    reason: Annotated[str, typer.Option("--reason", metavar="TEXT", help="Why (recorded).")] = "",
    follow: Follow = True,
    json_out: JsonFlag = False,
) -> None:
    """Fork RUN_ID at a step or a seq: a new run whose history is RUN_ID's up to there, then
    runs on. Effects before the point are settled facts, never performed again; an effect after
    it runs under a key derived from the fork, and one the origin performed after the point is
    refused unless --redo-effects. Approvals of the copied history are raised again for the
    fork. With --import MODULE the fork runs on that module's code (it must replay the copied
    steps). Executed in this process unless --no-execute.

    Example: torpor fork deploy-42 --at push --import myflows_fixed --run-id deploy-42b
    """
    data = KEEP if input_json is None else parse_json("--input", input_json)
    with open_runtime(ctx, imports) as rt:
        client = Client(rt.store, settings=rt.settings)
        # The point is checked first (a seq past the history is the mistake to report),
        # then the code it runs on is found, both before the fork is made.
        check_point(rt.store, run_id, at)
        if not no_execute:
            from ..workflows import get_workflow

            origin = client.state(run_id)
            get_workflow(workflow or origin.workflow, "" if imports else origin.module)
        made = client.fork(
            run_id,
            at,
            fork_id=new_run_id,
            input=data,
            workflow=workflow,
            module=imports[-1] if imports else None,
            redo_effects=redo_effects,
            by=by,
            reason=reason,
        )
        if no_execute:
            rec = client.get(made.run_id)
            res = RunResult(made.run_id, rec.status, rec.outcome)
        else:
            res = rt.resume(made.run_id, follow_timers=follow)
    if json_out:
        emit_json({"fork": made, "result": res})
    else:
        _print(made.run_id, run_id, made.at_seq, made.created, made.renewed, res)
    if res.outcome not in (None, "succeeded", "succeeded_with_warnings"):
        raise typer.Exit(EXIT_OUTCOME)


def _print(
    fid: str, origin: str, seq: int, created: bool, renewed: list[str], res: RunResult
) -> None:
    out = console()
    status = res.status + (f" ({res.wait_kind})" if res.wait_kind else "")
    pairs: list[tuple[str, Any]] = [
        ("run", fid),
        ("forked from", f"{origin} at seq {seq}" + ("" if created else " (existed already)")),
        ("status", status),
    ]
    if renewed:
        pairs.append(("raised again", ", ".join(renewed)))
    if res.outcome:
        pairs.append(("outcome", res.outcome))
    if res.reason:
        pairs.append(("reason", res.reason))
    if res.result is not None:
        pairs.append(("result", short(res.result, 300)))
    fields(out, pairs)
    if res.wait_kind == "approval":
        hint = (
            f"`torpor show {fid}`, then `torpor approve {fid} --as NAME` and `torpor resume {fid}`"
        )
    elif res.status != "finished":
        hint = f"`torpor resume {fid}`"
    else:
        return
    out.print(plain(f"next: {hint}", style="cyan"))


def register(app: typer.Typer) -> None:
    """Add ``fork`` to ``app``."""
    app.command()(fork)
