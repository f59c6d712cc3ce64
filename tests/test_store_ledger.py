"""The store's fact-ledger rows (issue 30), on both backends: written in the transaction that
appends their ``context_compacted`` event — a refused append writes none —, read back in order
with their event's seq and time, limited to the compactions a reader is at, searched by full
text within the run, and what superseded a record named with who and when."""

from __future__ import annotations

import time
from typing import Any

import pytest

from torpor.errors import LeaseLostError
from torpor.history import (
    ContextCompacted,
    Event,
    RunStarted,
    RunState,
    StepCompleted,
    StepStarted,
    apply,
    type_of,
)
from torpor.memory.ledger import LedgerRecord, as_payload, record_key, subject_of, supersede
from torpor.store import SQLStore, open_store
from torpor.store.ledger_rows import entries


@pytest.fixture
def store(store_url: str) -> Any:
    s = open_store(store_url)
    yield s
    s.close()


def _rec(kind: str, text: str, turn: int, number: int, body: str = "") -> LedgerRecord:
    return LedgerRecord(
        key=record_key(kind, text),
        kind=kind,  # type: ignore[arg-type]
        text=text,
        subject=subject_of(text),
        turn=turn,
        step=f"model#{turn}",
        compaction=number,
        body=body,
    )


def _compact(store: SQLStore, lease: Any, state: RunState, number: int, recs: list[Any]) -> None:
    sid = "compact" if number == 1 else f"compact#{number}"
    evs = []
    for p in (
        StepStarted(step_id=sid, policy="read"),
        ContextCompacted(
            step_id=sid,
            number=number,
            summary_hash="0" * 64,
            summary_tokens=1,
            buffer_tokens_before=10,
            buffer_tokens_after=5,
            ledger=as_payload(recs),
        ),
        StepCompleted(step_id=sid, result=None, policy="read"),
    ):
        ev = Event(
            run_id=state.run_id,
            seq=state.seq + 1,
            type=type_of(p),
            payload=p,
            epoch=lease.epoch,
            at_ms=store.now_ms(),
        )
        apply(state, ev)
        evs.append(ev)
    store.append(lease, evs, state)


def test_rows_are_written_with_their_event_read_in_order_and_searched(store: SQLStore) -> None:
    assert store.create_run("r1", RunStarted(workflow="wf", version="1"))
    state = store.load("r1")
    lease = store.acquire_lease("r1", "host-a:1:x", ttl_s=30)
    first = [
        _rec("decision", "Going with memcached for the cache backend", 2, 1),
        _rec("identifier", "Quota bucket s3://quota-amber-4412", 3, 1),
        _rec("unit", "Reading the quota ticket", 3, 1, body="bucket: s3://quota-amber-4412\nok"),
    ]
    _compact(store, lease, state, 1, first)
    second = supersede(
        first[:1], [_rec("decision", "Switching to redis for the cache backend instead", 9, 2)]
    )
    assert second[0].supersedes == [first[0].key]
    _compact(store, lease, state, 2, second)
    rows = store.ledger("r1")
    events = {e.seq: e for e in store.read_events("r1")}
    assert [r.data["key"] for r in rows] == [r.key for r in first + second]
    assert all(events[r.seq].type == "context_compacted" for r in rows)
    assert [r.at_ms for r in rows[:3]] == [events[rows[0].seq].at_ms] * 3
    assert rows[2].data["body"].startswith("bucket:")
    # As of compaction 1 (a run replaying from a checkpoint there): the later record unseen.
    assert len(store.ledger("r1", upto=1)) == 3
    keys, gone, live = store.ledger_index("r1")
    assert keys == {r.key for r in first + second} and gone == {first[0].key}
    assert {r.data["kind"] for r in live} == {"decision"}
    # Full text, within the run, on both backends (a body's words count).
    found = {r.data["key"] for r in store.search_ledger("r1", ["quota", "amber"])}
    assert found == {first[1].key, first[2].key}
    assert not store.search_ledger("r1", ["quota"], upto=0)
    assert not store.search_ledger("other", ["quota"])
    got = {r.data["key"] for r in store.search_ledger("r1", ["cache"], upto=1)}
    assert got == {first[0].key}
    # Who replaced a record, and when.
    (old, *_rest, new) = entries("r1", rows)
    assert old.superseded_by == new.key and old.superseded_seq == new.seq
    assert old.superseded_step == "model#9" and old.superseded_at_ms == new.at_ms
    # The texts of facts found in tool outputs (run-level novelty), as of a compaction.
    out = _rec("identifier", "WARN pool at 81% (advisory)", 11, 3)
    _compact(store, lease, state, 3, [out.model_copy(update={"source": "result"})])
    assert store.ledger_output_facts("r1") == ["WARN pool at 81% (advisory)"]
    assert store.ledger_output_facts("r1", upto=2) == []


def test_a_refused_append_writes_no_ledger_row(store: SQLStore) -> None:
    assert store.create_run("r2", RunStarted(workflow="wf", version="1"))
    state = store.load("r2")
    a = store.acquire_lease("r2", "host-a:1:x", ttl_s=0.3)
    time.sleep(0.4)  # a's lease expires (judged by the store's clock)
    store.acquire_lease("r2", "host-b:2:y", ttl_s=30)
    with pytest.raises(LeaseLostError):
        _compact(store, a, state, 1, [_rec("decision", "Going with kafka for the queue", 1, 1)])
    assert store.ledger("r2") == [] and store.search_ledger("r2", ["kafka"]) == []
