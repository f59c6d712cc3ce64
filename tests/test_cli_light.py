"""``torpor ls`` imports only what it prints (issue 48): neither pydantic nor the engine nor
Typer, through the fast path of :mod:`torpor.cli.listing`, and prints what the Typer command
prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import torpor
from conftest import HANG_S
from torpor.cli import app

#: Real subprocesses (the CLI as a user runs it).
pytestmark = pytest.mark.proc

PROBE = """
import sys
from torpor.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
HEAVY = ("pydantic", "torpor.engine", "typer", "torpor.runtime")
heavy = sorted(m for m in HEAVY if m in sys.modules)
print("HEAVY=" + ",".join(heavy), "CODE=" + str(code), file=sys.stderr)
"""


@torpor.workflow(name="light-hello", version="1")
def hello(run: torpor.Run, name: str) -> str:
    return run.step("greet", lambda: f"hello {name}")


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'torpor.db'}"
    rt = torpor.Runtime(url)
    for i in range(3):
        assert rt.run(hello, f"n{i}").outcome == "succeeded"
    rt.close()
    return url


def probe(*args: str) -> tuple[str, str, str]:
    p = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env={**os.environ, "COLUMNS": "200"},
    )
    heavy, code = p.stderr.rsplit("HEAVY=", 1)[1].split(" CODE=")
    return p.stdout, heavy, code.strip()


@pytest.mark.parametrize("extra", [[], ["--json"], ["--status", "finished", "--limit", "2"]])
def test_ls_imports_neither_pydantic_nor_the_engine(store: str, extra: list[str]) -> None:
    out, heavy, code = probe("--db", store, "ls", *extra)
    assert code == "0" and heavy == "", (out, heavy)
    typer_out = CliRunner().invoke(app, ["--db", store, "ls", *extra], env={"COLUMNS": "200"})
    assert typer_out.exit_code == 0
    assert out == typer_out.stdout  # the same words as the Typer command prints
    if "--json" in extra:
        assert len(json.loads(out)) == 3


def test_what_ls_cannot_parse_goes_to_typer(store: str) -> None:
    # A bad value is the Typer app's, with its message and exit code; then Typer is imported.
    _, heavy, code = probe("--db", store, "ls", "--limit", "0")
    assert code == "2" and "typer" in heavy
    out, heavy, code = probe("--db", store, "ls", "--help")
    assert code == "0" and "--outcome" in out and "typer" in heavy
