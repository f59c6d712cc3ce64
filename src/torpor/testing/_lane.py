"""A fork server for the explorer: imports torpor and the workflow modules once, then runs each
process of a case as a forked child — a real process, killed for real by its fault plan.

Protocol: one JSON command a line on stdin, one JSON answer a line on stdout::

    {"env": {...}, "result": "/path/result.json", "log": "/path/log", "timeout": 300,
     "run": {"db": URL, "artifacts": URL, "workflow": NAME, "input": ..., "run_id": ID,
             "auto_approve": NAME|null, "lease_ttl_s": 30, "clock": "/path/clock"|null}}
    -> {"pid": 123, "rc": 0 | -9 | ..., "killed": bool}

The child writes ``{"status": ..., "outcome": ..., ...}`` or ``{"error": ...}`` to ``result``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import signal
import sys
import time
import traceback
from typing import Any


def _child(cmd: dict[str, Any]) -> None:
    log = os.open(cmd["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ.update(cmd.get("env") or {})
    from torpor import faults

    faults.from_env()
    import torpor
    from torpor.testing.clock import OffsetClock

    r = cmd["run"]
    out: dict[str, Any]
    try:
        clock = OffsetClock(r["clock"]) if r.get("clock") else None
        rt = torpor.Runtime(
            r["db"],
            r["artifacts"],
            auto_approve=r.get("auto_approve"),
            lease_ttl_s=float(r.get("lease_ttl_s") or 30.0),
            clock=clock,
        )
        try:
            res = rt.run(r["workflow"], r["input"], run_id=r["run_id"])
        finally:
            rt.close()
        out = dataclasses.asdict(res)
    except BaseException as exc:
        out = {
            "error": type(exc).__name__,
            "message": str(exc),
            "traceback": traceback.format_exc()[-4000:],
        }
    with open(cmd["result"], "w") as f:
        json.dump(out, f, default=str)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _wait(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.WIFSIGNALED(status):
                return -os.WTERMSIG(status)
            return os.WEXITSTATUS(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -999  # timed out (killed by the lane, not by a fault plan)
        time.sleep(0.005)


def main(argv: list[str]) -> int:
    mods = [a for a in argv if a]
    for m in mods:
        importlib.import_module(m)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child always leaves by os._exit
            try:
                _child(cmd)
            finally:
                os._exit(4)
        rc = _wait(pid, float(cmd.get("timeout") or 300))
        print(json.dumps({"pid": pid, "rc": rc, "killed": rc == -signal.SIGKILL}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
