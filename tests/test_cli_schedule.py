"""``torpor queue``, ``torpor schedule`` and ``start --queue``, as real subprocesses; ``ls`` and
``show`` say why a queued run is not running."""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import torpor
from conftest import HANG_S, ROOT
from test_cli import _env
from torpor.schedules import Schedules

#: Real subprocesses (CLI runs, interpreters): the default tier, not the fast one.
pytestmark = pytest.mark.proc

FLOWS = """
import torpor
from torpor.schedules import Schedules


@torpor.workflow("cliq.hold")
def hold(run: torpor.Run, inp: object) -> object:
    run.step("first", lambda: inp)
    return run.wait_for("go")
"""


DRIVER = """
import contextlib, io, json, sys
from torpor.cli import main
seen = []
for args in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code
    seen.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(seen))
"""


def session(cwd: Path, *invocations: list[str]) -> list[tuple[int, str, str]]:
    """Run the real entry point for each invocation in one interpreter (a process each costs
    about a second): ``(exit code, stdout, stderr)`` of each."""
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(list(invocations))],
        cwd=cwd,
        env=_env(cwd),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 0, proc.stderr
    return [(int(c or 0), o, e) for c, o, e in json.loads(proc.stdout)]


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    (tmp_path / "cliq_flows.py").write_text(FLOWS)
    return tmp_path


IMP = ["--import", "cliq_flows"]


def test_queue_start_ls_show(flows: Path, db_url: str) -> None:
    res = session(
        flows,
        ["queue", "set", "deploys", "--concurrency", "1", "--rate", "5/60"],
        ["start", "cliq.hold", "--queue", "deploys", "--run-id", "d1", *IMP, "--json"],
        ["start", "cliq.hold", "--queue", "deploys", "--run-id", "d2", *IMP, "--json"],
        ["worker", *IMP, "--until-idle", "--max-seconds", "20", "--poll", "0.05"],
        ["ls"],
        ["show", "d2", "--json"],
        ["ls", "--json"],
        ["queue", "ls", "--json"],
        ["queue", "set", "q", "--rate", "ten"],
        ["start", "cliq.hold", "--key", "k", *IMP],
    )
    assert all(code == 0 for code, _, _ in res[:8]), res
    assert json.loads(res[1][1])["status"] == "pending"  # only created: a worker starts it
    # (What the worker ran is read from the store below, not from its log lines: the logging
    # set-up of an earlier test in the same process decides whether they reach this output.)
    listing = res[4][1]
    assert "WHY NOT RUNNING" in listing
    assert "queued behind run d1 (queue deploys limit 1)" in listing
    shown = json.loads(res[5][1])
    assert shown["not_running"] == "queued behind run d1 (queue deploys limit 1)"
    assert shown["dispatch"] == {
        "queue": "deploys",
        "key": None,
        "priority": 0,
        "not_before_ms": None,
    }
    rows = {r["run_id"]: r for r in json.loads(res[6][1])}
    assert rows["d2"]["not_running"] == "queued behind run d1 (queue deploys limit 1)"
    assert rows["d1"]["not_running"] is None and rows["d1"]["status"] == "waiting"
    assert rows["d2"]["status"] == "pending"  # the worker started d1 and left d2 queued
    assert json.loads(res[7][1]) == [
        {
            "name": "deploys",
            "concurrency": 1,
            "key_concurrency": None,
            "rate_limit": 5,
            "rate_period_s": 60.0,
            "key_rate_limit": None,
            "key_rate_period_s": None,
        }
    ]
    for (code, _, err), fragment in zip(
        res[8:], ["--rate 'ten'", "given without a queue"], strict=True
    ):
        assert code == 2 and err.startswith("error: ") and fragment in err, err


def test_schedule_commands(flows: Path, db_url: str) -> None:
    add = ["schedule", "add", "report", "cliq.hold", "--cron", "0 17 * * *"]
    res = session(
        flows,
        [*add, "--tz", "America/New_York", "--input", '{"x": 1}', "--json"],
        ["schedule", "ls"],
        ["schedule", "pause", "report", "--json"],
        ["schedule", "add", "bad", "cliq.hold", "--cron", "0 17 * *"],
    )
    s = json.loads(res[0][1])
    assert s["next_fire"].endswith(("17:00:00-05:00", "17:00:00-04:00"))
    assert s["input"] == {"x": 1} and s["catchup"] == "one"
    assert "report" in res[1][1] and "America/New_York" in res[1][1]
    assert json.loads(res[2][1])["paused"] is True
    assert res[3][0] == 2 and "has 4 fields" in res[3][2]
    with torpor.Client(db_url) as client:
        got = Schedules(client.store).get("report")
        assert got is not None and got.paused and got.tz == "America/New_York"
    res = session(flows, ["schedule", "resume", "report"], ["schedule", "rm", "report"])
    assert [c for c, _, _ in res] == [0, 0] and "resumed" in res[0][1]
    with torpor.Client(db_url) as client:
        assert Schedules(client.store).list() == []


def test_readme_queues_and_schedules(tmp_path: Path) -> None:
    """The README's queues-and-schedules snippets, as written: the module run as a script,
    then every ``torpor`` line of the shell block through the real entry point."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Queues and schedules\n", 1)[1]
    module = section.split("# queues_demo.py\n", 1)[1].split("```", 1)[0]
    (tmp_path / "queues_demo.py").write_text(module)
    proc = subprocess.run(
        [sys.executable, "queues_demo.py"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 0, proc.stderr
    finished, why = proc.stdout.strip().splitlines()
    assert sorted(ast.literal_eval(finished)) == ["deploy-0", "deploy-1", "deploy-2", "hotfix"]
    assert why.startswith("delayed until ")
    shell = section.split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [ln.split("  #", 1)[0] for ln in shell.splitlines() if ln.startswith("torpor ")]
    res = session(tmp_path, *(shlex.split(ln)[1:] for ln in lines))
    assert [code for code, _, _ in res] == [0] * len(lines), res
    listing = res[2][1]
    assert "WHY NOT RUNNING" in listing and "delayed until" in listing


def test_help_for_schedule_and_queue_commands(tmp_path: Path) -> None:
    subs = [["schedule", c] for c in ("add", "ls", "rm", "pause", "resume")]
    subs += [["queue", c] for c in ("set", "ls", "rm")]
    res = session(tmp_path, *([*args, "--help"] for args in subs))
    for args, (code, out, _) in zip(subs, res, strict=True):
        assert code == 0 and "Usage: torpor" in out and "Example: torpor" in out, (args, out)
