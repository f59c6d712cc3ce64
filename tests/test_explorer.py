"""The crash-point explorer (issue 5) on small workflows: every boundary crashed and resumed
with zero violations; a deliberately broken tool caught with a report that reproduces it; the
``torpor explore`` command; the pytest fixture."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torpor.testing import Target, explore

ROOT = Path(__file__).resolve().parents[1]

#: Real processes killed and resumed: the full suite runs these; the fast tier skips them.
pytestmark = pytest.mark.slow

#: A workflow with every kind of boundary: steps, a compute, an artifact, a timer (an hour:
#: the explorer's clock jumps), a checkpointed loop, two effects reconciled by their ledger.
GOOD = """
from datetime import timedelta

import torpor
from torpor.testing import FileLedger


def send(what, idempotency_key):
    FileLedger.here().record(idempotency_key, what=what)
    return {"sent": what}


def find_sent(call):
    hits = [e for e in FileLedger.here().entries() if e["key"] == call.idempotency_key]
    return torpor.Applied({"sent": hits[-1]["what"]}) if hits else torpor.Absent()


@torpor.workflow(name="explore.good", version="1", criteria=["total checked"])
def good(run, n):
    a = run.step("a", lambda: n + 1)
    b = run.compute("b", lambda x: x * 2, a)
    ref = run.artifact("report", f"a={a} b={b}")
    run.sleep(timedelta(hours=1))
    first = run.effect("notify", send, f"report {ref.sha256[:8]}", reconcile=find_sent)
    st = run.restore({"i": 0, "acc": 0})
    while st["i"] < 3:
        st["acc"] += run.step("loop", lambda i: i * 10, st["i"])
        st["i"] += 1
        run.checkpoint(st)
    last = run.effect("archive", send, f"total {st['acc'] + b}", reconcile=find_sent)
    run.verify("total checked", st["acc"] == 30)
    return {"b": b, "acc": st["acc"], "first": first, "last": last}
"""

#: A "tool" that sends a message but is declared as a read step: not idempotent, no reconcile.
BROKEN = """
import torpor
from torpor.testing import FileLedger


def send_now(what):
    FileLedger.here().record("notify:" + what)  # no key from torpor: a new send each call
    return "sent"


@torpor.workflow(name="explore.broken", version="1")
def broken(run, who):
    run.step("prepare", lambda: who.upper())
    run.step("notify", send_now, who)  # wrong: an effect run as a read step
    return run.step("after", lambda: "done")
"""

#: An effect without reconcile: a crash between the call and its record cannot be settled.
UNRECONCILED = """
import torpor
from torpor.testing import FileLedger


def charge(amount, idempotency_key):
    FileLedger.here().record(idempotency_key, amount=amount)
    return {"charged": amount}


@torpor.workflow(name="explore.unreconciled", version="1")
def unreconciled(run, amount):
    run.step("quote", lambda: amount)
    return run.effect("charge", charge, amount)  # no reconcile=
"""


def _module(tmp_path: Path, name: str, source: str) -> Target:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    return Target(
        module=name, workflow="", paths=[str(tmp_path)], ledger="torpor.testing:world_ledger"
    )


def test_every_boundary_crashed_resumed_with_no_violation(tmp_path: Path) -> None:
    t = _module(tmp_path, "goodflow", GOOD)
    t.workflow, t.input = "explore.good", 4
    report = explore(t, seed=5, workdir=tmp_path / "worlds", jobs=2)
    print(report.summary())
    assert report.ok, report.summary()
    names = {b.split("@")[0] for b in report.boundaries}
    assert {
        "append.before",
        "append.after",
        "lease.acquired",
        "effect.intended",
        "effect.called",
        "artifact.stored",
        "checkpoint.saved",
        "wait.started",
        "wait.completed",
    } <= names, names
    crash_cases = [c for c in report.cases if c.plan.startswith("crash:")]
    assert len(crash_cases) == len(report.boundaries)  # every boundary, not a sample
    assert all(c.procs[0].killed for c in crash_cases)
    assert report.by_kind["ack"] == 2 and report.by_kind["break"] >= 2 * 10
    assert report.baseline["ledger"] == {"explored/notify": 1, "explored/archive": 1}
    # Crashes during recovery landed too (each case: one seeded crash of a resuming process).
    assert sum(1 for c in crash_cases if c.landed >= 2) >= len(crash_cases) // 3


def test_a_broken_tool_is_caught_with_a_reproducible_report(tmp_path: Path) -> None:
    t = _module(tmp_path, "brokenflow", BROKEN)
    t.workflow, t.input = "explore.broken", "ann"
    report = explore(t, seed=11, kinds=["crash"], workdir=tmp_path / "worlds", jobs=2)
    text = report.summary()
    print(text)
    assert not report.ok
    dup = [v for v in report.violations if "reached the outside world 2 times" in v.message]
    assert dup, text
    assert all("'notify:ann'" in v.message for v in dup), text
    # Among them a plan whose first death falls after the send, before its record.
    v = next((v for v in dup if v.plan.startswith("crash:append.before@")), None)
    assert v is not None, text
    assert f"--case '{v.plan}'" in text and f"seed {v.seed}" in text
    # The plan in the report reproduces the violation on its own.
    again = explore(t, seed=11, cases=[v.plan], workdir=tmp_path / "again", jobs=1)
    assert any("2 times" in x.message for x in again.violations), again.summary()


def test_an_effect_without_reconcile_ends_unresolved_and_is_reported(tmp_path: Path) -> None:
    t = _module(tmp_path, "unrec", UNRECONCILED)
    t.workflow, t.input = "explore.unreconciled", 30
    report = explore(t, seed=3, kinds=["crash", "ack"], workdir=tmp_path / "worlds", jobs=2)
    text = report.summary()
    print(text)
    bad = [v for v in report.violations if "outcome unresolved" in v.message]
    assert {v.plan.split(" > ")[0] for v in bad} >= {"crash:effect.called@1", "ack:effect.called@1"}
    assert all("no reconcile function" in v.message for v in bad), text
    # Never a second charge: torpor refused to retry blindly.
    assert not [v for v in report.violations if "times" in v.message], text


def test_torpor_explore_command(tmp_path: Path) -> None:
    (tmp_path / "cliflow.py").write_text(textwrap.dedent(GOOD))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORPOR_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    cmd = [
        sys.executable,
        "-m",
        "torpor.cli",
        "explore",
        "cliflow:explore.good",
        "--input",
        "2",
        "--sample",
        "4",
        "--seed",
        "9",
        "--ledger",
        "torpor.testing:world_ledger",
        "--json",
    ]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(out.stdout)
    assert data["boundaries"] >= 30 and data["cases"] == 4 and data["violations"] == []


def test_pytest_fixture(torpor_explore, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "fixflow.py").write_text(textwrap.dedent(GOOD))
    report = torpor_explore(
        "fixflow:explore.good",
        1,
        sample=3,
        seed=2,
        paths=[str(tmp_path)],
        ledger="torpor.testing:world_ledger",
    )
    report.assert_ok()
    assert len(report.cases) == 3


def test_readme_example(tmp_path: Path) -> None:
    """The README's testing-kit example, as written: the workflow module and the test run by
    pytest in a subprocess (through the installed plugin's fixture)."""
    text = (ROOT / "README.md").read_text()
    block = text.split("# myapp/flows.py\n", 1)[1].split("```", 1)[0]
    flows, test = block.split("# tests/test_flows.py", 1)
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "flows.py").write_text(flows)
    (tmp_path / "test_flows.py").write_text("#" + test.replace("sample=40", "sample=3"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORPOR_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT / "src")])
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "test_flows.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "crash boundaries" in out.stdout and "violations: 0" in out.stdout, out.stdout
