"""The ``artifacts`` command: list a run's artifacts and offloaded values, or print one's
bytes."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from ..blobs import OffloadedValue
from ..errors import BadInputError, TorporError
from ..history import ArtifactRef
from ..report.hidden import HIDDEN_NOTE, escape_hidden, hidden_chars
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
    escaped: Annotated[
        bool,
        typer.Option(
            "--escaped",
            help="Print invisible and bidi characters as <U+XXXX> (the default on a terminal).",
        ),
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """List a run's artifacts, or print one (by name or sha256) to stdout or --out FILE.

    Content with invisible or bidirectional-text characters (U+202E, U+2066, zero-width…) is
    flagged in the list and when printed, and printed escaped on a terminal (or with --escaped):
    the bytes would read differently from what they are.

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
            flagged = []
            if refs:
                table = new_table("NAME", "VERSION", "SHA256", "SIZE", "MEDIA TYPE", "STEP")
                table.columns[2].overflow = "fold"
                for a in refs:
                    add_row(table, a.name, a.version, a.sha256, a.size, a.media_type, a.step_id)
                    try:
                        found = _hidden(client.artifact_bytes(a.sha256)[:SCAN_BYTES], a.name)
                    except TorporError as exc:  # altered or missing: the list still shows
                        console(stderr=True).print(plain(f"warning: {a.name} v{a.version}: {exc}"))
                        continue
                    if found:
                        flagged.append((a, found))
                console().print(table)
                for a, found in flagged:
                    console().print(plain(_flag(run_id, a, found), style="yellow"))
            if values:
                console().print(offloaded_table(values, title="Offloaded values"))
            return
        art = client.find_artifact(run_id, ref)
        if json_out:
            emit_json(art)
            return
        data = client.artifact_bytes(art.sha256)
    found = _hidden(data, art.name)
    if found:
        console(stderr=True).print(plain(_flag(run_id, art, found), style="yellow"))
    if out_file is None:
        if found and (escaped or sys.stdout.isatty()):
            sys.stdout.write(escape_hidden(data.decode("utf-8", "replace")))
        else:
            sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    try:
        out_file.write_bytes(data)
    except OSError as exc:
        raise BadInputError(f"cannot write {str(out_file)!r}: {exc.strerror}") from None
    what = f"{art.name} v{art.version} ({len(data)} bytes, sha256:{art.sha256})"
    console().print(plain(f"wrote {what} to {out_file}"))


#: How much of each artifact the list reads to flag hidden characters.
SCAN_BYTES = 1024 * 1024


def _hidden(data: bytes, name: str) -> list[str]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return hidden_chars(name)  # binary: only its name can mislead
    return sorted(set(hidden_chars(text)) | set(hidden_chars(name)))


def _flag(run_id: str, art: ArtifactRef, found: list[str]) -> str:
    return (
        f"warning: {art.name} v{art.version} (sha256:{art.sha256[:12]}): {HIDDEN_NOTE} "
        f"({', '.join(found)}); `torpor artifacts {run_id} {art.sha256[:12]} --escaped` shows "
        "them as <U+XXXX>"
    )


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
