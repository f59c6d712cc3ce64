"""docs/concepts/streams.md runs as written (issue 40): the example, then its ``torpor
watch`` commands, in real processes against one SQLite store."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HANG_S, ROOT

DOC = ROOT / "docs" / "concepts" / "streams.md"


def _run(cwd: Path, argv: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd), str(ROOT / "src")])}
    if argv[0] == "torpor":
        argv = [sys.executable, "-m", "torpor.cli", *argv[1:]]
    elif argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=HANG_S)
    assert out.returncode == 0, f"{argv}: {out.stdout}\n{out.stderr}"
    return out.stdout


@pytest.mark.proc
def test_the_streams_page_runs_as_written(tmp_path: Path) -> None:
    text = DOC.read_text()
    code = text.split("```python\n# streams_demo.py\n", 1)[1].split("```", 1)[0]
    (tmp_path / "streams_demo.py").write_text(code)
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(ln.split("#", 1)[0]) for ln in block.strip().splitlines()]
    demo, as_json, reply = (_run(tmp_path, c) for c in commands)
    assert demo.splitlines() == [
        "1 {'done': 1, 'of': 2, 'file': 'a.py'}",
        "2 {'done': 2, 'of': 2, 'file': 'b.py'}",
        "All 2 files read.",
    ]
    assert [json.loads(x)["data"]["file"] for x in as_json.splitlines()] == ["a.py", "b.py"]
    assert reply == "All 2 files read.\n"
