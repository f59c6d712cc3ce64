"""Retention and garbage collection (issue 22, item 3), on both backends: finished runs past
their workflow's policy go (archived first when asked, restorable); waiting and reopenable
runs never do; chunks and artifacts go only when no retained run refers to them and they are
older than the grace period — a blob stored by a running step before its reference is recorded
survives a pass made right then."""

from __future__ import annotations

import random
import string
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import torpor
from torpor import retention
from torpor.artifacts import ArtifactStore
from torpor.errors import RunNotFoundError


def _text(seed: int, n: int) -> str:
    rnd = random.Random(seed)
    return "".join(rnd.choices(string.ascii_letters, k=n))


@torpor.workflow(name="gc.done", version="1")
def done(run: torpor.Run, seed: int) -> int:
    st = {"shared": _text(0, 40_000), "own": _text(seed, 30_000), "n": 0}
    for i in range(3):
        st["n"] = run.step("s", lambda i=i: i)
        run.checkpoint(st)
    run.artifact("report", f"report {seed}")
    return seed


@torpor.workflow(name="gc.waits", version="1")
def waits(run: torpor.Run, _: Any) -> Any:
    run.checkpoint({"big": _text(9, 40_000)})
    return run.wait_for("go")


def _count(store: Any, table: str) -> int:
    with store.driver.read() as cur:
        row = store.driver.fetchone(cur, f"SELECT count(*) FROM {table}", {})
    assert row is not None
    return int(row[0])


def test_retention_deletes_only_finished_runs_past_the_policy(store_url: str) -> None:
    with torpor.Runtime(store_url) as rt:
        for seed in range(4):
            assert rt.run(done, seed, run_id=f"d{seed}").outcome == "succeeded"
            time.sleep(0.01)  # distinct finish times
        assert rt.run(waits, None, run_id="w").status == "waiting"
        rt.start(done, 99, run_id="pending")
        retention.set_policy(rt.store, "gc.done", keep_last=2)
        retention.set_policy(rt.store, "gc.waits", keep_last=0)
        dry = retention.collect(rt.store, rt.artifacts, dry_run=True)
        assert dry.runs == ["d0", "d1"]
        assert [r.run_id for r in rt.store.list_runs()].count("d0") == 1  # nothing deleted
        rep = retention.collect(rt.store, rt.artifacts)
        assert rep.runs == ["d0", "d1"]
        for rid in ("d0", "d1"):
            with pytest.raises(RunNotFoundError):
                rt.store.get_run(rid)
            assert rt.store.read_events(rid) == []
        # The waiting run is never collected, whatever its workflow's policy says; the kept runs
        # still load and replay.
        assert rt.store.get_run("w").status == "waiting"
        assert rt.store.get_run("pending").status == "pending"
        assert rt.store.load("d3").user_state["own"] == _text(3, 30_000)
        assert rt.resume("d2").result == 2
        # keep_days: the two left are a few ms old, so 1e-7 days (~9 ms) lets them go.
        time.sleep(0.05)
        retention.set_policy(rt.store, "gc.done", keep_days=1e-7)
        assert sorted(retention.collect(rt.store, rt.artifacts).runs) == ["d2", "d3"]
        torpor.Client(rt.store).signal("w", "go", 5)
        assert rt.resume("w").result == 5


def test_chunks_and_artifacts_go_when_no_retained_run_refers_to_them(store_url: str) -> None:
    with torpor.Runtime(store_url) as rt:
        for seed in (1, 2):
            assert rt.run(done, seed, run_id=f"d{seed}").outcome == "succeeded"
        arts = {r: rt.store.load(r).artifacts["report"].sha256 for r in ("d1", "d2")}
        retention.set_policy(rt.store, "gc.done", keep_last=1)
        before = _count(rt.store, "chunks")
        # Within the grace period nothing is collected, not even what d1 alone used.
        rep = retention.collect(rt.store, rt.artifacts)
        assert rep.runs == ["d1"] and rep.chunks == 0 and rep.artifacts == 0
        assert _count(rt.store, "chunks") == before
        rep = retention.collect(rt.store, rt.artifacts, grace_s=0)
        assert rep.chunks > 0 and rep.artifacts == 1
        assert not rt.artifacts.exists(arts["d1"]) and rt.artifacts.exists(arts["d2"])
        # The chunk both runs shared stays for d2, which still reads whole.
        assert rt.store.load("d2").user_state["shared"] == _text(0, 40_000)
        assert [e.type for e in rt.store.read_events("d2")].count("checkpoint_saved") == 3
        assert retention.collect(rt.store, rt.artifacts, grace_s=0).chunks == 0


@torpor.workflow(name="gc.offload", version="1")
def offloading(run: torpor.Run, _: Any) -> int:
    big = run.step("fetch", lambda: {"rows": [_text(5, 100) for _ in range(4000)]})
    return len(big["rows"])


def test_a_blob_stored_before_its_reference_is_recorded_survives_a_pass(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step's value is in the artifact store, its chunks in the database, and the step is
    paused before the event that refers to them: a pass right then keeps them, with no grace
    too (the run referred to the value before storing it: issue 35); once recorded they stay
    with no grace either."""
    stored, go = threading.Event(), threading.Event()
    put = ArtifactStore.put

    def paused_put(self: ArtifactStore, data: bytes) -> str:
        digest = put(self, data)
        stored.set()
        assert go.wait(30)
        return digest

    monkeypatch.setattr(ArtifactStore, "put", paused_put)
    with torpor.Runtime(store_url) as rt:
        out: list[Any] = []
        t = threading.Thread(target=lambda: out.append(rt.run(offloading, None, run_id="o")))
        t.start()
        try:
            assert stored.wait(30)
            assert retention.collect(rt.store, rt.artifacts, dry_run=True, grace_s=0).artifacts == 0
            assert retention.collect(rt.store, rt.artifacts, grace_s=0).artifacts == 0
            # Nor is the running run itself collected, whatever its workflow's policy says.
            retention.set_policy(rt.store, "gc.offload", keep_last=0)
            rep = retention.collect(rt.store, rt.artifacts)
            assert rep.artifacts == 0 and rep.runs == []
            rec = rt.store.get_run("o")  # executing (its row says pending until a boundary)
            assert rec.status in ("pending", "running") and rec.lease_owner is not None
        finally:
            go.set()
            t.join(30)
        assert out and out[0].outcome == "succeeded" and out[0].result == 4000
        retention.set_policy(rt.store, "gc.offload")  # forever again
        assert retention.collect(rt.store, rt.artifacts, grace_s=0).artifacts == 0
    with torpor.Runtime(store_url) as rt:
        assert rt.resume("o").result == 4000


def test_a_chunk_written_before_its_event_survives_a_pass(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with torpor.Runtime(store_url) as rt:
        stored, go = threading.Event(), threading.Event()
        io = rt.store.chunkio
        put = io.put

        def paused_put(run_id: str, sink: dict[str, str], artifacts: Any = ()) -> None:
            put(run_id, sink, dict(artifacts))
            if sink and not stored.is_set():
                stored.set()
                assert go.wait(30)

        monkeypatch.setattr(io, "put", paused_put)
        # Another process's view: no reference recorded, so with no grace they would go.
        io2 = torpor.Runtime(store_url)
        try:
            out: list[Any] = []
            t = threading.Thread(target=lambda: out.append(rt.run(waits, None, run_id="c")))
            t.start()
            try:
                assert stored.wait(30)
                with rt.store.driver.transaction() as cur:  # as if written by a crashed run
                    rt.store.driver.execute(cur, "DELETE FROM blob_refs", {})
                assert retention.collect(io2.store, dry_run=True, grace_s=0).chunks > 0
                assert retention.collect(io2.store).chunks == 0
            finally:
                go.set()
                t.join(30)
            assert out and out[0].status == "waiting"
            assert io2.store.load("c").user_state == {"big": _text(9, 40_000)}
        finally:
            io2.close()


def test_archive_before_delete_and_restore_shows_and_folds_the_same(
    store_url: str, tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    with torpor.Runtime(store_url) as rt:
        assert rt.run(done, 7, run_id="a 7").outcome == "succeeded"
        state = rt.store.load("a 7").model_dump()
        events = rt.store.read_events("a 7")
        record = rt.store.get_run("a 7")
        retention.set_policy(rt.store, "gc.done", keep_last=0, archive_url=str(archive))
        rep = retention.collect(rt.store, rt.artifacts)
        assert rep.runs == ["a 7"] and rep.archived["a 7"] == retention.archive_path(
            str(archive), "a 7"
        )
        with pytest.raises(RunNotFoundError):
            rt.store.get_run("a 7")
        assert retention.restore_archive(rt.store, rep.archived["a 7"]) == "a 7"
        assert rt.store.load("a 7").model_dump() == state
        assert rt.store.read_events("a 7") == events
        back = rt.store.get_run("a 7")
        assert (back.status, back.outcome, back.last_seq, back.workflow, back.created_at_ms) == (
            record.status,
            record.outcome,
            record.last_seq,
            record.workflow,
            record.created_at_ms,
        )
        with pytest.raises(torpor.errors.StoreError, match="exists already"):
            retention.restore_archive(rt.store, rep.archived["a 7"])
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"format": "something else"}\n')
        with pytest.raises(torpor.errors.CorruptRecordError, match=r"bad\.jsonl"):
            retention.restore_archive(rt.store, str(bad))


def test_sqlite_pages_are_given_back(db_url: str) -> None:
    path = Path(db_url.split("///", 1)[1])
    with torpor.Runtime(db_url) as rt:
        conn = rt.store.driver.conn()  # type: ignore[attr-defined]
        # The schema's own pages (every table and index, empty): what no collection gives back.
        schema = conn.execute("PRAGMA page_count").fetchone()[0]
        for seed in range(6):
            assert rt.run(done, seed + 10, run_id=f"p{seed}").outcome == "succeeded"
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        retention.set_policy(rt.store, "gc.done", keep_last=0)
        rep = retention.collect(rt.store, rt.artifacts, grace_s=0)
        assert len(rep.runs) == 6 and "reclaimed" in rep.pages
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
        # More than half of what the runs took is given back to the file system.
        assert conn.execute("PRAGMA page_count").fetchone()[0] - schema < (pages - schema) / 2
    assert path.exists()


def test_an_older_sqlite_file_is_switched_to_incremental_vacuum_once(db_url: str) -> None:
    with torpor.Runtime(db_url) as rt:
        conn = rt.store.driver.conn()  # type: ignore[attr-defined]
        conn.execute("PRAGMA auto_vacuum = NONE")
        conn.execute("VACUUM")  # as a file made before torpor chose incremental auto-vacuum
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
        rep = retention.collect(rt.store, rt.artifacts)
        assert "torpor gc --vacuum" in rep.pages
        assert retention.collect(rt.store, rt.artifacts, dry_run=True).pages == ""
        rep = retention.collect(rt.store, rt.artifacts, vacuum=True)
        assert "converted" in rep.pages
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        assert "reclaimed" in retention.collect(rt.store, rt.artifacts).pages
