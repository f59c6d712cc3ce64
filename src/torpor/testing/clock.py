"""Clocks for tests: time that moves when the test says so, not when the wall clock does.

Give one to the runtime (``Runtime(url, clock=FakeClock())``): the store stamps events, fixes
timer deadlines and judges lease expiry by it, ``run.now()`` reads it, and the runtime's wait
for a due timer calls its :meth:`~FakeClock.sleep`, which moves time forward instead of
sleeping — so ``run.sleep(timedelta(days=3))`` or an approval deadline passes at once.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta
from pathlib import Path


def _seconds(d: float | timedelta) -> float:
    return d.total_seconds() if isinstance(d, timedelta) else float(d)


class FakeClock:
    """Epoch seconds that move only by :meth:`advance` (or :meth:`sleep`, which the runtime
    calls while a run waits for a timer). Thread-safe. ``start`` defaults to the real now."""

    def __init__(self, start: float | None = None):
        self._t = time.time() if start is None else float(start)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self._t

    def now(self) -> float:
        return self._t

    def advance(self, d: float | timedelta) -> float:
        """Move time forward by ``d`` (seconds or a timedelta); returns the new time."""
        s = _seconds(d)
        if s < 0:
            raise ValueError("a clock never goes back")
        with self._lock:
            self._t += s
            return self._t

    def sleep(self, seconds: float) -> None:
        """What the runtime calls instead of ``time.sleep`` while it waits for a timer."""
        self.advance(max(0.0, seconds))


class OffsetClock:
    """Real time plus an offset kept in a file: :meth:`sleep` adds to the offset instead of
    sleeping. Shared by the processes of one run (read when the clock is made), so timers fire
    at once and time still only moves forward across crashes and resumes (the explorer's)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        try:
            self.offset = float(self.path.read_text() or 0)
        except (OSError, ValueError):
            self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def sleep(self, seconds: float) -> None:
        self.offset += max(0.0, seconds)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(repr(self.offset))
        os.replace(tmp, self.path)


__all__ = ["FakeClock", "OffsetClock"]
