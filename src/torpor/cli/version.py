"""The line ``torpor --version`` prints, apart from the app so that :func:`torpor.cli.main` can
answer ``--version`` without importing Typer, Rich, the commands or the engine (``import
torpor`` itself imports nothing else: its public names load on first use)."""

from __future__ import annotations

from .. import __version__


def version_line() -> str:
    """``torpor X.Y.Z`` and a newline."""
    return f"torpor {__version__}\n"
