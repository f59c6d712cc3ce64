"""Streams of a run (issue 40) on both backends: items in offset order from any offset;
a workflow's write is not repeated by a replay; deltas batched by time and by size; a writer
whose lease was taken writes nothing; a part left open by a dead writer is retracted before
the next writer writes, never interleaved; deleting a run deletes its streams; readers that
disconnect at random offsets and come back see every item once, in order (hypothesis), also
while the stream is being written; the async iterator gives what the sync one gives."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streams_kit  # noqa: F401  (registers the workflows)
import torpor
from hyp import examples
from torpor.errors import LeaseLostError, StreamError
from torpor.history import RunStarted
from torpor.store import open_store
from torpor.streams import HoldBack, StreamReader, StreamWriter, fold, shown
from torpor.streams.writer import STREAMS


def _leased(store: Any, run_id: str = "s1") -> Any:
    store.create_run(run_id, RunStarted(workflow="wf", version="1"))
    return store.acquire_lease(run_id, "host-a:1:x", ttl_s=60)


def _writer(store: Any, lease: Any, name: str = "reply", **kw: Any) -> StreamWriter:
    return StreamWriter(store, lease.run_id, name, owner=lease.owner, epoch=lease.epoch, **kw)


def test_workflow_items_in_order_from_any_offset_and_once_on_replay(store_url: str) -> None:
    with torpor.Runtime(store_url) as rt:
        assert rt.run("streams.kit.count", 5, run_id="c1").outcome == "succeeded"
        c = torpor.Client(rt.store)
        items = list(c.stream("c1", "progress"))
        assert [(i.offset, i.data) for i in items] == [(n + 1, {"i": n}) for n in range(5)]
        assert [i.offset for i in c.stream("c1", "progress", after=3)] == [4, 5]
        assert rt.store.stream_names("c1") == [("progress", 5)]
        assert rt.store.load("c1").seq == len(c.events("c1"))  # nothing of it in the history


def test_a_replayed_write_is_not_written_again(store_url: str) -> None:
    @torpor.workflow(name="streams.replayed")
    def replayed(run: torpor.Run, _: Any) -> str:
        run.stream("progress").write("before")
        with run.stream("progress").part("note") as p:
            p.write("a part, ")
            p.write("ended")
        run.wait_for("go")
        run.stream("progress").write("after")
        return "done"

    with torpor.Runtime(store_url) as rt:
        assert rt.run("streams.replayed", None, run_id="w1").status == "waiting"
        torpor.Client(rt.store).signal("w1", "go")
        assert rt.resume("w1").outcome == "succeeded"  # replays the first write
        items = list(torpor.Client(rt.store).stream("w1", "progress"))
    parts = [(p.part.split("@")[0], p.text) for p in fold(items)]
    assert parts == [("", "beforeafter"), ("note", "a part, ended")]


def test_a_write_inside_a_step_needs_a_part(db_url: str) -> None:
    @torpor.workflow(name="streams.inside")
    def inside(run: torpor.Run, _: Any) -> str:
        def work() -> str:
            try:
                run.stream("progress").write("x")
            except StreamError as exc:
                return str(exc)
            return "written"

        return run.step("work", work)

    with torpor.Runtime(db_url) as rt:
        assert "part" in rt.run("streams.inside", None, run_id="i1").result


def test_deltas_are_batched_by_time_and_by_size(store_url: str) -> None:
    store = open_store(store_url)
    try:
        lease = _leased(store)
        slow = _writer(store, lease, interval_s=3600.0)  # the first batch is due at once
        # (Longer than what a part holds back when this process knows a secret: G12.)
        first = "first " * (1 + HoldBack(STREAMS.scrubber()).hold // 6)
        with slow.part("model@1") as p:
            p.write(first)
            assert slow.writes == 1 and store.stream_items("s1", "reply")  # written at once
            for i in range(200):
                p.write(f"w{i} ")
            assert slow.writes == 1  # the rest waits: the next batch is an hour away
        assert slow.writes == 2  # end wrote the rest in one batch
        items = [torpor.streams.items.item_of(r) for r in store.stream_items("s1", "reply")]
        assert [i.kind for i in items] == ["data", "data", "end"]  # deltas joined in a batch
        assert shown(items) == first + "".join(f"w{i} " for i in range(200))
        small = _writer(store, lease, "other", interval_s=3600.0, max_bytes=256)
        with small.part("model@1") as p:
            for _ in range(40):
                p.write("x" * 50)
        assert small.writes >= 8  # a batch whenever 256 bytes were buffered
        assert (
            shown([torpor.streams.items.item_of(r) for r in store.stream_items("s1", "other")])
            == "x" * 2000
        )
    finally:
        store.close()


def test_a_writer_whose_lease_was_taken_writes_nothing(store_url: str) -> None:
    store = open_store(store_url)
    try:
        lease = _leased(store)
        old = _writer(store, lease)
        store.release_lease(lease)
        store.acquire_lease("s1", "host-b:2:y", ttl_s=60)
        with pytest.raises(LeaseLostError):
            old.item({"late": True}, wseq=1)
        assert store.stream_items("s1", "reply") == []
    finally:
        store.close()


def test_a_part_left_open_is_retracted_before_the_next_writer_writes(store_url: str) -> None:
    store = open_store(store_url)
    try:
        lease = _leased(store)
        dead = _writer(store, lease)
        p = dead.part("model@1")
        p.write({"half": "a rep"})  # (data, not text: nothing is held back)
        dead.flush()  # ... and the process dies: no end, no retract
        taken = store.acquire_lease(
            "s1", "host-b:2:y", ttl_s=60, take_from=(lease.owner, lease.epoch)
        )
        with _writer(store, taken).part(f"model@{taken.epoch}") as q:
            q.write("the whole reply")
        items = [torpor.streams.items.item_of(r) for r in store.stream_items("s1", "reply")]
    finally:
        store.close()
    assert [(i.kind, i.part) for i in items] == [
        ("data", "model@1"),
        ("retract", "model@1"),
        ("data", f"model@{taken.epoch}"),
        ("end", f"model@{taken.epoch}"),
    ]
    assert [p.state for p in fold(items)] == ["retracted", "ended"]
    assert shown(items) == "the whole reply"


def test_deleting_a_run_deletes_its_streams(store_url: str) -> None:
    with torpor.Runtime(store_url) as rt:
        rt.run("streams.kit.count", 2, run_id="d1")
        assert rt.store.stream_items("d1", "progress")
        assert rt.store.delete_run("d1")
        assert rt.store.stream_items("d1", "progress") == []


def test_the_async_iterator_gives_what_the_sync_one_gives(db_url: str) -> None:
    with torpor.Runtime(db_url) as rt:
        rt.run("streams.kit.count", 4, run_id="a1")
        c = torpor.Client(rt.store)

        async def read() -> list[Any]:
            return [i async for i in c.stream("a1", "progress", after=1)]

        got = asyncio.run(read())
        assert got == list(c.stream("a1", "progress", after=1))
        assert [i.offset for i in got] == [2, 3, 4]


# ------------------------------------------------------------------ readers that disconnect


def _read_with_cuts(url: str, run_id: str, name: str, cuts: list[int]) -> list[int]:
    """Read the whole stream, dropping the reader (and its store) after each number of items
    in ``cuts`` and starting a new one from the last offset seen."""
    seen: list[int] = []
    cuts = list(cuts)
    while True:
        store = open_store(url)
        try:
            reader = StreamReader(store, run_id, name, after=seen[-1] if seen else 0, poll_s=0.2)
            take = cuts.pop(0) if cuts else None
            for item in reader:
                seen.append(item.offset)
                if take is not None:
                    take -= 1
                    if take == 0:
                        break
            else:
                return seen
        finally:
            store.close()


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('streams')}/s.db"
    with torpor.Runtime(url) as rt:
        rt.run("streams.kit.count", 60, run_id="h1")
    return url


@settings(
    max_examples=examples(50),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(cuts=st.lists(st.integers(1, 25), max_size=8))
def test_readers_cut_off_at_random_offsets_see_every_item_once_in_order(
    written: str, cuts: list[int]
) -> None:
    assert _read_with_cuts(written, "h1", "progress", cuts) == list(range(1, 61))


def test_readers_cut_off_while_it_is_written_see_every_delta_once(store_url: str) -> None:
    rng = random.Random(40)
    got: list[list[int]] = []
    with torpor.Runtime(store_url) as rt:
        rt.start("streams.kit.deltas", 30, run_id="live")

        def follow(cuts: list[int]) -> None:
            got.append(_read_with_cuts(store_url, "live", "reply", cuts))

        readers = [
            threading.Thread(target=follow, args=([rng.randint(3, 12) for _ in range(5)],))
            for _ in range(2)
        ]
        for t in readers:
            t.start()
        assert rt.resume("live").outcome == "succeeded"
        for t in readers:
            t.join(timeout=300)  # a hang guard
        total = rt.store.stream_items("live", "reply", limit=10_000)[-1].offset
    assert total == 60  # a delta and an end per part
    assert got == [list(range(1, total + 1))] * 2


def test_an_item_over_the_limit_is_refused_naming_the_run_and_stream(db_url: str) -> None:
    store = open_store(db_url)
    try:
        lease = _leased(store, "big")
        w = _writer(store, lease, "progress")
        with pytest.raises(StreamError, match=r"run 'big' stream 'progress': an item of \d+ bytes"):
            w.item("x" * (1 << 20 + 1), wseq=1)
        with pytest.raises(StreamError, match="not"), w.part("p@1") as p:
            p.write(object())
        assert [r.kind for r in store.stream_items("big", "progress")] == ["retract"]
    finally:
        store.close()
