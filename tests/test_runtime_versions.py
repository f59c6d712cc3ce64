"""Code version and determinism: a run resumed under code that does not match its record is
refused with a clear error and its history is left exactly as it was; code that declares
compatibility continues (``version_accepted``). G10 at the API: a value that cannot be recorded
is refused when it is recorded, naming run and step, and nothing recorded before is lost."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import torpor
from runtime_kit import Lab
from torpor import serde

FLOW = """
@torpor.workflow(name="ver.flow", version={version!r}, compatible={compatible!r})
def flow(run, _):
    a = run.{a_kind}("a", work, "a", 1)
    got = run.wait_for("go")
    b = run.step("b", work, "b", 2)
    return [a, got, b]
"""


def flow_module(
    lab: Lab, name: str, version: str, compatible: tuple[str, ...] = (), a_kind: str = "step"
) -> str:
    return lab.module(
        name, FLOW.format(version=version, compatible=list(compatible), a_kind=a_kind)
    )


@pytest.fixture
def lab(tmp_path: Path, db_url: str) -> Lab:
    return Lab(tmp_path, db_url, tmp_path / "ledger.jsonl")


def _history(lab: Lab, rid: str) -> list[tuple[int, str, Any]]:
    return [(e.seq, e.type, e.payload.model_dump(mode="json")) for e in lab.events(rid)]


def _untouched_but_named(lab: Lab, rid: str, before: list[Any], why: str) -> None:
    """A refused resume leaves the recorded history as it was, adding one note of why the run
    cannot proceed (issue 13: named where people look) — and no second one if refused again."""
    after = _history(lab, rid)
    assert after[: len(before)] == before, "a refused resume changed the history"
    assert [t for _, t, _ in after[len(before) :]] == ["attention_needed"], after[len(before) :]
    assert why in after[-1][2]["detail"]


def _signal(lab: Lab, rid: str) -> None:
    c = lab.client()
    try:
        c.signal(rid, "go", "now", message_id="go-1")
    finally:
        c.close()


@pytest.mark.proc
def test_incompatible_version_is_refused_and_history_unchanged(lab: Lab) -> None:
    v1 = flow_module(lab, "v1", "1")
    v2 = flow_module(lab, "v2", "2")
    v2c = flow_module(lab, "v2c", "2", compatible=("1",))
    p = lab.drive(v1, "r", workflow="ver.flow")
    assert p.result is not None and p.result["status"] == "waiting", p.describe()
    _signal(lab, "r")
    before = _history(lab, "r")

    refused = lab.drive(v2, "r", resume=True)
    assert refused.error is not None, refused.describe()
    assert refused.error["type"] == "VersionMismatchError"
    msg = refused.error["msg"]
    assert "'r'" in msg and "version '1'" in msg and "version '2'" in msg
    assert "compatible=['1']" in msg
    _untouched_but_named(lab, "r", before, "version mismatch (recorded 1, running 2)")
    before = _history(lab, "r")
    assert lab.ledger("step", name="b") == []

    # Code that declares it can continue version-1 runs does so, and says so in the history.
    ok = lab.drive(v2c, "r", resume=True)
    assert ok.result is not None and ok.result["outcome"] == "succeeded", ok.describe()
    assert ok.result["result"] == [1, "now", 2]
    after = lab.events("r")
    accepted = [e.payload for e in after if e.type == "version_accepted"]
    assert [(a.from_version, a.to_version) for a in accepted] == [("1", "2")]  # type: ignore[attr-defined]
    assert _history(lab, "r")[: len(before)] == before
    assert len(lab.ledger("step", name="a")) == 1  # recorded under v1, reused under v2
    assert lab.state("r").version == "2"


@pytest.mark.proc
def test_replay_asking_another_policy_is_nondeterminism(lab: Lab) -> None:
    original = flow_module(lab, "orig", "1")
    changed = flow_module(lab, "changed", "1", a_kind="compute")  # same version, new code
    p = lab.drive(original, "nd", workflow="ver.flow")
    assert p.result is not None and p.result["status"] == "waiting", p.describe()
    before = _history(lab, "nd")

    bad = lab.drive(changed, "nd", resume=True)
    assert bad.error is not None, bad.describe()
    assert bad.error["type"] == "NonDeterminismError"
    assert "'nd'" in bad.error["msg"] and "'a'" in bad.error["msg"]
    assert "read" in bad.error["msg"] and "compute" in bad.error["msg"]
    _untouched_but_named(lab, "nd", before, "replay diverged")

    # The run is intact: the original code finishes it, reusing the recorded step.
    _signal(lab, "nd")
    ok = lab.drive(original, "nd", resume=True)
    assert ok.result is not None and ok.result["outcome"] == "succeeded", ok.describe()
    assert len(lab.ledger("step", name="a")) == 1


# ---------------------------------------------------------------------- G10 at the API


class Opaque:
    pass


def _returns(value: Any) -> Any:
    return value


@torpor.workflow(name="g10.bad_result", version="1")
def bad_result(run: torpor.Run, kind: str) -> Any:
    ok = run.step("ok", _returns, {"fine": [1, 2, 3]})
    run.checkpoint({"after": "ok"})
    bad = {
        "object": Opaque(),
        # (A set is a recorded value since the typed encoding, issue 14; a naive datetime,
        # nested the same way, is refused.)
        "naive": {"a": {datetime(2026, 1, 1)}},
        "nan": [math.nan],
        "key": {1: "int key"},
        # (Over the hard maximum: a large value under it goes to the artifact store, issue 22.)
        "huge": "x" * (serde.MAX_PAYLOAD_BYTES + 1),
    }[kind]
    return [ok, run.step("bad", _returns, bad)]


@pytest.mark.parametrize("kind", ["object", "naive", "nan", "key", "huge"])
def test_unserializable_step_result_is_refused_when_recorded(
    runtime: torpor.Runtime, client: torpor.Client, kind: str
) -> None:
    rid = f"g10-{kind}"
    # The code produced a value that cannot be recorded, and would again: the run ends failed
    # on the first attempt, the step and the problem in the reason (issue 13), not left
    # resumable for ever.
    res = runtime.run(bad_result, kind, run_id=rid)
    assert res.outcome == "failed", res
    assert f"run {rid!r} step 'bad'" in res.reason
    if kind == "huge":
        assert "artifact" in res.reason
    evs = client.events(rid)
    assert all(e.step_id != "bad" for e in evs), "something was recorded for the bad step"
    assert [e.payload.step_id for e in evs if e.type == "step_completed"] == ["ok"]  # type: ignore[attr-defined]
    assert client.state(rid).user_state == {"after": "ok"}
    # Nothing recorded is lost or rewritten by a second attempt either.
    before = [(e.seq, e.type) for e in evs]
    assert runtime.resume(rid).outcome == "failed"
    assert [(e.seq, e.type) for e in client.events(rid)] == before


def _opaque_effect(idempotency_key: str) -> Any:
    return Opaque()


@torpor.workflow(name="g10.bad_effect_result", version="1")
def bad_effect_result(run: torpor.Run, _: Any) -> Any:
    return run.effect("send", _opaque_effect)


def test_unserializable_effect_result_records_that_the_effect_happened(
    runtime: torpor.Runtime, client: torpor.Client
) -> None:
    res = runtime.run(bad_effect_result, None, run_id="g10-eff")
    assert res.outcome == "failed", res
    assert "step 'send'" in res.reason and "not serializable" in res.reason
    eff = client.effects("g10-eff")
    assert [(e.key, e.status) for e in eff] == [("g10-eff/send", "observed")]
    res = runtime.resume("g10-eff")  # never performed again; the run stays failed
    assert res.outcome == "failed", res
    assert "not serializable" in res.reason


def test_unserializable_input_or_compute_arguments_are_refused(
    runtime: torpor.Runtime, client: torpor.Client
) -> None:
    with pytest.raises(torpor.PayloadError) as info:
        runtime.start(bad_result, Opaque(), run_id="bad-input")
    assert "bad-input" in str(info.value) and "input" in str(info.value)
    with pytest.raises(torpor.errors.RunNotFoundError):
        client.get("bad-input")

    @torpor.workflow(name="g10.bad_args", version="1")
    def bad_args(run: torpor.Run, _: Any) -> Any:
        run.step("ok", _returns, 1)
        return run.compute("hash me", _returns, Opaque())

    res = runtime.run(bad_args, None, run_id="bad-args")
    assert res.outcome == "failed", res
    assert "step 'hash me'" in res.reason and "not hashable" in res.reason
    assert all(e.step_id != "hash me" for e in client.events("bad-args"))
