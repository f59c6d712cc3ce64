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
    import os

    from ..errors import ConfigError
    from ..testing.explorer import explore as run_explorer
    from ..testing.report import KINDS, Target
    from .render import emit_json

    module, sep, workflow = target.partition(":")
    if not sep or not module or not workflow:
        raise ConfigError(f"expected MODULE:WORKFLOW, not {target!r}")
    kind_list = [k.strip() for k in kinds.split(",") if k.strip()]
    unknown = [k for k in kind_list if k not in KINDS]
    if unknown:
        raise ConfigError(f"unknown fault kind(s) {unknown}; known: {', '.join(KINDS)}")
    report = run_explorer(
        Target(
            module=module,
            workflow=workflow,
            input=parse_json("--input", input_json),
            paths=[os.getcwd()],
            ledger=ledger,
            ignore_result_keys=[k for k in ignore_result_keys.split(",") if k],
        ),
        sample=sample,
        seed=seed,
        kinds=kind_list,
        cases=case or None,
        jobs=jobs,
        workdir=workdir,
        progress=None if json_out else (lambda line: print(line, flush=True)),
    )
    if json_out:
        emit_json(
            {
                "target": report.target,
                "seed": report.seed,
                "boundaries": len(report.boundaries),
                "cases": len(report.cases),
                "by_kind": report.by_kind,
                "kills": report.kills(),
                "seconds": round(report.seconds, 1),
                "violations": [
                    {"case": v.case, "plan": v.plan, "seed": v.seed, "message": v.message}
                    for v in report.violations
                ],
            }
        )
    else:
        print(report.summary())
    if not report.ok:
        raise SystemExit(1)


def register(app: typer.Typer) -> None:
    """Add ``explore`` to ``app``."""
    app.command()(explore)
