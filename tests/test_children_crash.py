"""Child runs under SIGKILL (issue 37, G14): the crash-point explorer kills a tree of runs at
every boundary of spawn, wait and fan-in (the children run in the parent's process, as
SQLite's default does) — one child per spawn, no result lost, every effect once; and real
processes killed at each child fault point on both backends, then resumed."""

from __future__ import annotations

import importlib
import textwrap
from pathlib import Path

import pytest

import torpor
from conftest import HANG_S, run_python
from torpor.testing import FileLedger, Target, explore

#: A parent that fans out to two children with an effect each, waits for all, starts a third
#: child and waits for it alone, then performs an effect of its own with what came back.
TREE = """
import torpor
from torpor.testing import FileLedger


def send(what, idempotency_key):
    FileLedger.here().record(idempotency_key, what=what)
    return {"sent": what}


def find_sent(call):
    hits = [e for e in FileLedger.here().entries() if e["key"] == call.idempotency_key]
    return torpor.Applied({"sent": hits[-1]["what"]}) if hits else torpor.Absent()


@torpor.workflow(name="tree.kid", version="1")
def kid(run, x):
    y = run.step("double", lambda: x * 2)
    run.effect("tell", send, f"kid {x} -> {y}", reconcile=find_sent)
    return y


@torpor.workflow(name="tree.root", version="1")
def root(run, xs):
    kids = [run.spawn("tree.kid", x) for x in xs]
    got = [r.result for r in run.wait_children(kids)]
    last = run.child("tree.kid", sum(got))
    total = run.effect("report", send, f"total {last.result}", reconcile=find_sent)
    return {"got": got, "last": last.result, "report": total}


def tree_ledger(world, run_id):
    \"\"\"The world's effects by key, and each child by its input: 2 would be a second child.\"\"\"
    from pathlib import Path

    counts = dict(FileLedger(Path(world) / FileLedger.NAME).counts())
    with torpor.Client(f"sqlite:///{Path(world) / 'torpor.db'}") as c:
        for rec in c.children(run_id):
            key = f"child with input {c.state(rec.run_id).input}"
            counts[key] = counts.get(key, 0) + 1
    return counts
"""


@pytest.mark.slow
def test_every_boundary_of_a_tree_crashed_and_resumed(tmp_path: Path) -> None:
    (tmp_path / "treeflow.py").write_text(textwrap.dedent(TREE))
    t = Target(
        module="treeflow",
        workflow="tree.root",
        input=[1, 2],
        paths=[str(tmp_path)],
        ledger="treeflow:tree_ledger",
    )
    report = explore(t, seed=37, kinds=["crash", "ack"], workdir=tmp_path / "worlds", jobs=2)
    print(report.summary())
    assert report.ok, report.summary()
    names = {b.split("@")[0] for b in report.boundaries}
    assert {"child.created", "child.spawned", "wait.started", "wait.completed"} <= names, names
    crash_cases = [c for c in report.cases if c.plan.startswith("crash:")]
    assert len(crash_cases) == len(report.boundaries)  # every boundary, not a sample
    assert report.baseline["result"] == {
        "got": [2, 4],
        "last": 12,
        "report": {"sent": "total 12"},
    }
    led = report.baseline["ledger"]
    assert led["explored/report"] == 1 and len([k for k in led if k.startswith("child ")]) == 3


#: The same tree in a process killed by a fault plan, then resumed by a fresh one.
KILL = """
import sys, torpor
from torpor import faults
sys.path.insert(0, {path!r})
import treeflow
faults.from_env()
with torpor.Runtime({url!r}, {arts!r}) as rt:
    res = rt.run("tree.root", [1, 2], run_id="t")
    print("RESULT", res.status, res.outcome)
"""


@pytest.mark.proc
@pytest.mark.parametrize(
    "point",
    # (every other boundary of this tree is crashed by the explorer above, on SQLite)
    ["child.created@1", "child.spawned@2", "wait.completed@1"],
)
def test_sigkill_at_each_child_point_then_resume(
    point: str, store_url: str, tmp_path: Path
) -> None:
    (tmp_path / "treeflow.py").write_text(textwrap.dedent(TREE))
    arts = str(tmp_path / "artifacts")
    env = {"TORPOR_EXPLORE_WORLD": str(tmp_path), "TORPOR_CRASH_AT": point}
    code = KILL.format(path=str(tmp_path), url=store_url, arts=arts)
    first = run_python(code, cwd=tmp_path, env=env)
    assert first.returncode == -9, first.stdout + first.stderr  # SIGKILLed at the point
    second = run_python(code, cwd=tmp_path, env={"TORPOR_EXPLORE_WORLD": str(tmp_path)})
    assert "RESULT finished succeeded" in second.stdout, second.stdout + second.stderr
    with torpor.Client(store_url) as c:
        kids = c.children("t")
        assert len(kids) == 3, [k.run_id for k in kids]  # one child per spawn
        assert sorted(c.state(k.run_id).input for k in kids) == [1, 2, 6]
        assert c.state("t").result["report"] == {"sent": "total 12"}  # results never lost
    counts = FileLedger(tmp_path / FileLedger.NAME).counts()
    assert sorted(counts.values()) == [1, 1, 1, 1], counts  # every effect once
    assert len(counts) == 4, counts


WORKER = """
import sys, torpor
sys.path.insert(0, {path!r})
import treeflow
from torpor.worker import Worker
with torpor.Runtime({url!r}, {arts!r}) as rt:
    print("OWNER", rt.owner, flush=True)
    Worker(rt, concurrency=2, poll_s=0.2).run(until_idle=True, max_seconds={hang})
"""


@pytest.mark.proc
def test_children_run_on_another_worker_and_wake_their_parent(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: this process starts the parent (it spawns and goes to wait, holding
    nothing); a worker process runs the children, and their outcomes wake the parent, which
    the worker then finishes."""
    (tmp_path / "treeflow.py").write_text(textwrap.dedent(TREE))
    arts = str(tmp_path / "artifacts")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("treeflow")  # registers the workflows in this process too
    env = {"TORPOR_EXPLORE_WORLD": str(tmp_path)}
    monkeypatch.setenv("TORPOR_EXPLORE_WORLD", str(tmp_path))
    with torpor.Runtime(pg_url, arts) as rt:
        rt.start("tree.root", [1, 2], run_id="pw")
        first = rt.execute("pw")  # spawns two children and waits on them: no drive here
        assert (first.status, first.wait_kind) == ("waiting", "children"), first
        here = rt.owner
    code = WORKER.format(path=str(tmp_path), url=pg_url, arts=arts, hang=HANG_S)
    out = run_python(code, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    worker = out.stdout.split("OWNER ", 1)[1].split()[0]
    with torpor.Client(pg_url) as c:
        assert c.get("pw").outcome == "succeeded", c.state("pw").outcome_reason
        assert c.state("pw").result["got"] == [2, 4]
        kids = c.children("pw")
        assert len(kids) == 3
        for k in kids:
            owners = {e.payload.owner for e in c.events(k.run_id) if e.type == "lease_acquired"}
            assert owners == {worker} and here not in owners, owners
    counts = FileLedger(tmp_path / FileLedger.NAME).counts()
    assert sorted(counts.values()) == [1, 1, 1, 1], counts


LEVELS = """
import torpor


@torpor.workflow(name="lv.node", version="1")
def node(run, depth):
    if depth == 0:
        return run.wait_for("never")
    return run.child("lv.node", depth - 1).outcome
"""

CANCEL = """
import sys, torpor
from torpor import faults
sys.path.insert(0, {path!r})
import levels
faults.from_env()
with torpor.Runtime({url!r}, {arts!r}) as rt:
    res = rt.run("lv.node", 2, run_id="top")
    print("RESULT", res.status, res.outcome)
"""


@pytest.mark.proc
@pytest.mark.parametrize("point", ["children.cancelled@1", "children.cancelled@2"])
def test_sigkill_while_a_cancel_goes_down_the_tree(
    point: str, store_url: str, tmp_path: Path
) -> None:
    """A cancel of the root, with the process killed right after a level posted the cancel
    of its child: resumed, every level ends cancelled, each cancel recorded once."""
    (tmp_path / "levels.py").write_text(textwrap.dedent(LEVELS))
    code = CANCEL.format(path=str(tmp_path), url=store_url, arts=str(tmp_path / "a"))
    first = run_python(code, cwd=tmp_path)
    assert "RESULT waiting None" in first.stdout, first.stdout + first.stderr
    with torpor.Client(store_url) as c:
        c.cancel("top", by="alice", reason="enough")
    killed = run_python(code, cwd=tmp_path, env={"TORPOR_CRASH_AT": point})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    again = run_python(code, cwd=tmp_path)
    assert "RESULT finished cancelled" in again.stdout, again.stdout + again.stderr
    mid, low = "top.child:lv.node", "top.child:lv.node.child:lv.node"
    with torpor.Client(store_url) as c:
        for rid in ("top", mid, low):
            assert c.get(rid).outcome == "cancelled", rid
            cancels = [e for e in c.events(rid) if e.type == "cancel_requested"]
            assert len(cancels) == 1, (rid, cancels)
        assert "parent run top" in c.state(mid).cancel_reason
        assert f"parent run {mid}" in c.state(low).cancel_reason
