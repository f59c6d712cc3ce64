"""A run records the module of its workflow, so resuming needs no --import."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conftest import run_python

#: Real subprocesses (CLI runs, interpreters): the default tier, not the fast one.
pytestmark = pytest.mark.proc

FLOWS = textwrap.dedent(
    """
    import torpor

    @torpor.workflow(name="autoimp.gate")
    def gate(run, inp):
        got = run.wait_for("go")
        return {"got": got}
    """
)


def test_resume_imports_the_recorded_module(tmp_path: Path, db_url: str) -> None:
    (tmp_path / "autoimp_flows.py").write_text(FLOWS)
    env = {"TORPOR_DATABASE_URL": db_url}
    started = run_python(
        "import torpor, autoimp_flows\n"
        "print(torpor.Runtime().run('autoimp.gate', run_id='a1').status)",
        cwd=tmp_path,
        env=env,
    )
    assert started.stdout.strip() == "waiting", started.stderr
    # A fresh process that never imported the module: the recorded module is imported.
    resumed = run_python(
        "import torpor\n"
        "torpor.Client().signal('a1', 'go', 7)\n"
        "print(torpor.Runtime().resume('a1').result)",
        cwd=tmp_path,
        env=env,
    )
    assert resumed.stdout.strip() == "{'got': 7}", resumed.stderr


def test_unimportable_recorded_module_is_a_clear_error(tmp_path: Path, db_url: str) -> None:
    (tmp_path / "gone_flows.py").write_text(FLOWS.replace("autoimp.gate", "gone.gate"))
    env = {"TORPOR_DATABASE_URL": db_url}
    run_python(
        "import torpor, gone_flows\ntorpor.Runtime().run('gone.gate', run_id='g1')",
        cwd=tmp_path,
        env=env,
    )
    (tmp_path / "gone_flows.py").unlink()
    out = run_python(
        "import torpor\n"
        "try:\n"
        "    torpor.Runtime().resume('g1')\n"
        "except torpor.TorporError as e:\n"
        "    print(e)",
        cwd=tmp_path,
        env=env,
    )
    assert "defined in module 'gone_flows', which cannot be imported" in out.stdout, out.stderr
