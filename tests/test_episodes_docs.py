"""The episodic-memory snippets of README.md and docs/memory.md, run as written: the example
agent, the Python API, and every ``torpor memory`` / ``torpor start`` line, in real processes
against one SQLite store."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HANG_S

#: A dozen interpreter starts: the full suite runs it; the fast tier skips it.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _block(text: str, opener: str) -> str:
    return text.split(opener, 1)[1].split("```", 1)[0]


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


def _commands(block: str) -> list[list[str]]:
    lines = [ln.split("#", 1)[0].strip() for ln in block.strip().splitlines()]
    return [shlex.split(ln) for ln in lines if ln]


def test_readme_and_docs_snippets_run_as_written(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Episodic memory", 1)[1].split("\n## ", 1)[0]
    (tmp_path / "deployer.py").write_text(_block(section, "# deployer.py\n"))
    commands = _commands(_block(section, "```bash\n"))
    assert commands[0] == ["python", "deployer.py"]
    out = _run(tmp_path, commands[0])
    assert "deploy-1:ended@26 succeeded" in out and "deploy-1:milestone@22 progress" in out
    assert "legacy API refused the connection" in out
    outputs = [_run(tmp_path, c) for c in commands[1:]]
    assert "deploy-1:ended@26" in outputs[0]  # memory search
    assert "deploy_legacy" in outputs[1] and "lesson:" in outputs[1]  # memory show
    assert "wrote 0 episode(s)" in outputs[2] and "deleted 0 episode(s)" in outputs[3]
    assert "succeeded" in outputs[4]  # run 2 ...
    runs = json.loads(_run(tmp_path, ["torpor", "ls", "--json"]))
    second = next(r for r in runs if r["run_id"] != "deploy-1")
    events = json.loads(_run(tmp_path, ["torpor", "events", second["run_id"], "--json"]))
    tools = [e["payload"]["steps"][0]["tool"] for e in events if e["type"] == "plan_recorded"]
    assert tools == ["deploy_v2"]  # ... went straight to v2: it was told

    docs = (ROOT / "docs" / "memory.md").read_text()
    (tmp_path / "memory_api.py").write_text(_block(docs, "```python\n"))
    api = _run(tmp_path, ["python", "memory_api.py"])
    assert "deploy-1:ended@26 ended succeeded ['deploy_legacy', 'deploy_v2']" in api
    assert "\n[]\n" in api and "Episodes:" in api
    for c in _commands(_block(docs, "```bash\n")):
        _run(tmp_path, c)
