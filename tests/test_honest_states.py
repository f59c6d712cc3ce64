"""Every stall says why, where people look (issue 36, items 3 and 4; G11): a live-looking lease
says what happens if its holder is not responding (field card C05), and a store connection
lost while a run executes leaves a trace on the run (C23), in ``show`` and the console's run
summary alike (one report: :mod:`torpor.report.run`)."""

from __future__ import annotations

import threading
import time
from typing import Any

import torpor
from conftest import HANG_S
from torpor import faults
from torpor.history import RunStarted
from torpor.report.run import gather

ENTERED = threading.Event()
RELEASE = threading.Event()


def _hold() -> str:
    ENTERED.set()
    RELEASE.wait(HANG_S)
    return "done"


@torpor.workflow("honest.hold")
def hold(run: torpor.Run, _: Any) -> str:
    return str(run.step("hold", _hold))


def test_a_live_looking_lease_says_what_happens_next(store_url: str) -> None:
    client = torpor.Client(store_url)
    try:
        client.store.create_run("held", RunStarted(workflow="honest.hold", version="1"))
        client.store.acquire_lease("held", "elsewhere:1:x", 600)
        live = gather(client, "held").summary
        assert "(leased) by elsewhere:1:x; a live holder renews it" in live.lease
        assert "if it is not responding, the lease expires in" in live.lease
        left = int(live.lease.split("expires in ")[1].split(" s")[0])
        assert 0 < left <= 600
        assert "`torpor resume --wait held` takes the run over then" in live.lease
    finally:
        client.close()


def test_a_lost_store_connection_during_a_run_leaves_a_trace(store_url: str) -> None:
    ENTERED.clear()
    RELEASE.clear()
    rt = torpor.Runtime(store_url, lease_ttl_s=1.5)
    out: list[Any] = []
    try:
        faults.install("break:lease.renewing@1")  # the first renewal meets a dead connection
        rid = rt.start("honest.hold")
        t = threading.Thread(target=lambda: out.append(rt.execute(rid)), daemon=True)
        t.start()
        assert ENTERED.wait(HANG_S)
        first = rt.store.get_run(rid).lease_expires_at_ms
        deadline = time.monotonic() + HANG_S
        # A later renewal went through (the first one broke): the store answers again.
        while rt.store.get_run(rid).lease_expires_at_ms <= first:
            assert time.monotonic() < deadline, "hang guard: no renewal went through"
            time.sleep(0.05)
        RELEASE.set()
        t.join(HANG_S)
        assert out and out[0].outcome == "succeeded", out
    finally:
        RELEASE.set()
        faults.reset()
    try:
        client = torpor.Client(rt.store)
        assert rt.store.get_run(rid).infra_retries == 1
        live = gather(client, rid).summary
        assert live.infra.startswith("1 incident(s) with the store's connection")
    finally:
        rt.close()
