"""The example sandbox agent (examples/sandbox_agent.py, issue 44) as a person runs it: a real
process SIGKILLed at a random point of its history (seeded, printed), resumed until it waits
for its approval (asleep: no VM process), then approved and continued by a process on another
"machine" (another TORPOR_HOME: only the database and the artifact store in common), which
rebuilds the workspace from the artifact store and finishes: the program, the installed package
and the release are on the workspace disk, the install and the release each ran once. One cold
boot (a kill before the first boot's end can make it two)."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import HANG_S, ROOT
from sandbox_kit import vm_image
from torpor.sandbox.snapshot import MANIFEST

pytestmark = pytest.mark.slow  # a long scenario (~40 s under load): the full run, as in CI

RUN = "sb-agent-kill"


def agent(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "examples.sandbox_agent", *args], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finish(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, f"{out}\n{err}"
    return out


def events(db: Path) -> int:
    """How many events the run has now (0 before its database or run exists)."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
            row = con.execute("SELECT count(*) FROM events WHERE run_id = ?", (RUN,)).fetchone()
    except sqlite3.Error:
        return 0
    return int(row[0])


def debugfs(disk: Path, request: str) -> str:
    """``debugfs -R request`` on the workspace disk (read-only, no VM): the guest's files are
    under ``/files``."""
    done = subprocess.run(
        ["debugfs", "-R", request, str(disk)], capture_output=True, text=True, check=True,
        errors="replace",
    )  # fmt: skip
    return done.stdout


def debugfs_cat(disk: Path, path: str) -> str:
    return debugfs(disk, f"cat /files/{path}")


def test_the_example_killed_at_random_sleeps_on_approval_and_finishes_elsewhere(
    tmp_path: Path,
) -> None:
    vm_image()
    seed = int(os.environ.get("SANDBOX_AGENT_SEED") or random.randrange(1 << 30))
    print(f"seed {seed} (SANDBOX_AGENT_SEED={seed} replays it)")
    kill_at = random.Random(seed).randint(1, 60)  # the run has ~62 events when it waits
    db = tmp_path / "torpor.db"
    base = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "src")]),
        TORPOR_DATABASE_URL=f"sqlite:///{db}",
        TORPOR_ARTIFACTS_URL=str(tmp_path / "artifacts"),
    )
    env_a = base | {"TORPOR_HOME": str(tmp_path / "machine-a")}
    env_b = base | {"TORPOR_HOME": str(tmp_path / "machine-b")}

    first = agent(env_a, "--run-id", RUN)
    deadline = time.monotonic() + HANG_S
    while first.poll() is None and events(db) < kill_at:
        assert time.monotonic() < deadline, "the agent never got that far"
        time.sleep(0.02)
    if first.poll() is None:
        first.send_signal(signal.SIGKILL)
    first.communicate(timeout=HANG_S)
    print(f"killed at {events(db)} events (aimed at {kill_at}), rc {first.returncode}")

    out = finish(agent(env_a, "--resume", RUN))
    assert f"run {RUN}: waiting" in out, out
    (ws_a,) = (tmp_path / "machine-a" / "sandboxes").iterdir()
    assert (ws_a / MANIFEST).is_file()  # asleep: its state on disk ...
    named = []
    for p in (p for p in Path("/proc").iterdir() if p.name.isdigit()):
        try:
            if str(ws_a).encode() in (p / "cmdline").read_bytes():
                named.append(p.name)
        except OSError:
            continue
    assert not named  # ... and no process

    out = finish(agent(env_b, "--resume", RUN, "--auto-approve"))
    assert f"run {RUN}: finished succeeded" in out, out
    (ws_b,) = (tmp_path / "machine-b" / "sandboxes").iterdir()
    disk = ws_b / "disk.img"
    assert debugfs_cat(disk, "installs.log").count("\n") == 1
    assert debugfs_cat(disk, "releases.log") == "1.0\n"
    assert "add()" in debugfs_cat(disk, "site/tinycalc/calc.sh")
    assert debugfs_cat(disk, "site/tinycalc-1.0.dist-info/INSTALLER") == "sandbox-agent\n"
    assert debugfs_cat(disk, "app/stats.sh").startswith(". ")
    assert "release-1.0.tgz" in debugfs(disk, "ls -l /files/out")
