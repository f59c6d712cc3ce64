"""How a run's report writes times (shared by the CLI and the console's decision lines)."""

from __future__ import annotations

from datetime import datetime


def local_time(ms: int | None) -> str:
    """Epoch milliseconds as this machine's local time, ``YYYY-MM-DD HH:MM:SS``; ``-`` for
    None."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")


__all__ = ["local_time"]
