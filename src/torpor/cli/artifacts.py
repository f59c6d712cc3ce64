"""The ``artifacts`` command: list a run's artifacts and offloaded values, or print one's
bytes."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from ..blobs import OffloadedValue
from ..errors import BadInputError
from .context import open_client
from .render import add_row, console, emit_json, new_table, plain
from .root import JsonFlag, RunId


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
    with open_client(ctx, read_only=True) as client:
        if ref is None:
            refs = client.artifacts(run_id)
            values = client.offloaded(run_id)
            if json_out:  # the artifacts, then the offloaded values (``kind`` says which)
                emit_json([*refs, *({"kind": "offloaded value", **asdict(v)} for v in values)])
                return
            if not refs and not values:
                console().print(plain(f"run {run_id} has no artifacts and no offloaded values"))
                return
            if refs:
                table = new_table("NAME", "VERSION", "SHA256", "SIZE", "MEDIA TYPE", "STEP")
                table.columns[2].overflow = "fold"
                for a in refs:
                    add_row(table, a.name, a.version, a.sha256, a.size, a.media_type, a.step_id)
                console().print(table)
            if values:
                console().print(offloaded_table(values, title="Offloaded values"))
            return
        art = client.find_artifact(run_id, ref)
        if json_out:
            emit_json(art)
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
    console().print(plain(f"wrote {what} to {out_file}"))


def offloaded_table(values: list[OffloadedValue], title: str | None = None) -> Any:
    """A table of values a run recorded by reference: their sha256 (print one with
    ``torpor artifacts RUN SHA``), size, and the event and step that recorded them."""
    table = new_table("SHA256", "SIZE", "RECORDED IN", "STEP", title=title)
    table.columns[0].overflow = "fold"
    for v in values:
        add_row(table, v.sha256, v.size, f"#{v.seq} {v.type}.{v.field}", v.step_id)
    return table


def register(app: typer.Typer) -> None:
    """Add ``artifacts`` to ``app``."""
    app.command()(artifacts)
