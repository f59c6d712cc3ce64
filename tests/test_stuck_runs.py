"""Nothing loops unseen (G11): an error that running the code again would repeat ends the run
on the first attempt, a step that kills its process every time is parked, and a run that
cannot proceed says why where people look (``ls``, ``show``) — on both backends, under a real
worker process as well as in-process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import torpor
from conftest import ROOT

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
        timeout=120,
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
        timeout=60,
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
            timeout=60,
        )
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert "torpor resume poison" in cli.stdout
        cp = _resume_in_a_process(store_url, flows, "poison")
        assert "RESULT finished succeeded" in cp.stdout, cp.stdout + cp.stderr
        assert rt.store.load("poison").result == "fixed"
    finally:
        rt.close()
