"""Exit codes and the one-line error: how the ``torpor`` command stops short.

The codes are described in :mod:`torpor.cli`; :func:`torpor.cli.main` maps exceptions to them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from ..errors import BadInputError, LeaseHeldError, TorporError
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


@contextmanager
def error_boundary() -> Iterator[None]:
    """The CLI's one error boundary for what a command raises: torpor's errors as one line
    with their exit code (a held lease 75, bad input 2, any other 1), an interrupt 130, a
    reader that left the pipe (``torpor events X | head``) quietly 1, and pydantic's
    ValidationError (bad input) matched without importing pydantic — when it is not loaded,
    nothing can have raised it. Anything else propagates (the app's usage errors are its own)."""
    try:
        yield
    except LeaseHeldError as exc:
        fail(lease_message(exc), EXIT_LEASED)
    except BadInputError as exc:
        fail(error_message(exc), EXIT_USAGE)
    except TorporError as exc:
        fail(error_message(exc), EXIT_ERROR)
    except KeyboardInterrupt:
        fail("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(EXIT_ERROR) from None
    except Exception as exc:
        pyd = sys.modules.get("pydantic")
        if pyd is None or not isinstance(exc, pyd.ValidationError):
            raise
        fail(error_message(exc), EXIT_USAGE)
