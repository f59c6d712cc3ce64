"""docs/steering.md's complete example runs as written (issue 39)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HANG_S, ROOT


@pytest.mark.proc
def test_the_steering_example_runs_as_written(tmp_path: Path, torpor_home: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cp = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "steering_example.py"), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert lines[:4] == [
        "waiting approval",
        "deploying 2.1 to prod",  # the edit ran, not the proposal
        "the model's next call sees the operator's message: True",
        "succeeded",
    ], cp.stdout
    assert lines[4:6] == ["approval", "paging on-call: stage 1"], cp.stdout
    assert lines[6].startswith("blocked - ") and "escalation chain" in lines[6]
    assert json.loads(lines[7]) == ["notify", "deny"]
    assert '--8<-- "docs/steering_example.py"' in (ROOT / "docs" / "steering.md").read_text()
