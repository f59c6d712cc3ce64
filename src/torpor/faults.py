"""Named fault points at the engine's durable boundaries (zero cost when off).

Set ``TORPOR_CRASH_AT=<point>[@<n>]`` (for example ``effect.called@2``) and the process kills
itself with SIGKILL — a real crash no ``except`` can catch — the n-th time (default first) it
reaches that point. Points: ``append.before``, ``append.after``, ``effect.intended``,
``effect.called``, ``artifact.stored``, ``wait.started``, ``lease.acquired``.
Issue 5 grows this into seeded fault plans and the crash-point explorer.
"""

from __future__ import annotations

import os
import signal

_spec = os.environ.get("TORPOR_CRASH_AT") or None
_target, _, _nth = (_spec or "").partition("@")
_count = 0
_trace = os.environ.get("TORPOR_TRACE_POINTS") or None


def point(name: str) -> None:
    """Mark a boundary. Crashes the process here if the environment asks for it."""
    global _count
    if _trace is not None:
        with open(_trace, "a") as f:
            f.write(name + "\n")
    if _spec is None or name != _target:
        return
    _count += 1
    if _count >= int(_nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
