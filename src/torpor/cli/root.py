"""The root of the ``torpor`` command: the Typer ``app`` every command registers on, the
global options (``--db``, ``--artifacts``, ``--import``, ``--version``) and the option types the
commands share.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
from typing import Annotated

import typer

from ..config import Settings
from .version import version_line

app = typer.Typer(
    name="torpor",
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def reflow(doc: str) -> str:
    """A command's docstring as ``--help`` text: the lines of each paragraph joined, so Rich
    wraps them to the terminal's width instead of breaking them where the source did (ragged
    help, issue 36). A line that starts with ``-``, ``*`` or spaces (a list, an example) keeps
    its own line."""
    paragraphs = []
    for para in inspect.cleandoc(doc).split("\n\n"):
        text = ""
        for line in para.splitlines():
            if not text:
                text = line.strip()
            elif line.startswith(("-", "*", " ")):
                text += "\n" + line.rstrip()
            else:
                text += " " + line.strip()
        paragraphs.append(text)
    return "\n\n".join(paragraphs)


def reflow_help(typer_app: typer.Typer) -> None:
    """Give every command of ``typer_app`` (its groups' too) its docstring reflowed as help
    (:func:`reflow`), unless it was given help text of its own."""
    for cmd in typer_app.registered_commands:
        if cmd.help is None and cmd.callback is not None and cmd.callback.__doc__:
            cmd.help = reflow(cmd.callback.__doc__)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            reflow_help(group.typer_instance)


@dataclasses.dataclass
class Options:
    """Global options, shared by every command through the Typer context."""

    db: str | None = None
    artifacts: str | None = None
    imports: list[str] = dataclasses.field(default_factory=list)

    def settings(self) -> Settings:
        return Settings.from_env(self.db, self.artifacts)


def options(ctx: typer.Context) -> Options:
    """The global options of this invocation (defaults when called without the root)."""
    obj = ctx.find_root().obj
    return obj if isinstance(obj, Options) else Options()


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

# --------------------------------------------------------------------------- global options


def _env_imports() -> list[str]:
    return [m.strip() for m in os.environ.get("TORPOR_IMPORT", "").split(",") if m.strip()]


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(version_line())
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
