"""docs/concepts/delegation.md runs as written (issue 38): a lead agent delegates to two
worker agents whose calls run side by side; the tree's budget blocks the second worker,
``torpor show`` of the lead has the tree's accounting, ``torpor budget`` reopens the worker,
and the tree finishes — real processes against one SQLite store."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

import torpor
from conftest import ROOT
from test_children_docs import _run

DOC = ROOT / "docs" / "concepts" / "delegation.md"


@pytest.mark.proc
def test_the_delegation_page_runs_as_written(tmp_path: Path) -> None:
    text = DOC.read_text()
    (tmp_path / "delegation.py").write_text(
        text.split("```python\n# delegation.py\n", 1)[1].split("```", 1)[0]
    )
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(ln.split("#", 1)[0]) for ln in block.strip().splitlines()]
    assert _run(tmp_path, commands[0]).strip() == "waiting"
    show = _run(tmp_path, commands[1])
    assert "Tree budget (3 runs)" in show and "5 of 5" in show, show
    assert "count-1.child:part1@v1: budget exhausted (steps: 5 used of 5 by the 3 runs" in show
    raised = _run(tmp_path, commands[2])
    assert "reopened below it: count-1.child:part1@v1" in raised, raised
    assert _run(tmp_path, commands[3]).strip() == "finished succeeded"
    store = torpor.Client(f"sqlite:///{os.environ['TORPOR_HOME']}/torpor.db")
    assert [c.outcome for c in store.children("count-1")] == ["succeeded", "succeeded"]
    assert store.state("count-1").usage.steps == 2  # its two delegations; the workers' six
