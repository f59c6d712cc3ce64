"""docs/concepts/children.md runs as written (issue 37): the example tree, then ``torpor ls
--tree`` and ``torpor show`` in real processes against one SQLite store."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HANG_S, ROOT

DOC = ROOT / "docs" / "concepts" / "children.md"


def _run(cwd: Path, argv: list[str]) -> str:
    env = dict(os.environ)  # TORPOR_HOME and the signing key from the autouse fixture
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), str(ROOT / "src")])
    env["COLUMNS"] = "200"
    if argv[0] == "torpor":
        argv = [sys.executable, "-m", "torpor.cli", *argv[1:]]
    elif argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=HANG_S)
    assert out.returncode == 0, f"{argv}: {out.stdout}\n{out.stderr}"
    return out.stdout


@pytest.mark.proc
def test_the_child_runs_page_runs_as_written(tmp_path: Path) -> None:
    text = DOC.read_text()
    (tmp_path / "children.py").write_text(
        text.split("```python\n# children.py\n", 1)[1].split("```", 1)[0]
    )
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(ln.split("#", 1)[0]) for ln in block.strip().splitlines()]
    out = _run(tmp_path, commands[0])
    lines = out.splitlines()
    assert lines[0] == "succeeded", out
    assert "review-1.child:review.file succeeded 4" in lines
    assert "review-1.child:review.file#2 failed None" in lines
    assert "review-1.child:review.file#3 succeeded 9" in lines
    tree = _run(tmp_path, commands[1]).splitlines()
    rows = [ln.split()[0:2] for ln in tree if "review" in ln]
    assert rows[0] == ["review-1", "review.all"], tree
    assert [r[:2] for r in rows[1:]] == [
        ["└", "review-1.child:review.file"],
        ["└", "review-1.child:review.file#2"],
        ["└", "review-1.child:review.file#3"],
    ], tree
    show = _run(tmp_path, commands[2])
    assert "Children" in show and "review-1.child:review.file#2" in show, show
    child = _run(tmp_path, ["torpor", "show", "review-1.child:review.file#2"])
    assert "parent" in child and "review-1" in child and "is not text" in child, child
