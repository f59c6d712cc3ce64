"""Message dispositions (G11) with real processes, on both backends: the ``torpor`` CLI as a
person uses it, a run executing in its own process, worker processes. The in-process versions
on a fake clock are in ``tests/test_messages.py``.

- a cancel sent while a run's last step runs ends the run ``cancelled``, its effect standing;
- a cancel posted while the executing process is about to record its outcome is taken (the
  outcome append refuses while a message is pending), never left unread;
- ``signal`` says where each answer went; answers addressed to a wait go to it once or are
  refused; ``show`` lists buffered messages with their age and refused ones with why;
- two workers, both busy when a wait's deadline passes, then a signal a moment after it: the
  worker that finally resumes the run takes the timeout branch (decided by arrival).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import torpor
from conftest import HANG_S, ROOT
from runtime_kit import Lab, wait_for_file

pytestmark = pytest.mark.slow

FLOWS = """
def hold(name, release):
    \"\"\"A step that blocks until the file ``release`` exists.\"\"\"
    ledger("step", name=name)
    while not _os.path.exists(release):
        _time.sleep(0.01)
    return name


@torpor.workflow(name="mp.last", version="1")
def last(run, cfg):
    run.effect("notify", send, "hello", reconcile=find_sent)
    run.step("last", hold, "last", cfg["release"])
    return "done"


@torpor.workflow(name="mp.quick", version="1")
def quick(run, _):
    run.step("only", work, "only", 1)
    return "done"


@torpor.workflow(name="mp.questions", version="1")
def questions(run, _):
    return [run.wait_for("Q1"), run.wait_for("Q2")]


@torpor.workflow(name="mp.gate", version="1")
def gate(run, cfg):
    try:
        answer = run.wait_for("go", timeout=timedelta(seconds=cfg["timeout_s"]))
    except torpor.WaitTimeout:
        run.effect("escalate", send, "escalate", reconcile=find_sent)
        return "timeout"
    run.effect("proceed", send, f"proceed {answer}", reconcile=find_sent)
    return "answered"


@torpor.workflow(name="mp.blocker", version="1")
def blocker(run, cfg):
    run.step("hold", hold, "hold", cfg["release"])
    return "released"
"""


@pytest.fixture
def lab(tmp_path: Path, store_url: str) -> Lab:
    lab = Lab(tmp_path, store_url, tmp_path / "ledger.jsonl")
    lab.module("mpf", FLOWS)
    return lab


def cli(lab: Lab, *args: str) -> subprocess.CompletedProcess[str]:
    """``torpor --db URL ARGS`` as a person runs it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(lab.tmp), str(ROOT / "src")])
    env["COLUMNS"] = "250"
    return subprocess.run(
        [sys.executable, "-m", "torpor.cli", "--db", lab.db_url, *args],
        cwd=lab.tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )


def ok(lab: Lab, *args: str) -> str:
    p = cli(lab, *args)
    assert p.returncode == 0 and "Traceback" not in p.stderr, (args, p.stdout, p.stderr)
    return p.stdout


def refused(lab: Lab, *args: str) -> str:
    """The command fails with one ``error:`` line (and no traceback); returns it."""
    p = cli(lab, *args)
    assert p.returncode == 1, (args, p.stdout, p.stderr)
    assert p.stderr.startswith("error: ") and p.stderr.count("\n") == 1, p.stderr
    return p.stderr


def until(pred: Any, what: str, timeout: float = HANG_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


# ------------------------------------------------------------------ 2. cancels are never dropped


def test_a_cancel_sent_while_the_last_step_runs_ends_the_run_cancelled(lab: Lab) -> None:
    release = lab.tmp / "release"
    proc = lab.spawn("mpf", "c1", workflow="mp.last", input={"release": str(release)})
    until(lambda: lab.ledger("step", name="last") or proc.poll() is not None, "the last step")
    out = ok(lab, "cancel", "c1", "--as", "ops", "--reason", "wrong target")
    assert "it ends cancelled at its next boundary" in out
    release.touch()
    res = lab.collect(proc)
    assert res.result is not None, res.describe()
    assert res.result["outcome"] == "cancelled", res.result
    assert "cancelled by ops: wrong target" in res.result["reason"]
    types = [e.type for e in lab.events("c1")]
    assert types.count("cancel_requested") == 1 and types[-1] == "run_finished"
    assert [e["key"] for e in lab.ledger("effect")] == ["c1/notify"]  # it stands, once
    shown = ok(lab, "show", "c1")
    assert "cancelled" in shown and "c1/notify" in shown and "observed" in shown
    with lab.client() as c:
        assert c.inbox("c1") == []
    err = refused(lab, "signal", "c1", "go")
    assert "already finished: cancelled" in err


def test_a_cancel_posted_while_the_outcome_is_recorded_is_taken(lab: Lab) -> None:
    """The executing process is paused (a fault plan's delay) after it has taken the messages
    pending at the boundary of finishing and just before it appends its outcome; a cancel is
    posted then. The outcome append refuses while a message is pending: the process takes the
    cancel and the run ends cancelled — no outcome crosses a message."""
    trace = lab.tmp / "trace"
    env = {"TORPOR_FAULTS": "delay:append.before@2=2", "TORPOR_TRACE_POINTS": str(trace)}
    proc = lab.spawn("mpf", "r1", workflow="mp.quick", env=env)
    wait_for_file(trace)
    until(lambda: trace.read_text().split().count("append.before") >= 2, "the outcome's append")
    with lab.client() as c:
        assert c.state("r1").status == "running"  # the step is recorded, the outcome is not
        c.cancel("r1", by="ops", reason="now")
    res = lab.collect(proc)
    assert res.result is not None, res.describe()
    assert res.result["outcome"] == "cancelled", res.result
    with lab.client() as c:
        assert c.inbox("r1") == []
        st = c.state("r1")
        assert st.cancel_requested and st.outcome == "cancelled"


# ------------------------------------------------------------------ 3. answers go to their wait


@torpor.workflow(name="mp.questions.here", version="1")
def questions_here(run: torpor.Run, _: Any) -> list[Any]:
    return [run.wait_for("Q1"), run.wait_for("Q2")]


def test_signal_says_where_each_answer_went_and_show_lists_the_rest(lab: Lab) -> None:
    """A step asks Q1 then Q2 (the run executes here; a person uses the CLI)."""
    rt = torpor.Runtime(lab.db_url, str(lab.tmp / "artifacts"))
    try:
        assert rt.run(questions_here, None, run_id="q").wait_kind == "signal"
        shown = ok(lab, "show", "q")
        assert "wait:Q1" in shown and "torpor signal q --wait-id wait:Q1" in shown

        out = ok(lab, "signal", "q", "Q9", "--payload", '"nine"', "--id", "m-q9")
        assert "buffered: no wait for Q9 yet" in out
        sent = json.loads(ok(lab, "signal", "q", "--wait-id", "wait:Q1", "-p", "1", "--json"))
        assert (sent["name"], sent["status"], sent["wait_id"]) == ("Q1", "waiting", "wait:Q1")
        err = refused(lab, "signal", "q", "--wait-id", "wait:Q1", "-p", "2")
        assert f"already answered (by message {sent['message_id']})" in err
        assert "no open wait 'wait:Q5'" in refused(lab, "signal", "q", "--wait-id", "wait:Q5")

        assert rt.resume("q").status == "waiting"  # on Q2
        out = ok(lab, "signal", "q", "Q1", "--payload", '"again"', "--id", "m-q1")
        assert "buffered: no wait for Q1 yet" in out
        shown = ok(lab, "show", "q")
        lines = [ln for ln in shown.splitlines() if ln.startswith(("m-q9", "m-q1"))]
        assert len(lines) == 2 and all("ago" in ln and "buffered" in ln for ln in lines), shown

        with lab.client() as c:
            sent2 = c.send_signal("q", None, 2, wait_id="wait:Q2")
            with pytest.raises(torpor.errors.InboxError, match="already answered"):
                c.send_signal("q", "Q1", "late", wait_id="wait:Q1")
            done = rt.resume("q")
            assert (done.outcome, done.result) == ("succeeded", [1, 2]), done
            taken = {
                e.payload.wait_id: e.payload.signal_id  # type: ignore[attr-defined]
                for e in c.events("q")
                if e.type == "wait_completed"
            }
            assert taken == {"wait:Q1": sent["message_id"], "wait:Q2": sent2.message_id}
            views = {m.message_id: m for m in c.messages("q")}
            assert [views[m].status for m in ("m-q9", "m-q1")] == ["refused", "refused"]
            assert views["m-q9"].reason.startswith("unused: the run ended succeeded")
        assert "already finished: succeeded" in refused(lab, "signal", "q", "Q9")
    finally:
        rt.close()


# ------------------------------------------------------------------ 1. two workers, a deadline


@pytest.fixture
def workers(lab: Lab) -> Iterator[list[subprocess.Popen[str]]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(lab.tmp), str(ROOT / "src")])
    procs: list[subprocess.Popen[str]] = []
    for i in range(2):
        log = open(lab.tmp / f"worker-{i}.log", "w")  # noqa: SIM115 (closed with the process)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "torpor.cli",
                    "--db",
                    lab.db_url,
                    "worker",
                    "--import",
                    "mpf",
                    "--concurrency",
                    "1",
                    "--poll",
                    "0.1",
                ],
                cwd=lab.tmp,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    yield procs
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_two_busy_workers_and_a_signal_just_after_the_deadline(
    lab: Lab, workers: list[subprocess.Popen[str]]
) -> None:
    """Both workers are busy when the wait's deadline passes; the signal lands 0.3 s after it;
    then a worker is free and resumes the run: the timeout branch runs (its effect once), and
    the late signal is kept and finally refused as unused, naming the deadline it missed."""
    release = lab.tmp / "release"
    with lab.client() as c:
        store = c.store
        from torpor.history import RunStarted

        def start(rid: str, workflow: str, inp: Any) -> None:
            store.create_run(rid, RunStarted(workflow=workflow, version="1", input=inp))

        # Calibration, in this test: how long an idle worker takes to pick a run up and end it.
        # The gate's timeout is ten of those (at least 4 s), so on a loaded machine both
        # workers still get busy before its deadline.
        t0 = time.monotonic()
        start("cal", "mp.quick", None)
        until(lambda: c.get("cal").status == "finished", "the calibration run")
        pickup_s = time.monotonic() - t0
        start("g", "mp.gate", {"timeout_s": max(4.0, 10 * pickup_s)})
        until(lambda: c.get("g").status == "waiting", "the gate to wait")
        deadline_ms = c.state("g").wait.deadline_ms  # type: ignore[union-attr]
        start("b1", "mp.blocker", {"release": str(release)})
        start("b2", "mp.blocker", {"release": str(release)})
        until(lambda: len(lab.ledger("step", name="hold")) == 2, "both workers to be busy")
        assert store.now_ms() < deadline_ms, "the workers were not busy before the deadline"
        time.sleep(max(0.0, (deadline_ms - store.now_ms()) / 1000) + 0.3)
        c.signal("g", "go", "yes", message_id="late-go")
        release.touch()
        until(lambda: c.get("g").status == "finished", "the gate to finish")
        st = c.state("g")
        assert (st.outcome, st.result) == ("succeeded", "timeout"), st.outcome_reason
        assert [e["key"] for e in lab.ledger("effect")] == ["g/escalate"]
        [late] = [m for m in c.messages("g") if m.message_id == "late-go"]
        assert late.status == "refused" and "after the deadline of wait wait:go" in late.reason
        assert c.inbox("g") == []
        torpor.history.fold(c.events("g"))
