"""Storage is visible and steerable from the CLI (issue 22), on both backends: bytes per run in
``show``, ``torpor storage`` for the largest runs, ``torpor retention`` / ``torpor gc
[--dry-run]`` / ``torpor archive restore`` (the restored run shows the same); a warning when
a run's checkpoint state passes the threshold; workers collect on a schedule."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import torpor
from torpor import serde
from torpor.cli import main
from torpor.worker import Worker


@torpor.workflow(name="cli.sized", version="1")
def sized(run: torpor.Run, n: int) -> int:
    st = {"blob": "b" * n, "items": []}
    for i in range(3):
        st["items"].append(run.step("s", lambda i=i: {"i": i, "pad": str(i) * 500}))
        run.checkpoint(st)
    run.artifact("out", "x" * n)
    return n


def test_show_storage_retention_gc_and_archive_restore(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def _cli(store_url: str, *args: str) -> Any:
        """The ``torpor`` command, in this process (its one error boundary included)."""
        capsys.readouterr()
        with pytest.raises(SystemExit) as info:
            main(["--db", store_url, *args])
        out, err = capsys.readouterr()
        assert info.value.code == 0, f"torpor {' '.join(args)}: {err}\n{out}"
        return json.loads(out) if "--json" in args else out

    with torpor.Runtime(store_url) as rt:
        for rid, n in (("small", 20_000), ("large", 90_000)):
            assert rt.run(sized, n, run_id=rid).outcome == "succeeded"
    shown = _cli(store_url, "show", "large", "--json")
    st = shown["storage"]
    assert st["chunk_bytes"] > 90_000 and st["artifact_bytes"] == 90_000, st
    assert st["history_bytes"] < 20_000, st  # the blob is in one chunk, not in every record
    sizes = _cli(store_url, "storage", "--json")
    assert [r["run_id"] for r in sizes] == ["large", "small"]
    assert sizes[0]["total_bytes"] > sizes[1]["total_bytes"]
    archive = tmp_path / "archive"
    out = _cli(store_url, "retention", "cli.sized", "--last", "1", "--archive", str(archive))
    assert "the last 1" in out and str(archive) in out
    assert _cli(store_url, "gc", "--dry-run", "--json")["runs"] == ["small"]
    small = (_cli(store_url, "show", "small", "--json"), _cli(store_url, "show", "small"))
    rep = _cli(store_url, "gc", "--json")
    assert rep["runs"] == ["small"] and rep["archived"]["small"].endswith("small.jsonl")
    before = _cli(store_url, "show", "large")
    assert "storage" in before and "chunks" in before
    out = _cli(store_url, "archive", "restore", rep["archived"]["small"])
    assert "restored run small" in out
    again = (_cli(store_url, "show", "small", "--json"), _cli(store_url, "show", "small"))
    assert again == small
    with torpor.Runtime(store_url) as rt:
        assert rt.store.load("small").user_state["blob"] == "b" * 20_000


@torpor.workflow(name="cli.bigstate", version="1")
def bigstate(run: torpor.Run, n: int) -> int:
    for i in range(2):
        run.checkpoint({"blob": "z" * n, "i": i})
    return n


def test_a_checkpoint_state_over_the_threshold_is_warned_about_once(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serde, "STATE_WARN_BYTES", 50_000)
    with torpor.Runtime(store_url) as rt:
        assert rt.run(bigstate, 10_000, run_id="ok").outcome == "succeeded"
        res = rt.run(bigstate, 60_000, run_id="big")
        assert res.outcome == "succeeded_with_warnings", res
        warned = rt.store.load("big").warnings
        assert len(warned) == 1 and "checkpoint state is 60" in warned[0]
        assert "50000-byte" in warned[0] and "TORPOR_STATE_WARN_BYTES" in warned[0]


def test_an_idle_worker_collects_on_its_schedule(store_url: str) -> None:
    with torpor.Runtime(store_url) as rt:
        assert rt.run(sized, 20_000, run_id="w1").outcome == "succeeded"
        torpor.retention.set_policy(rt.store, "cli.sized", keep_last=0)
        idle = Worker(rt, gc_interval_s=0)
        idle.run(until_idle=True)
        assert idle.last_gc is None and rt.store.get_run("w1")
        w = Worker(rt, gc_interval_s=0.01)
        time.sleep(0.02)
        w.run(until_idle=True)
        assert w.last_gc is not None and w.last_gc.runs == ["w1"]
        with pytest.raises(torpor.errors.RunNotFoundError):
            rt.store.get_run("w1")
