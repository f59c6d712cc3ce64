"""A cancel reaches a hung step (issue 36 item 1, field card C34; G2, G11).

``Client.cancel`` on a run whose step does not return is recorded at once (not when the step
returns); after the cancel's grace the attempts that can be stopped are (a child process is
killed), and a step that cannot be stopped — one running in the executing thread, or an
effect's attempt in a thread — is noted ``cancelling (step S not responding since T)`` while
its execution keeps the lease. The outcome is ``cancelled``, or ``unresolved`` when an effect
was in flight and nothing says whether it happened. Every wait here is for a sign (the step
entered, an event recorded), under the HANG_S guard; the grace is shorter than the hold by
construction (the step is released only after the note was read).
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import torpor
from conftest import HANG_S

ENTERED = threading.Event()
RELEASE = threading.Event()
AFTER: list[str] = []


def _block() -> str:
    ENTERED.set()
    RELEASE.wait(HANG_S)
    return "returned"


@torpor.workflow("cancel_hung.step")
def hung_step(run: torpor.Run, _: Any) -> str:
    out = run.step("hang", _block)
    AFTER.append(run.step("after", lambda: "after"))
    return str(out)


@torpor.workflow("cancel_hung.thread_effect")
def hung_thread_effect(run: torpor.Run, _: Any) -> str:
    out = run.effect("send", _block, timeout=torpor.Timeout(HANG_S, grace_s=HANG_S))
    AFTER.append(run.step("after", lambda: "after"))
    return str(out)


@torpor.workflow("cancel_hung.async")
async def hung_async(run: torpor.Run, _: Any) -> str:
    async def forever() -> str:
        ENTERED.set()
        await asyncio.sleep(HANG_S)
        return "slept"

    out = await run.astep("hang", forever)
    AFTER.append("after")
    return str(out)


@pytest.fixture(autouse=True)
def _reset() -> Any:
    ENTERED.clear()
    RELEASE.clear()
    AFTER.clear()
    yield
    RELEASE.set()


def _until(what: str, check: Any) -> Any:
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"hang guard: never saw {what}")


def _start(rt: torpor.Runtime, wf: str) -> tuple[str, threading.Thread, list[Any]]:
    rid = rt.start(wf)
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(rt.execute(rid)), daemon=True)
    t.start()
    assert ENTERED.wait(HANG_S), "the step never started"
    return rid, t, out


@pytest.mark.parametrize("wf", ["cancel_hung.step", "cancel_hung.thread_effect"])
def test_a_cancel_of_a_hung_step_is_recorded_at_once_and_noted(store_url: str, wf: str) -> None:
    rt = torpor.Runtime(store_url, lease_ttl_s=1.5, cancel_grace_s=0.2)
    client = torpor.Client(rt.store)
    try:
        rid, t, out = _start(rt, wf)
        client.cancel(rid, by="ops", reason="stop it")
        # Recorded while the step is still blocked: not at the step's return.
        _until("the cancel recorded", lambda: client.state(rid).cancel_requested)
        assert not RELEASE.is_set() and t.is_alive()
        note = _until("the cancelling note", lambda: client.state(rid).attention)
        assert note.startswith("cancelling (step ")
        assert "not responding since" in note
        rec = client.get(rid)
        assert rec.status == "running" and rec.lease_owner == rt.owner  # the lease is kept (G2)
        assert rec.attention.startswith("cancelling")  # what `ls` shows
        RELEASE.set()
        t.join(HANG_S)
        assert not t.is_alive()
        res = out[0]
        assert res.outcome == "cancelled", res
        assert AFTER == []  # nothing after the hung step ran
        assert client.get(rid).lease_owner in (None, "")
        types = [e.type for e in client.events(rid)]
        assert types.index("cancel_requested") < types.index("step_completed")
    finally:
        RELEASE.set()
        rt.close()


def test_an_async_workflow_is_interrupted_at_its_next_await(store_url: str) -> None:
    rt = torpor.Runtime(store_url, lease_ttl_s=1.5, cancel_grace_s=0.2)
    client = torpor.Client(rt.store)
    try:
        rid, t, out = _start(rt, "cancel_hung.async")
        client.cancel(rid, by="ops", reason="stop it")
        t.join(HANG_S)  # the sleep is HANG_S long: only the interrupt ends it sooner
        assert not t.is_alive()
        assert out[0].outcome == "cancelled", out[0]
        assert AFTER == []
        assert "hang" not in client.state(rid).steps  # interrupted: no result recorded
    finally:
        rt.close()


# A process-isolated attempt: the effect's function must be importable by name in the child.
EFFECTS = """
import os, time

def hang(started, counter):
    with open(counter, "a") as f:
        f.write("call\\n")
    open(started, "w").write(str(os.getpid()))
    time.sleep(3600)
    return "never"
"""


@pytest.fixture
def effects_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / "cancel_hung_effects.py").write_text(textwrap.dedent(EFFECTS))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("cancel_hung_effects", None)
    import cancel_hung_effects  # type: ignore[import-not-found]

    return cancel_hung_effects


RECONCILED: list[str] = []


def _absent(effect: Any) -> Any:
    RECONCILED.append(effect.idempotency_key)
    return torpor.Absent()


@torpor.workflow("cancel_hung.process")
def hung_process(run: torpor.Run, args: dict[str, Any]) -> str:
    import cancel_hung_effects  # type: ignore[import-not-found]

    out = run.effect(
        "send",
        cancel_hung_effects.hang,
        args["started"],
        args["counter"],
        timeout=torpor.Timeout(HANG_S, kill=True),
        retry=torpor.Retry(attempts=3, initial=0.0),
        reconcile=_absent if args["reconcile"] else None,
    )
    AFTER.append("after")
    return str(out)


@pytest.mark.proc
@pytest.mark.parametrize("reconcile", [True, False], ids=["reconciled", "no-reconcile"])
def test_a_cancel_kills_a_hung_process_attempt(
    db_url: str, tmp_path: Path, effects_module: Any, reconcile: bool
) -> None:
    RECONCILED.clear()
    started, counter = tmp_path / "started", tmp_path / "calls"
    rt = torpor.Runtime(db_url, lease_ttl_s=1.5, cancel_grace_s=0.2)
    client = torpor.Client(rt.store)
    try:
        args = {"started": str(started), "counter": str(counter), "reconcile": reconcile}
        rid = rt.start("cancel_hung.process", args)
        out: list[Any] = []
        t = threading.Thread(target=lambda: out.append(rt.execute(rid)), daemon=True)
        t.start()
        _until("the child started", started.exists)
        client.cancel(rid, by="ops", reason="stop it")
        t.join(HANG_S)  # the child sleeps an hour: only the kill ends it sooner
        assert not t.is_alive()
        res = out[0]
        assert counter.read_text().count("call") == 1  # killed, never retried
        assert AFTER == []
        if reconcile:
            assert res.outcome == "cancelled", res
            assert [f"{rid}/send"] == RECONCILED
        else:
            # Nothing says whether the killed call reached the world: a person settles it.
            assert res.outcome == "unresolved", res
            assert "stopped by the cancel" in res.reason
        assert client.state(rid).cancel_requested
    finally:
        rt.close()
