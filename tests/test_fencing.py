"""G3 under a real pause, on both backends: a holder frozen (SIGSTOP) past its lease while
another owner takes the run over is, once resumed, refused every kind of write — a plain append
(fenced by the lease read in the insert and by the events' key), an append that changes the run
row (a status change, a checkpoint), one that consumes an inbox message, a lease renewal and a
status restore — and nothing it tries lands.

Each write is tried twice: with the holder's own lease (its local clock already says the lease
expired: refused before any statement) and with a copy that claims to be fresh (a holder paused
between that check and its statement): refused by the database's fence."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import HANG_S, ROOT
from torpor.errors import LeaseLostError
from torpor.history import Event, LeaseAcquired, RunStarted, WarningRecorded, apply, type_of
from torpor.store import open_store

#: Real processes: the default tier on SQLite, PostgreSQL in the slow one.
pytestmark = pytest.mark.proc

HOLDER = r"""
import dataclasses, json, sys
from torpor.errors import LeaseLostError
from torpor.history import (CheckpointSaved, Event, LeaseAcquired, SignalReceived, WaitStarted,
                            WarningRecorded, apply, type_of)
from torpor.store import open_store

store = open_store(sys.argv[1])
lease = store.acquire_lease("r1", "holder:1:h", 1.0)
state = store.load("r1")

def events(st, *payloads, lease=lease):
    st = st.model_copy(deep=True)
    out = []
    for p in payloads:
        e = Event(run_id="r1", seq=st.seq + 1, type=type_of(p), payload=p,
                  at_ms=store.now_ms(), epoch=lease.epoch)
        apply(st, e)
        out.append(e)
    return out, st

evs, state = events(state, LeaseAcquired(owner=lease.owner, epoch=lease.epoch))
store.append(lease, evs, state)
for i in range(3):
    evs, state = events(state, WarningRecorded(message=f"holder {i}"))
    store.append(lease, evs, state)
print("ready", flush=True)
sys.stdin.readline()  # frozen here by SIGSTOP, past the lease, while another owner takes over

fresh = dataclasses.replace(lease, expires_at_ms=store.now_ms() + 3_600_000)
tries = {
    "plain append": lambda l: store.append(
        l, *events(state, WarningRecorded(message="stale"), lease=l)),
    "status change": lambda l: store.append(
        l, *events(state, WaitStarted(wait_id="w", kind="signal", name="go"), lease=l)),
    "checkpoint": lambda l: store.append(l, *events(state, CheckpointSaved(state=1), lease=l)),
    "consume inbox": lambda l: store.append(
        l, *events(state, SignalReceived(signal_id="m1", name="go"), lease=l),
        consumes=[("m1", state.seq + 1)]),
    "renew": lambda l: store.renew_lease(l),
    "restore status": lambda l: store.restore_status(l, state),
}
out = {}
for name, attempt in tries.items():
    for which, l in (("own", lease), ("fresh", fresh)):
        try:
            attempt(l)
            out[f"{name} ({which})"] = "written"
        except LeaseLostError as exc:
            out[f"{name} ({which})"] = "refused: " + str(exc)
print(json.dumps(out), flush=True)
"""


def test_a_paused_holder_is_refused_every_kind_of_write(store_url: str, tmp_path: Path) -> None:
    store = open_store(store_url)
    try:
        assert store.create_run("r1", RunStarted(workflow="wf", version="1"))
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, store_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert holder.stdin is not None and holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"
        os.kill(holder.pid, signal.SIGSTOP)
        try:
            time.sleep(1.2)  # the holder's 1 s lease expires while it is frozen
            lease = store.acquire_lease("r1", "taker:2:t", 30)
            state = store.load("r1")
            taken = []
            for p in (
                LeaseAcquired(owner=lease.owner, epoch=lease.epoch),
                WarningRecorded(message="taker"),
            ):
                e = Event(
                    run_id="r1",
                    seq=state.seq + 1,
                    type=type_of(p),
                    payload=p,
                    at_ms=store.now_ms(),
                    epoch=lease.epoch,
                )
                apply(state, e)
                taken.append(e)
            store.append(lease, taken, state)
            store.post_inbox("r1", "signal", {"name": "go"}, message_id="m1")
            before = [(e.seq, e.type, e.epoch) for e in store.read_events("r1")]
        finally:
            os.kill(holder.pid, signal.SIGCONT)
        out, _ = holder.communicate("go\n", timeout=HANG_S)
        results = json.loads(out.strip().splitlines()[-1])
        assert len(results) == 12
        written = {k: v for k, v in results.items() if not v.startswith("refused")}
        assert not written, written
        # Both defences answered: the holder's own clock, and the database's fence.
        assert all("expired" in v for k, v in results.items() if "(own)" in k and "append" in k)
        assert any("fence check failed" in v for k, v in results.items() if "(fresh)" in k)
        assert [(e.seq, e.type, e.epoch) for e in store.read_events("r1")] == before
        assert [m.message_id for m in store.pending_inbox("r1")] == ["m1"]
        assert store.get_run("r1").lease_owner == "taker:2:t"
        with pytest.raises(LeaseLostError):  # and the taker still holds it
            store.renew_lease(dataclasses.replace(lease, owner="holder:1:h", epoch=1))
        store.renew_lease(lease)
    finally:
        store.close()
