"""The docs' quickstart and the minimal example run as written (CI also runs the quickstart
from the built wheel in a clean virtual environment: .ci/run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HANG_S, ROOT


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=HANG_S
    )


@pytest.mark.proc
def test_the_quickstart_runs_as_written(tmp_path: Path, torpor_home: Path) -> None:
    cp = _run(str(ROOT / "docs" / "quickstart.py"), cwd=tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == ["Hello, world!", "succeeded Hello, world!"]
    assert (torpor_home / "torpor.db").exists()  # the default store: $TORPOR_HOME/torpor.db


@pytest.mark.proc
def test_the_minimal_example_with_torpor_start(torpor_home: Path) -> None:
    """The README's commands: `torpor start` stops at the approval; a person approves (signed
    with their key); the resumed run sleeps, sends once, and succeeds."""
    imp = ["--import", "examples.minimal"]
    cp = _run(
        "-m", "torpor.cli", "start", "minimal.greet", *imp, "-i", '"world"', "--run-id", "m1",
        "--json", cwd=ROOT,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["wait_kind"] == "approval"
    cp = _run("-m", "torpor.cli", "approve", "m1", "--as", "alice", cwd=ROOT)
    assert cp.returncode == 0, cp.stderr + cp.stdout
    cp = _run("-m", "torpor.cli", "resume", "m1", *imp, "--json", cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["outcome"] == "succeeded", cp.stdout
    sent = list((torpor_home / "minimal-outbox").iterdir())
    assert len(sent) == 1 and sent[0].read_text() == "Hello, world!\n"


@pytest.mark.proc
def test_the_minimal_example_in_process(torpor_home: Path) -> None:
    cp = _run("-m", "examples.minimal", "--auto-approve", cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    assert "finished succeeded" in cp.stdout


def test_the_readme_shows_the_quickstart_as_run() -> None:
    """The README's first workflow is docs/quickstart.py verbatim (the file CI runs)."""
    quick = (ROOT / "docs" / "quickstart.py").read_text()
    assert f"```python\n{quick}```" in (ROOT / "README.md").read_text()
