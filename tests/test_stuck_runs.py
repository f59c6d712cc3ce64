"""Nothing loops unseen (G11): an error that running the code again would repeat ends the run
on the first attempt, a step that kills its process every time is parked, and a run that
cannot proceed says why where people look (``ls``, ``show``) — on both backends, under a real
worker process as well as in-process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import torpor
from conftest import HANG_S, ROOT

FLOWS = """
import os, signal
import torpor


class Opaque:
    pass


@torpor.workflow("stuck.big")
def big(run, n):
    run.step("small", lambda: "ok")
    return run.step("huge", lambda: {"blob": "x" * n})


@torpor.workflow("stuck.opaque")
def opaque(run, _):
    run.step("before", lambda: 1)
    return run.step("opaque", lambda: {"items": [1, Opaque()]})


def die_unless_fixed(marker):
    if not os.path.exists(marker):
        os.kill(os.getpid(), signal.SIGKILL)
    return "fixed"


@torpor.workflow("stuck.poison")
def poison(run, marker):
    run.step("before", lambda: 1)
    out = run.step("poison", die_unless_fixed, marker)
    run.step("after", lambda: 2)
    return out


def outer_body(run, counter, deaths):
    run.step("inner", lambda: "stored")  # a step nested in a step (an artifact, say)
    n = int(open(counter).read()) if os.path.exists(counter) else 0
    if n < deaths:
        open(counter, "w").write(str(n + 1))
        os.kill(os.getpid(), signal.SIGKILL)
    return n


@torpor.workflow("stuck.nested")
def nested(run, args):
    run.step("before", lambda: 1)
    out = run.step("outer", lambda: outer_body(run, *args))
    return run.step("after", lambda: out)
"""

WORKER = """
import importlib, sys
import torpor
from torpor.worker import Worker
sys.path.insert(0, {tmp!r})
importlib.import_module("stuckflows")
rt = torpor.Runtime({url!r}, lease_ttl_s=2.0)
stats = Worker(rt, concurrency=1, poll_s=0.05).run(until_idle=True, max_seconds={secs!r})
print("STATS", stats.finished, stats.errors, flush=True)
"""


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    (tmp_path / "stuckflows.py").write_text(FLOWS)
    sys.path.insert(0, str(tmp_path))
    import importlib

    importlib.import_module("stuckflows")
    yield tmp_path
    sys.path.remove(str(tmp_path))


def _worker(url: str, tmp: Path, env: dict[str, str], secs: float = 20) -> str:
    full = dict(os.environ, PYTHONPATH=str(ROOT / "src"), **env)
    cp = subprocess.run(
        [sys.executable, "-c", WORKER.format(tmp=str(tmp), url=url, secs=secs)],
        env=full,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    return cp.stdout + cp.stderr


@pytest.mark.slow
@pytest.mark.parametrize("under", ["runtime", "worker"])
def test_an_unrecordable_result_ends_the_run_failed_on_the_first_attempt(
    store_url: str, flows: Path, under: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step result over the payload limit (the setting, not a fixed size) or that cannot be
    serialized is the run's problem, not the infrastructure's: the run ends failed, with the
    step, the field path, the type and the size in the reason — not retried for ever."""
    from torpor import serde

    limit = 4096
    monkeypatch.setattr(serde, "MAX_PAYLOAD_BYTES", limit)
    rt = torpor.Runtime(store_url)
    try:
        rt.start("stuck.big", limit * 2, run_id="big")
        rt.start("stuck.opaque", None, run_id="opaque")
        if under == "runtime":
            for rid in ("big", "opaque"):
                assert rt.resume(rid).outcome == "failed"
        else:
            log = _worker(store_url, flows, {"TORPOR_MAX_PAYLOAD_BYTES": str(limit)})
            assert "STATS 2 0" in log, log
        big, opq = rt.store.load("big"), rt.store.load("opaque")
        assert big.outcome == "failed" and opq.outcome == "failed"
        assert "step 'huge'" in big.outcome_reason and "dict" in big.outcome_reason
        assert str(limit) in big.outcome_reason and "bytes" in big.outcome_reason
        assert "step 'opaque'" in opq.outcome_reason
        assert "$.items[1]" in opq.outcome_reason and "Opaque" in opq.outcome_reason
        # Recorded once: the run's history has one outcome and no retry of the step.
        assert [e.type for e in rt.store.read_events("big")].count("run_finished") == 1
    finally:
        rt.close()


RESUME = """
import sys
import textwrap
import time
import torpor
sys.path.insert(0, {tmp!r})
import stuckflows
res = torpor.Runtime({url!r}).resume({run_id!r})
print("RESULT", res.status, res.outcome, flush=True)
"""


def _resume_in_a_process(url: str, tmp: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RESUME.format(tmp=str(tmp), url=url, run_id=run_id)],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )


@pytest.mark.slow
def test_a_step_that_kills_its_process_every_time_is_parked(
    store_url: str, flows: Path, tmp_path: Path
) -> None:
    """A step whose process dies on every attempt: after the crash limit (5 by default) the run
    ends blocked naming the step, the count and when it was last seen — not running for ever;
    ``torpor retry RUN --step X`` reopens it after a fix, and it finishes."""
    marker = tmp_path / "fixed"
    rt = torpor.Runtime(store_url)
    try:
        rt.start("stuck.poison", str(marker), run_id="poison")
        deaths = 0
        for _ in range(10):
            cp = _resume_in_a_process(store_url, flows, "poison")
            if cp.returncode != -9:
                break
            deaths += 1
        assert "RESULT finished blocked" in cp.stdout, cp.stdout + cp.stderr
        st = rt.store.load("poison")
        assert "step 'poison' crashed its process 5 times" in st.outcome_reason
        assert "last seen 20" in st.outcome_reason
        assert "torpor retry poison --step poison" in st.outcome_reason
        # Each crash after the first left a recorded attempt; the untraced first one is the
        # crash that made the next execution record step starts before running them.
        assert deaths == 6
        starts = [e for e in rt.store.read_events("poison") if e.type == "step_started"]
        assert [e.payload.attempt for e in starts] == [1, 2, 3, 4, 5]  # type: ignore[attr-defined]
        # A person fixes the cause and retries the step: it runs again, and the run finishes.
        marker.write_text("ok")
        retry = ["retry", "poison", "--step", "poison", "--as", "alice"]
        cli = subprocess.run(
            [sys.executable, "-m", "torpor.cli", "--db", store_url, *retry],
            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert "torpor resume poison" in cli.stdout
        cp = _resume_in_a_process(store_url, flows, "poison")
        assert "RESULT finished succeeded" in cp.stdout, cp.stdout + cp.stderr
        assert rt.store.load("poison").result == "fixed"
    finally:
        rt.close()


@pytest.mark.slow
def test_a_step_with_a_nested_step_that_crashed_resumes(
    store_url: str, flows: Path, tmp_path: Path
) -> None:
    """A step whose body completed a nested step and then crashed, three times over: each
    takeover replays the nested completion and runs the outer step again (its start recorded
    after the replay, not refused as a divergence), and the run finishes."""
    counter = tmp_path / "deaths"
    rt = torpor.Runtime(store_url)
    try:
        rt.start("stuck.nested", [str(counter), 3], run_id="nested")
        codes = [_resume_in_a_process(store_url, flows, "nested") for _ in range(4)]
        assert [c.returncode for c in codes] == [-9, -9, -9, 0], codes[-1].stderr
        assert "RESULT finished succeeded" in codes[-1].stdout, codes[-1].stderr
        st = rt.store.load("nested")
        assert st.result == 3 and st.attention == ""
        done = [e.step_id for e in rt.store.read_events("nested") if e.type == "step_completed"]
        assert done == ["before", "inner", "outer", "after"]
    finally:
        rt.close()


def _module(tmp: Path, name: str, version: str, extra_step: bool = False) -> None:
    """A workflow module ``name`` whose ``stuck.versioned`` is at ``version``; with
    ``extra_step`` (declared compatible with version 1) a step is inserted before the signal
    wait: a change that runs recorded under version 1 diverge from."""
    compat = ", compatible=['1']" if extra_step else ""
    lines = [
        "import torpor",
        "",
        f"@torpor.workflow('stuck.versioned', version={version!r}{compat})",
        "def versioned(run, n):",
        "    run.step('a', lambda: n)",
        *(["    run.step('inserted', lambda: 0)"] if extra_step else []),
        "    got = run.wait_for('go')",
        "    run.step('b', lambda: got)",
        "    return got",
    ]
    (tmp / f"{name}.py").write_text("\n".join(lines) + "\n")


def _cli(
    url: str, tmp: Path, *args: str, timeout: float = HANG_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torpor.cli", "--db", url, *args],
        cwd=tmp,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp), str(ROOT / "src")])),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_blockers_are_named_where_people_look(store_url: str, tmp_path: Path) -> None:
    """A run parked under a version no running code accepts, or whose replay diverged, gets a
    needs-attention detail — recorded once, shown by ls and show, cleared when the run proceeds
    — and messages that arrived meanwhile are kept and delivered once it can run again."""
    _module(tmp_path, "v1", "1")
    _module(tmp_path, "v2", "2")
    _module(tmp_path, "v3", "3", extra_step=True)
    assert (
        _cli(
            store_url,
            tmp_path,
            "start",
            "stuck.versioned",
            "-i",
            "7",
            "--import",
            "v1",
            "--run-id",
            "vr",
        ).returncode
        == 0
    )
    c = torpor.Client(store_url)
    c.signal("vr", "go", "early")  # an answer arrives, after a deploy of version 2 (below)
    # A deploy of version 2 (not compatible): a worker cannot take the run; it names it.
    full = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT / "src")]))
    worker = subprocess.run(
        [
            sys.executable,
            "-m",
            "torpor.cli",
            "--db",
            store_url,
            "worker",
            "--import",
            "v2",
            "--until-idle",
            "--poll",
            "0.05",
        ],
        cwd=tmp_path,
        env=full,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert worker.returncode == 0, worker.stdout + worker.stderr
    try:
        rec = c.get("vr")
        assert rec.attention and "version mismatch (recorded 1, running 2)" in rec.attention
        ls = _cli(store_url, tmp_path, "ls")
        assert "version mismatch (recorded 1, running 2)" in ls.stdout, ls.stdout
        show = _cli(store_url, tmp_path, "show", "vr")
        assert "needs attention" in show.stdout and "version mismatch" in show.stdout
        # Resumed by hand under version 2: refused, and noted once (not once per attempt).
        for _ in range(2):
            assert _cli(store_url, tmp_path, "resume", "vr", "--import", "v2").returncode == 1
        notes = [e for e in c.events("vr") if e.type == "attention_needed"]
        assert len(notes) == 1, notes
        # Version 3 is compatible with 1 but inserts a step: the replay diverges; named too.
        res = _cli(store_url, tmp_path, "resume", "vr", "--import", "v3")
        assert res.returncode == 1 and "NonDeterminism" not in res.stdout
        assert (c.get("vr").attention or "").startswith("replay diverged")
        # The code it was recorded under runs it: it proceeds, the detail is cleared, the
        # message that arrived meanwhile is delivered.
        res = _cli(store_url, tmp_path, "resume", "vr", "--import", "v1")
        assert res.returncode == 0, res.stdout + res.stderr
        assert c.get("vr").attention is None
        st = c.state("vr")
        assert (st.outcome, st.result, st.attention) == ("succeeded", "early", "")
    finally:
        c.close()


HOLDER = """
import sys, time
sys.path.insert(0, {tmp!r})
import torpor, v1
from torpor.owners import new_owner_id
store = torpor.open_store({url!r})
lease = store.acquire_lease("held", new_owner_id(), {ttl!r})
print("HELD", flush=True)
time.sleep({hold!r})
"""


@pytest.mark.slow
def test_an_expired_lease_is_resumable_and_resume_can_wait_for_a_live_one(
    store_url: str, tmp_path: Path
) -> None:
    """ls says "resumable (holder gone)" once an unreleased lease expired; resume --wait waits
    for a live holder's lease to expire and then takes the run over; a worker takes over a
    holder proven dead on its host at once, without waiting out the lease."""
    _module(tmp_path, "v1", "1")
    c = torpor.Client(store_url)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT / "src")]))
    try:
        slowest_cli_s = 0.0  # calibration: how long a CLI command takes on this machine now
        for rid in ("held", "dead", "gone"):
            t0 = time.monotonic()
            assert (
                _cli(
                    store_url,
                    tmp_path,
                    "start",
                    "stuck.versioned",
                    "-i",
                    "1",
                    "--import",
                    "v1",
                    "--run-id",
                    rid,
                ).returncode
                == 0
            )
            slowest_cli_s = max(slowest_cli_s, time.monotonic() - t0)
        # A live holder with a lease that it never renews (a paused process, say): 8 s, or
        # three CLI commands' time where the machine is slow, so the refusal below comes while
        # it is still held (at load 20 a CLI took longer than 8 s to start).
        ttl = max(8.0, 3 * slowest_cli_s)
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                HOLDER.format(tmp=str(tmp_path), url=store_url, ttl=ttl, hold=ttl + 30),
            ],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout is not None and holder.stdout.readline().strip() == "HELD"
        try:
            assert _cli(store_url, tmp_path, "resume", "held", "--import", "v1").returncode == 75
            t0 = time.monotonic()
            waited = _cli(store_url, tmp_path, "resume", "held", "--wait", "--import", "v1")
            assert waited.returncode == 0, waited.stdout + waited.stderr
            assert "waiting for the lease to expire" in waited.stderr
            assert time.monotonic() - t0 >= 1.0
            assert c.get("held").status == "waiting"  # it ran on to its wait
        finally:
            holder.kill()
            holder.wait()
        # A live holder whose lease expired (it stopped renewing): resumable.
        gone = subprocess.Popen(
            [
                sys.executable,
                "-c",
                HOLDER.format(tmp=str(tmp_path), url=store_url, ttl=0.5, hold=30).replace(
                    '"held"', '"gone"'
                ),
            ],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert gone.stdout is not None and gone.stdout.readline().strip() == "HELD"
            time.sleep(0.7)
            line = next(
                x for x in _cli(store_url, tmp_path, "ls").stdout.splitlines() if "gone" in x
            )
            assert "resumable: holder gone" in line, line
        finally:
            gone.kill()
            gone.wait()
        # A holder killed with its lease live: ls says so; a worker takes it over at once.
        killed = subprocess.Popen(
            [
                sys.executable,
                "-c",
                HOLDER.format(tmp=str(tmp_path), url=store_url, ttl=3600, hold=30).replace(
                    '"held"', '"dead"'
                ),
            ],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert killed.stdout is not None and killed.stdout.readline().strip() == "HELD"
        killed.kill()
        killed.wait()
        assert "holder dead" in _cli(store_url, tmp_path, "ls").stdout
        w = _cli(store_url, tmp_path, "worker", "--import", "v1", "--until-idle", "--poll", "0.05")
        assert w.returncode == 0, w.stdout + w.stderr
        assert c.get("dead").status == "waiting"  # taken over and run to its wait at once
    finally:
        c.close()


# --------------------------------------------------------------------------- smaller ones

SMALL = """
import os
import torpor


@torpor.workflow("stuck.small")
def small(run, n):
    run.step("a", lambda: n)
    run.sleep(3600.0)  # due only when a clock an hour ahead says so (FINISH below)
    return run.step("b", lambda: n + 1)


@torpor.workflow("stuck.effect")
def effect(run, path):
    run.step("a", lambda: 1)
    return run.effect("touch", lambda: open(path, "a").write("x"), reconcile=None)
"""

# Finishes s1 from a process whose clock is an hour ahead: the sleep is due there.
FINISH = """
import time
import small, torpor
from torpor.testing import FakeClock
rt = torpor.Runtime({url!r}, clock=FakeClock(time.time() + 3601))
print(rt.resume("s1", follow_timers=False).status)
"""


def test_a_connection_lost_around_a_commit_leaves_a_trace(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append the store had to read back after its connection broke around the commit is
    counted on the run (``show`` prints it): infrastructure trouble leaves a trace."""
    from torpor import faults

    @torpor.workflow("stuck.trace")
    def trace(run: torpor.Run, _: object) -> int:
        return int(run.step("a", lambda: 1)) + int(run.step("b", lambda: 2))

    rt = torpor.Runtime(store_url)
    try:
        faults.install("break:append.committed@2")
        try:
            res = rt.run(trace, None, run_id="trace")
        finally:
            faults.reset()
        assert res.outcome == "succeeded" and res.result == 3
        assert rt.store.get_run("trace").infra_retries == 1
    finally:
        rt.close()


@pytest.mark.slow
def test_show_and_resume_say_what_is_going_on(store_url: str, tmp_path: Path) -> None:
    """show on a finished run prints no stale "establishing"; show of a run whose holder is
    alive says "in progress (held by …)"; resume of a sleeping run says what it waits for and
    until when; the hint after --no-follow names --import for a run started by a script."""
    (tmp_path / "small.py").write_text(SMALL)
    started = _cli(
        store_url,
        tmp_path,
        "start",
        "stuck.small",
        "-i",
        "1",
        "--import",
        "small",
        "--run-id",
        "s1",
        "--no-follow",
    )
    assert started.returncode == 0, started.stdout + started.stderr
    # The resume stays with the sleeping run; once it has said so (the sign, read from its
    # stderr), another process whose clock is an hour ahead finishes the run, and the staying
    # resume, polling, sees it finished (or running, and waits for the finisher's lease). No
    # real timer has to outlast a loaded CLI's start.
    resuming = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torpor.cli",
            "--db",
            store_url,
            "resume",
            "s1",
            "--import",
            "small",
            "--wait",  # the finisher may hold the lease when this resume looks again
        ],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT / "src")])),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    guard = threading.Timer(HANG_S, resuming.kill)  # a hang guard: the line never came
    guard.start()
    try:
        assert resuming.stderr is not None
        said = ""
        while "staying to continue it" not in said.replace("\n", " "):
            line = resuming.stderr.readline()  # blocks until a line, or '' once it exits
            if not line:
                break
            said += line
        said = said.replace("\n", " ")
        assert "sleeps until" in said and "staying to continue it" in said, said
        finish = subprocess.run(
            [sys.executable, "-c", FINISH.format(url=store_url)],
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT / "src")])),
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        assert finish.stdout.strip() == "finished", finish.stdout + finish.stderr
        out, err = resuming.communicate(timeout=HANG_S)  # hang guard
    finally:
        guard.cancel()
        resuming.kill()
    assert resuming.returncode == 0, out + said + err
    show = _cli(store_url, tmp_path, "show", "s1")
    assert "succeeded" in show.stdout and "establishing" not in show.stdout, show.stdout
    # A live holder: in progress, not "reconcile effects in doubt".
    c = torpor.Client(store_url)
    try:
        c.store.create_run("s2", torpor.history.RunStarted(workflow="stuck.small", version="1"))
        c.store.acquire_lease("s2", "elsewhere:1:x", 600)
        held = _cli(store_url, tmp_path, "show", "s2")
        assert "in progress (held by elsewhere:1:x)" in held.stdout, held.stdout
    finally:
        c.close()
    # A run started by a script (its workflow module is __main__): the hint names --import.
    script = tmp_path / "script.py"
    script.write_text(
        SMALL + f"\nprint(torpor.Runtime({store_url!r}).run(small, 1, run_id='s3', "
        "follow_timers=False).status)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cp = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert cp.stdout.strip() == "waiting", cp.stdout + cp.stderr
    hint = _cli(store_url, tmp_path, "resume", "s3", "--import", "small", "--no-follow")
    assert "--import MODULE" in hint.stdout, hint.stdout + hint.stderr
