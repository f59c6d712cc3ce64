"""Large values go to the artifact store (issue 22, item 2), on both backends: a step result,
an effect result or a signal payload over the inline limit is stored by hash and returned,
hash-checked, on replay; the hard maximum still ends the run failed naming the step, the size
and the limit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import torpor
from torpor import serde
from torpor.artifacts import ArtifactStore
from torpor.config import Settings

BIG = 3_000_000


def _big(tag: str) -> dict[str, Any]:
    return {"tag": tag, "rows": [f"{tag}-{i:07d}-" + "v" * 40 for i in range(BIG // 56)]}


@torpor.workflow(name="offload.flow", version="1")
def flow(run: torpor.Run, _: Any) -> dict[str, Any]:
    res = run.step("fetch", lambda: _big("step"))
    eff = run.effect("send", lambda: _big("effect"), key="offload-send")
    sig = run.wait_for("data")
    return {
        "step": [res["tag"], len(res["rows"]), res["rows"][-1]],
        "effect": [eff["tag"], len(eff["rows"])],
        "signal": [sig["tag"], len(sig["rows"])],
    }


def _payload_bytes(store: Any, run_id: str) -> int:
    with store.driver.read() as cur:
        row = store.driver.fetchone(
            cur,
            "SELECT max(length(payload)) FROM events WHERE run_id = :r",
            {"r": run_id},
        )
    assert row is not None
    return int(row[0])


def test_a_3mb_step_effect_and_signal_just_work_and_replay_hash_checked(store_url: str) -> None:
    artifacts = ArtifactStore(Settings.from_env().artifacts_url)
    with torpor.Runtime(store_url) as rt:
        assert rt.run(flow, None, run_id="big").status == "waiting"
        torpor.Client(rt.store).signal("big", "data", _big("signal"))
    # A fresh runtime replays the step and the effect from their recorded references.
    with torpor.Runtime(store_url) as rt:
        res = rt.resume("big")
        assert res.outcome == "succeeded", res
        n = BIG // 56
        assert res.result == {
            "step": ["step", n, _big("step")["rows"][-1]],
            "effect": ["effect", n],
            "signal": ["signal", n],
        }
        # The history holds references, not the values: no row near the values' size.
        assert _payload_bytes(rt.store, "big") < 20_000
        events = rt.store.read_events("big")
        done = next(e for e in events if e.type == "step_completed" and e.step_id == "fetch")
        ref = done.payload.result
        assert ref[serde.TAG] == "blob" and ref["size"] > 2_900_000
        assert artifacts.exists(ref["sha256"])


@torpor.workflow(name="offload.replay", version="1")
def replayed(run: torpor.Run, _: Any) -> int:
    res = run.step("fetch", lambda: _big("r"))
    run.wait_for("go")
    return len(res["rows"])


def test_an_altered_blob_is_refused_on_replay_naming_the_step(store_url: str) -> None:
    with torpor.Runtime(store_url) as rt:
        assert rt.run(replayed, None, run_id="alt").status == "waiting"
        done = next(e for e in rt.store.read_events("alt") if e.type == "step_completed")
        sha = done.payload.result["sha256"]
        torpor.Client(rt.store).signal("alt", "go", None)
    root = Path(Settings.from_env().artifacts_url)
    blob = root / "sha256" / sha[:2] / sha
    blob.write_bytes(blob.read_bytes().replace(b"r-0000001", b"r-9999999"))
    with torpor.Runtime(store_url) as rt, pytest.raises(torpor.errors.CorruptRecordError) as info:
        rt.resume("alt")
    assert "step 'fetch'" in str(info.value) and "does not match its hash" in str(info.value)


@torpor.workflow(name="offload.limit", version="1")
def over(run: torpor.Run, n: int) -> int:
    run.step("huge", lambda: "x" * n)
    return n


def test_the_hard_maximum_still_ends_the_run_failed(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serde, "MAX_PAYLOAD_BYTES", 2_000_000)
    with torpor.Runtime(store_url) as rt:
        assert rt.run(over, 1_500_000, run_id="fits").outcome == "succeeded"
        res = rt.run(over, 2_500_000, run_id="over")
        assert res.outcome == "failed", res
        assert "step 'huge'" in res.reason and "2500002 bytes" in res.reason
        assert "2000000-byte limit" in res.reason
