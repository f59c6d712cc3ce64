"""The long agent's command line (examples/long_agent, adversarial review minors): a bad
``--budget`` is a one-line error, not a traceback; a reader that goes away (``| head``) ends
the printing, never the run — the run still succeeds and a resume has nothing left to do.
(The example keeps its store in SQLite only: it is an example, not a backend.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import torpor
from conftest import HANG_S

#: Real subprocesses (CLI runs, interpreters): the default tier, not the fast one.
pytestmark = pytest.mark.proc

ROOT = Path(__file__).resolve().parents[1]


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "examples.long_agent", *args]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


def test_a_budget_below_the_minimum_is_a_one_line_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        _cmd("--budget", "150", "--turns", "5", "--dir", str(tmp_path / "la")),
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: --budget 150: Memory(budget_tokens=150): at least 256"
    ]
    assert not (tmp_path / "la" / "torpor.db").exists()  # nothing was created


def test_a_closed_output_pipe_does_not_fail_the_run(tmp_path: Path) -> None:
    d = tmp_path / "la"
    proc = subprocess.Popen(
        _cmd("--turns", "40", "--dir", str(d)),
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"turn    0")
    proc.stdout.close()  # as `| head -1` does: the next print gets EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=HANG_S) == 0, err
    assert "Traceback" not in err, err
    with torpor.Client(f"sqlite:///{d}/torpor.db") as client:
        state = client.state("long-1")
    assert state.outcome is not None and state.outcome.value == "succeeded", state.outcome_reason
    assert state.usage.model_calls == 40
