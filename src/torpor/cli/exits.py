"""Exit codes and the one-line error: how the ``torpor`` command stops short.

The codes are described in :mod:`torpor.cli`; :func:`torpor.cli.main` maps exceptions to them.
"""

from __future__ import annotations

import sys
from typing import NoReturn

from ..errors import LeaseHeldError
from .render import relative, safe_text

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_OUTCOME = 3
EXIT_LEASED = 75
EXIT_INTERRUPTED = 130


def fail(message: str, code: int) -> NoReturn:
    """Print one line on stderr and exit."""
    line = " ".join(part.strip() for part in safe_text(message).splitlines() if part.strip())
    sys.stderr.write(f"error: {line}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def lease_message(exc: LeaseHeldError) -> str:
    """Who holds the run and until when."""
    return (
        f"run {exc.run_id!r} is being executed by {exc.owner} until "
        f"{relative(exc.expires_at_ms)}; retry after that (or when it finishes) — if that "
        f"holder is not responding, `torpor resume --wait {exc.run_id}` takes the run over "
        "as soon as its lease expires"
    )


def error_message(exc: BaseException) -> str:
    """The one line that explains ``exc``."""
    if isinstance(exc, LeaseHeldError):
        return lease_message(exc)
    pyd = sys.modules.get("pydantic")  # not imported: nothing raised its ValidationError
    if pyd is not None and isinstance(exc, pyd.ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()
        )
        return f"invalid {exc.title}: {problems}"
    return str(exc) or type(exc).__name__
