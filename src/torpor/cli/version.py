"""The line ``torpor --version`` prints, apart from the app so that :func:`torpor.cli.main` can
answer ``--version`` without importing Typer, Rich or the commands. (The ``torpor`` package
itself, and the engine it imports, load before any of its modules: Python imports a package
first.)"""

from __future__ import annotations

from .. import __version__


def version_line() -> str:
    """``torpor X.Y.Z`` and a newline."""
    return f"torpor {__version__}\n"
