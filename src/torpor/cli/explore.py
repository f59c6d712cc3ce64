"""The ``explore`` command: crash a workflow at every boundary and check what survives
(the work is done by :mod:`torpor.testing.explorer`, imported only when the command runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .context import parse_json
from .root import JsonFlag


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
    from ..testing.explorer import cli_explore

    code = cli_explore(
        target,
        parse_json("--input", input_json),
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


def register(app: typer.Typer) -> None:
    """Add ``explore`` to ``app``."""
    app.command()(explore)
