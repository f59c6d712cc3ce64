"""Child processes that die with the agent.

After ``kill -9`` of the agent alone, a git push or test run it started would otherwise go on
as an orphan and might land *after* the resumed agent reconciled that effect as absent. On
Linux each child asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``);
elsewhere this is plain ``subprocess.run``.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
from typing import Any

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` whose child is killed if this process dies first."""
    if sys.platform.startswith("linux"):
        kwargs.setdefault("preexec_fn", _die_with_parent)
    return subprocess.run(cmd, **kwargs)
