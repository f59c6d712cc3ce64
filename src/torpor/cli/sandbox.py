"""``torpor sandbox doctor``: what this host offers agent code a VM boundary with, one fact a
line (QEMU, KVM and why not, the accelerator, the image, the isolation torpor will use);
exit 1 when no VM boundary can be had. ``torpor sandbox build``: build (or verify) the guest
image in the cache (:mod:`torpor.sandbox.image`)."""

from __future__ import annotations

from typing import Annotated

import typer

from .render import console, emit_json, plain
from .root import JsonFlag

sandbox_app = typer.Typer(
    name="sandbox",
    help="The microVM sandbox for agent code: doctor, build.\n\nExample: torpor sandbox doctor",
    no_args_is_help=True,
)


@sandbox_app.command("doctor")
def doctor(json_out: JsonFlag = False) -> None:
    """Say what this host has and lacks for a VM boundary, one fact a line; exit 1 when
    there is none (torpor then refuses to run agent code, unless told isolation='process').

    Example: torpor sandbox doctor --json"""
    from ..sandbox.host import facts

    found = facts()
    if json_out:
        emit_json([{"what": f.what, "ok": f.ok, "detail": f.detail} for f in found])
    else:
        out = console()
        for f in found:
            out.print(plain(f.line(), "" if f.ok else "yellow"))
    if not found[-1].ok:
        raise typer.Exit(1)


@sandbox_app.command("build")
def build(
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if cached.")] = False,
) -> None:
    """Build the guest image from Debian's packages (kernel, busybox) into the cache, or
    verify the cached one; print its folder and files' sha256.

    Example: torpor sandbox build"""
    from ..sandbox.image import build_image

    image = build_image(force=force)
    out = console()
    out.print(plain(f"image {image.root}"))
    files = image.manifest.get("files", {})
    for name, digest in sorted(files.items()) if isinstance(files, dict) else []:
        out.print(plain(f"  {name:<12} sha256 {digest}"))


def register(app: typer.Typer) -> None:
    """Add ``torpor sandbox`` to the app."""
    app.add_typer(sandbox_app)
