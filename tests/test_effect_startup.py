"""An effect's ``Timeout(kill=True)`` counts from its function's start, not from the child
process's start-up (issue 36 item 5): under load, every attempt of ``Timeout(2, kill=True)``
was killed while its interpreter was still importing, and reported as a hung call. The module
here sleeps at import for longer than the timeout, so the start-up outlasts it by construction
(load only makes it longer); the function itself returns at once."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import torpor
from torpor.errors import AttemptNotStartedError

SLOW = """
import time

time.sleep({sleep})  # a slow start-up: the child imports this module before the call


def send(counter):
    with open(counter, "a") as f:
        f.write("call\\n")
    return "sent"
"""


@pytest.fixture
def slow_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    def make(sleep: float) -> Any:
        name = f"startup_slow_{str(sleep).replace('.', '_')}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(SLOW.format(sleep=sleep)))
        monkeypatch.syspath_prepend(str(tmp_path))
        sys.modules.pop(name, None)
        # The parent imports it quickly: only the child's start-up pays the sleep.
        source = (tmp_path / f"{name}.py").read_text()
        fast = source.replace(f"time.sleep({sleep})", "pass")
        module = type(sys)(name)
        module.__file__ = str(tmp_path / f"{name}.py")
        exec(compile(fast, module.__file__, "exec"), module.__dict__)
        sys.modules[name] = module
        return module

    return make


@torpor.workflow("startup.send")
def send_flow(run: torpor.Run, cfg: dict[str, Any]) -> Any:
    module = sys.modules[cfg["module"]]
    return run.effect(
        "send",
        module.send,
        cfg["counter"],
        timeout=torpor.Timeout(cfg["timeout_s"], kill=True, startup_s=cfg["startup_s"]),
        retry=torpor.Retry(attempts=2, initial=0.0),
    )


@pytest.mark.proc
def test_the_timeout_starts_when_the_function_does(
    db_url: str, tmp_path: Path, slow_module: Any
) -> None:
    mod = slow_module(3.0)  # the child's start-up takes at least 3 s: longer than the timeout
    counter = tmp_path / "calls"
    cfg = {"module": mod.__name__, "counter": str(counter), "timeout_s": 2.0, "startup_s": 300}
    with torpor.Runtime(db_url) as rt:
        res = rt.run("startup.send", cfg, run_id="slow-start")
    assert res.outcome == "succeeded", res  # before: killed during start-up, three times
    assert res.result == "sent"
    assert counter.read_text().count("call") == 1


@pytest.mark.proc
def test_a_child_that_never_starts_its_function_is_absent_not_hung(
    db_url: str, tmp_path: Path, slow_module: Any
) -> None:
    mod = slow_module(600.0)  # never starts within the start-up bound
    counter = tmp_path / "calls"
    cfg = {"module": mod.__name__, "counter": str(counter), "timeout_s": 2.0, "startup_s": 0.5}
    with torpor.Runtime(db_url) as rt:
        res = rt.run("startup.send", cfg, run_id="no-start")
        events = torpor.Client(rt.store).events("no-start")
    assert res.outcome == "failed", res  # nothing happened: known state, nothing in doubt
    assert AttemptNotStartedError.__name__ in res.reason and "never ran" in res.reason
    assert not counter.exists()
    failed = [e for e in events if e.type == "effect_failed"]
    assert len(failed) == 2  # retried once (absent is safe to retry), then recorded failed
    assert "effect_reconciled" not in [e.type for e in events]  # no reconcile needed
