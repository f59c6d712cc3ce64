"""Values the runtime supplies — a random id, a random number, the time — drawn once, recorded,
and replayed (issue 14): a resumed run uses the id it drew before the crash, never a new one.

A draw is a ``read`` step of its own (``uuid``, ``random``, ``now``; ``uuid:<name>`` when the
code names it), recorded as ``{"value": ..., "code": ..., "at": ...}``: the value in the typed
encoding, and where the code drew it (the source line, and ``file:line in function``).

A code change that adds a draw before an existing one must not hand the existing draw's value
to the new one. Named draws are told apart by their ids: a new name where a recorded draw lies
ahead is a divergence at the replay gate (:meth:`~torpor.engine.replay.Replay.before_write`).
Unnamed draws are numbered in call order (``uuid``, ``uuid#2``), so the new draw would take the
recorded one's id: a replayed unnamed draw is checked against the source line it was recorded
at, and a different line is a :class:`~torpor.errors.NonDeterminismError` naming both draws,
before anything is written. ``run.patched`` keeps old runs on the old path.

A draw inside a step's own function (``run.step("t0", run.now)``) is not recorded on its own:
the step records its result, and on replay the function does not run at all.
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Callable
from types import FrameType
from typing import Any

from ..errors import NonDeterminismError
from ..history import Policy
from .journal import Journal, in_step_work


def site(frame: FrameType | None) -> tuple[str, str]:
    """``(source line, "file:line in function")`` of the code at ``frame`` (the caller of a
    draw); the line is ``""`` when the source cannot be read."""
    if frame is None:
        return "", "?"
    code = frame.f_code
    line = " ".join(linecache.getline(code.co_filename, frame.f_lineno).split())
    name = getattr(code, "co_qualname", code.co_name)
    return line, f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {name}"


def draw(
    j: Journal,
    kind: str,
    name: str | None,
    make: Callable[[], Any],
    where: tuple[str, str],
) -> Any:
    """Draw a ``kind`` value with ``make()`` once and record it (see the module docstring);
    on replay the recorded value. NonDeterminismError when a replayed unnamed draw was recorded
    at another source line (nothing is written)."""
    if in_step_work():
        return make()  # inside a step's function: the step records its outcome as a whole
    code, at = where

    def work(sid: str) -> tuple[Any, list[Any]]:
        return {"value": make(), "code": code, "at": at}, []

    # (A read step: a draw that never completed is simply drawn again.)
    sid = kind if name is None else f"{kind}:{name}"
    rec = j.record(sid, work, policy=Policy.READ, purpose=f"draw {kind}")
    result = rec.result if isinstance(rec.result, dict) else {"value": rec.result}
    then = result.get("code") or ""
    if not rec.new and name is None and code and then and then != code:
        raise NonDeterminismError(
            f"run {j.run_id!r}: the code draws {kind} {rec.step_id!r} at `{code}` ({at}), but "
            f"the history recorded draw {rec.step_id!r} at `{then}` ({result.get('at')}): a draw "
            "was added, removed or moved before it, and replaying would give this draw another "
            "one's value. Resume with the code the run was recorded under, or put the new draw "
            'under `if run.patched("<change>"):`; naming draws (run.uuid("order")) tells them '
            "apart. Nothing was recorded."
        )
    return result.get("value")


__all__ = ["draw", "site"]
