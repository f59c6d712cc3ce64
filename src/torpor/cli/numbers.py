"""Numbers given on the command line, refused in one line when torpor cannot use them.

Click converts ``--limit 99999999999999999999`` to a Python int and ``--grace nan`` to a float
happily; the store then fails deep inside (an int past SQLite's 64-bit integers, a NaN that
cannot become milliseconds) with a traceback. :func:`bound_numbers` gives every integer and
float parameter of a command tree a check that runs as the value is parsed: an integer must fit
in 64 bits, a float must be finite. The refusal is Click's usage error, so it names the option
("Invalid value for '--limit': ...") and exits 2 like any other bad value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import typer

#: The largest integer a store keeps (SQLite INTEGER, PostgreSQL BIGINT).
MAX_INT = 2**63 - 1


def _problem(value: Any) -> str | None:
    """Why ``value`` (a parsed parameter, or a list of them) cannot be used, or None."""
    for v in value if isinstance(value, list | tuple) else (value,):
        if isinstance(v, float) and not math.isfinite(v):
            return f"{v} is not a finite number"
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_INT:
            return f"{v} is too large (at most {MAX_INT})"
    return None


def _checked(process: Callable[[Any, Any], Any], param: Any) -> Callable[[Any, Any], Any]:
    def check(ctx: Any, value: Any) -> Any:
        out = process(ctx, value)
        why = _problem(out)
        if why is not None:
            raise typer.BadParameter(why, ctx=ctx, param=param)
        return out

    return check


def bound_numbers(command: Any) -> Any:
    """``command`` (a Click command built from the Typer app, and every subcommand), each
    parameter's parsed value checked: an integer fits in 64 bits, a float is finite (a usage
    error naming the option otherwise); returns ``command``."""
    for param in command.params:
        param.process_value = _checked(param.process_value, param)
    for sub in getattr(command, "commands", {}).values():
        bound_numbers(sub)
    return command


__all__ = ["MAX_INT", "bound_numbers"]
