"""Storage grows with new content, not with steps (issue 22, item 1), on both backends: a large
checkpoint state that hardly changes is stored once in content-addressed chunks; what comes
back is what went in; a chunk missing or altered is noticed, never read as something else."""

from __future__ import annotations

import random
import string
from pathlib import Path
from typing import Any

import pytest

import torpor
from conftest import run_python
from torpor import serde
from torpor.store import chunks


def _text(rnd: random.Random, n: int) -> str:
    return "".join(rnd.choices(string.ascii_letters + " ", k=n))


def _state_size(store: Any) -> int:
    """Bytes of the chunks table plus every stored payload and checkpoint."""
    with store.driver.read() as cur:
        c = store.driver.fetchone(cur, "SELECT COALESCE(sum(size), 0), count(*) FROM chunks", {})
        e = store.driver.fetchone(cur, "SELECT COALESCE(sum(length(payload)), 0) FROM events", {})
        r = store.driver.fetchone(cur, "SELECT COALESCE(sum(length(checkpoint)), 0) FROM runs", {})
    assert c is not None and e is not None and r is not None
    return int(c[0]) + int(e[0]) + int(r[0])


@torpor.workflow(name="chunks.growing", version="1")
def growing(run: torpor.Run, n: int) -> dict[str, Any]:
    rnd = random.Random(7)
    st = run.restore({"blob": _text(rnd, 100_000), "messages": [], "note": {"$torpor": "chunk"}})
    while len(st["messages"]) < n:
        i = len(st["messages"])
        st["messages"].append(run.step(f"turn{i}", lambda i=i: {"i": i, "text": _text(rnd, 400)}))
        run.checkpoint(st)
    return {"n": len(st["messages"]), "blob": len(st["blob"]), "note": st["note"]}


def test_a_large_state_checkpointed_every_step_is_stored_once(store_url: str) -> None:
    with torpor.Runtime(store_url) as rt:
        res = rt.run(growing, 60, run_id="grow")
        assert res.outcome == "succeeded", res
        # A user dict that looks like a reference comes back as it went in.
        assert res.result == {"n": 60, "blob": 100_000, "note": {"$torpor": "chunk"}}
        stored = _state_size(rt.store)
        # 60 checkpoints of a >100 KB state, stored whole, would be > 6 MB.
        assert stored < 400_000, stored
        # Everything reads back: the history folds to the same state, the checkpoint loads.
        state = rt.store.load("grow")
        events = rt.store.read_events("grow")
        saved = [e for e in events if e.type == "checkpoint_saved"]
        assert len(saved) == 60 and len(saved[-1].payload.state["messages"]) == 60
        assert saved[-1].payload.state == state.user_state
        assert len(state.user_state["blob"]) == 100_000


@torpor.workflow(name="chunks.pausing", version="1")
def pausing(run: torpor.Run, n: int) -> dict[str, Any]:
    rnd = random.Random(7)
    st = run.restore({"blob": _text(rnd, 50_000), "messages": []})
    while len(st["messages"]) < n:
        i = len(st["messages"])
        if i == n // 2:
            run.wait_for("go")
        st["messages"].append(run.step(f"turn{i}", lambda i=i: {"i": i, "text": _text(rnd, 400)}))
        run.checkpoint(st)
    return {"n": len(st["messages"]), "blob": st["blob"][:20]}


def test_resume_reads_the_state_back_from_chunks(store_url: str) -> None:
    """A run resumed in a fresh runtime (no chunk in memory) continues from the checkpoint."""
    with torpor.Runtime(store_url) as rt:
        assert rt.run(pausing, 10, run_id="g").status == "waiting"
        blob = rt.store.load("g").user_state["blob"][:20]
        torpor.Client(rt.store).signal("g", "go", None)
    with torpor.Runtime(store_url) as rt:
        res = rt.resume("g")
        assert res.outcome == "succeeded" and res.result == {"n": 10, "blob": blob}, res
        assert [e.type for e in rt.store.read_events("g")].count("checkpoint_saved") == 10


def test_a_missing_or_altered_chunk_is_refused_naming_the_run(store_url: str) -> None:
    with torpor.Runtime(store_url) as rt:
        assert rt.run(growing, 3, run_id="bad").outcome == "succeeded"
    with torpor.Runtime(store_url) as rt:
        st = rt.store
        with st.driver.transaction() as cur:
            row = st.driver.fetchone(cur, "SELECT hash FROM chunks ORDER BY size DESC", {})
            assert row is not None
            st.driver.execute(
                cur, "UPDATE chunks SET data = :d WHERE hash = :h", {"d": b'"x"', "h": row[0]}
            )
        with pytest.raises(torpor.errors.CorruptRecordError, match=r"run 'bad'.*does not match"):
            st.read_events("bad")
        with st.driver.transaction() as cur:
            st.driver.execute(cur, "DELETE FROM chunks WHERE hash = :h", {"h": row[0]})
        with pytest.raises(torpor.errors.CorruptRecordError, match=r"run 'bad'.*missing"):
            st.read_events("bad")


def test_appending_to_a_long_list_writes_only_its_end() -> None:
    """Content-defined pages: the chunks of a list with one more item are those of the list
    before, but for the last page (and the index over the pages)."""
    rnd = random.Random(3)
    items = [{"t": _text(rnd, rnd.randint(100, 900))} for _ in range(400)]
    before: dict[str, str] = {}
    chunks.split_text(serde.dumps({"m": items[:-1]}), before)
    after: dict[str, str] = {}
    text = chunks.split_text(serde.dumps({"m": items}), after)
    new = {h: t for h, t in after.items() if h not in before}
    assert sum(len(t) for t in new.values()) < 6 * chunks.PAGE_BYTES, len(new)
    assert chunks.join(text, after.__getitem__) == {"m": items}
    assert len(text) < 2000


def test_a_migration_numbered_below_the_newest_applied_is_applied_too(store_url: str) -> None:
    """Migrations are numbered by the change that made them, and merged in any order: a
    database at the newest version that lacks an older-numbered one gets it when opened (here
    0004, undone by hand, below this change's 0006)."""
    with torpor.Runtime(store_url) as rt:
        assert rt.run(growing, 2, run_id="m").outcome == "succeeded"
        with rt.store.driver.transaction() as cur:
            for sql in (
                "DROP INDEX IF EXISTS inbox_arrival",
                "ALTER TABLE inbox DROP COLUMN arrival",
                "DELETE FROM torpor_schema WHERE version = 4",
            ):
                rt.store.driver.execute(cur, sql, {})
    with torpor.Runtime(store_url) as rt:
        with rt.store.driver.read() as cur:
            rows = rt.store.driver.fetchall(cur, "SELECT version FROM torpor_schema", {})
        assert 4 in {r[0] for r in rows}
        assert rt.run(pausing, 2, run_id="after").status == "waiting"
        torpor.Client(rt.store).signal("after", "go", None)  # the inbox works again
        assert rt.resume("after").outcome == "succeeded"


KILLED = """
import random, string, sys
import torpor

@torpor.workflow(name="chunks.killed", version="1")
def killed(run, n):
    st = run.restore({"blob": "".join(random.Random(1).choices(string.ascii_letters, k=60_000)),
                      "items": []})
    while len(st["items"]) < n:
        i = len(st["items"])
        st["items"].append(run.step("s", lambda i=i: {"i": i, "pad": str(i) * 300}))
        run.checkpoint(st)
    return len(st["items"])

rt = torpor.Runtime(sys.argv[1])
if sys.argv[2] == "start":
    rt.run(killed, 6, run_id="k")
else:
    print("RESULT", rt.resume("k").result, flush=True)
"""


@pytest.mark.slow
def test_killed_between_its_chunks_and_its_append_the_run_resumes_whole(
    store_url: str, tmp_path: Path
) -> None:
    """SIGKILL after a checkpoint's chunks are written and before the event that refers to
    them: the resumed run redoes that checkpoint (its chunks found already there), and every
    record reads back whole."""
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    env = {"TORPOR_FAULTS": "crash:append.committing@8"}
    proc = run_python(f"import runpy, sys; sys.argv = ['k', {store_url!r}, 'start']; "
                      f"runpy.run_path({str(script)!r}, run_name='__main__')",
                      cwd=tmp_path, env=env)  # fmt: skip
    assert proc.returncode == -9, proc.stderr
    with torpor.Runtime(store_url) as rt:
        before = rt.store.get_run("k").last_seq
        # It died writing a checkpoint: the step before it is the last event recorded.
        assert rt.store.read_events("k")[-1].type == "step_completed"
        with rt.store.driver.read() as cur:
            row = rt.store.driver.fetchone(cur, "SELECT count(*) FROM chunks", {})
        assert row is not None and row[0] > 0
    proc = run_python(f"import runpy, sys; sys.argv = ['k', {store_url!r}, 'resume']; "
                      f"runpy.run_path({str(script)!r}, run_name='__main__')",
                      cwd=tmp_path)  # fmt: skip
    assert "RESULT 6" in proc.stdout, proc.stderr
    with torpor.Runtime(store_url) as rt:
        events = rt.store.read_events("k")
        assert len(events) > before
        saved = [e.payload.state for e in events if e.type == "checkpoint_saved"]
        assert [len(s["items"]) for s in saved] == [1, 2, 3, 4, 5, 6]
        assert all(len(s["blob"]) == 60_000 for s in saved)
        assert rt.store.load("k").user_state == saved[-1]


@pytest.mark.parametrize("items", [[0] * 200_000, ["a" * 30] * 50_000, list(range(50_000))])
def test_any_list_splits_into_few_chunks_and_joins_back(items: list[Any]) -> None:
    """Pages are never under a quarter of their target, so every index level shrinks — even
    for identical items, whose boundaries all fall alike."""
    sink: dict[str, str] = {}
    text = chunks.split_text(serde.dumps({"x": items}), sink)
    assert chunks.join(text, sink.__getitem__) == {"x": items}
    assert len(text) <= 2 * chunks.INDEX_BYTES
    assert len(sink) < len(serde.dumps(items)) / (chunks.PAGE_BYTES / 4) + 10
