"""G5: ``succeeded`` only with a passing verification of every completion criterion; warnings
make it ``succeeded_with_warnings``; ``stopped_safe`` is refused once an effect happened and the
refusal is recorded honestly; explicit ``block``; the evidence is in the checkpoint answers."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

import runtime_kit as kit
import torpor


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path) -> None:
    kit.use_ledger(tmp_path / "ledger.jsonl")


def _boom() -> bool:
    raise RuntimeError("test runner crashed")


@torpor.workflow(name="g5.release", version="1", criteria=["tests pass", "lint clean"])
def release(run: torpor.Run, cfg: dict[str, Any]) -> str:
    run.step("build", lambda: "built")
    if cfg.get("tests") is not None:
        run.verify("tests pass", cfg["tests"], detail={"passed": 41, "failed": 0})
    if cfg.get("lint") == "raise":
        run.verify("lint clean", _boom)
    elif cfg.get("lint") is not None:
        run.verify("lint clean", lambda: (cfg["lint"], {"findings": 0 if cfg["lint"] else 3}))
    for w in cfg.get("warnings", []):
        run.warn(w)
    return "done"  # saying "done" is not evidence


@pytest.mark.parametrize(
    ("cfg", "outcome", "reason"),
    [
        ({"tests": True, "lint": True}, "succeeded", "all completion criteria verified"),
        ({}, "failed", "never verified: tests pass, lint clean"),
        ({"tests": True}, "failed", "never verified: lint clean"),
        ({"tests": True, "lint": False}, "failed", "failing: lint clean"),
        ({"tests": False, "lint": True}, "failed", "failing: tests pass"),
        ({"tests": True, "lint": "raise"}, "failed", "failing: lint clean"),
        (
            {"tests": True, "lint": True, "warnings": ["3 files skipped"]},
            "succeeded_with_warnings",
            "3 files skipped",
        ),
    ],
)
def test_outcome_follows_the_evidence(
    runtime: torpor.Runtime,
    client: torpor.Client,
    cfg: dict[str, Any],
    outcome: str,
    reason: str,
) -> None:
    res = runtime.run(release, cfg)
    assert res.outcome == outcome, res
    assert reason in res.reason, res.reason
    st = client.state(res.run_id)
    assert st.outcome == outcome
    answers = client.answers(res.run_id)
    assert answers["next"].startswith(f"finished: {outcome}")
    for name in ("tests pass", "lint clean"):
        if name in st.verifications:
            assert answers["evidence"]["verifications"][name] == {
                "passed": st.verifications[name].passed
            }
    if cfg.get("lint") == "raise":
        detail = st.verifications["lint clean"].detail
        assert "RuntimeError: test runner crashed" in detail
    if outcome != "failed":
        assert res.result == "done"


def _send(what: str, idempotency_key: str) -> dict[str, str]:
    kit.ledger("effect", key=idempotency_key, what=what)
    return {"sent": what}


@torpor.workflow(name="g5.stop", version="1")
def stopper(run: torpor.Run, cfg: dict[str, Any]) -> str:
    run.step("look", lambda: "looked")
    if cfg.get("effect_first"):
        run.effect("send", _send, "hello")
    if cfg.get("block"):
        run.block("no budget left for the model")
    run.stop_safe("nothing to do: the repository is already modern")
    return "unreachable"


def test_stop_safe_before_any_effect(runtime: torpor.Runtime) -> None:
    res = runtime.run(stopper, {})
    assert res.outcome == "stopped_safe", res
    assert "already modern" in res.reason
    assert kit.ledger_entries("effect") == []


def test_stop_safe_after_an_applied_effect_is_refused_and_recorded_honestly(
    runtime: torpor.Runtime, client: torpor.Client
) -> None:
    res = runtime.run(stopper, {"effect_first": True}, run_id="late-stop")
    assert res.outcome != "stopped_safe", res
    assert res.outcome == "failed", res  # known state, nothing in doubt — but not "safe"
    assert "already modern" in res.reason
    assert "effects were applied" in res.reason
    assert len(kit.ledger_entries("effect")) == 1
    finished = [e.payload for e in client.events("late-stop") if e.type == "run_finished"]
    assert [f.outcome for f in finished] == ["failed"]  # type: ignore[attr-defined]
    answers = client.answers("late-stop")
    assert (answers["effects"], answers["effects_performed"]) == ({}, 1)


def test_block(runtime: torpor.Runtime) -> None:
    res = runtime.run(stopper, {"block": True})
    assert res.outcome == "blocked" and "no budget" in res.reason, res


def test_workflow_exception_fails_with_the_reason(runtime: torpor.Runtime) -> None:
    @torpor.workflow(name="g5.raises", version="1")
    def raises(run: torpor.Run, _: Any) -> None:
        run.step("one", lambda: 1)
        raise ValueError("the plan has a cycle")

    res = runtime.run(raises, None)
    assert res.outcome == "failed"
    assert res.reason == "ValueError: the plan has a cycle"


def test_a_result_that_cannot_be_recorded_fails_the_run_either_way(
    runtime: torpor.Runtime,
) -> None:
    """Not JSON and too large are the same kind of answer: the code's result cannot be
    recorded and running the code again gives it again, so the run ends failed with the reason
    (it is not left resumable forever, nor does a PayloadError escape the runtime)."""
    from torpor import serde

    @torpor.workflow(name="g5.results", version="1")
    def results(run: torpor.Run, kind: str) -> Any:
        run.step("one", lambda: 1)
        return {1, 2} if kind == "set" else "x" * (serde.MAX_PAYLOAD_BYTES + 1)

    res = runtime.run(results, "set", run_id="set")
    assert res.outcome == "failed" and "not serializable" in res.reason, res
    res = runtime.run(results, "big", run_id="big")
    assert res.outcome == "failed" and "over the" in res.reason and "artifact" in res.reason, res
    assert res.result is None


@pytest.mark.parametrize(
    ("run_id", "says"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("a/b", "'/'"),
        ("tab\there", "control"),
        ("x" * 201, "over 200"),
        ("episode:r1:ended@5", "episode:"),
    ],
)
def test_a_bad_run_id_is_refused_before_anything_is_recorded(
    runtime: torpor.Runtime, run_id: str, says: str
) -> None:
    @torpor.workflow(name="ids.plain", version="1")
    def plain(run: torpor.Run, _: Any) -> int:
        return 1

    with pytest.raises(torpor.errors.ConfigError, match=says):
        runtime.start(plain, None, run_id=run_id)
    assert runtime.store.list_runs() == []


def test_a_huge_reason_is_cut_not_left_unrecordable(runtime: torpor.Runtime) -> None:
    """stop_safe after an applied effect is refused by the fold and recorded as a fallback
    outcome with the same reason: a reason of megabytes must not make that record impossible
    (the run would stay resumable for ever, raising PayloadError at every attempt)."""

    @torpor.workflow(name="g5.huge_reason", version="1")
    def huge(run: torpor.Run, _: Any) -> None:
        run.effect("send", lambda: "ok")
        run.stop_safe("x" * 2_000_000)

    res = runtime.run(huge, None, run_id="huge")
    assert res.status == "finished" and res.outcome == "failed", res
    assert "(truncated) [stopped_safe" in res.reason and len(res.reason) < 5000


def test_a_failed_step_stays_failed_across_a_user_checkpoint(runtime: torpor.Runtime) -> None:
    """A recorded failure is replayed after run.checkpoint like before it: the step body does
    not run again (it used to, and its new record was then refused while the run waited)."""
    calls: list[int] = []

    def flaky() -> int:
        calls.append(1)
        return 1 // 0

    @torpor.workflow(name="g1.failed_then_checkpoint", version="1")
    def ck(run: torpor.Run, _: Any) -> int:
        with contextlib.suppress(torpor.StepError):
            run.step("f", flaky)
        run.checkpoint({"k": 1})
        return int(run.wait_for("go"))

    assert runtime.run(ck, None, run_id="ck").status == "waiting"
    torpor.Client(runtime.store).signal("ck", "go", 7)
    res = runtime.resume("ck")
    assert (res.outcome, res.result) == ("succeeded", 7), res
    assert len(calls) == 1


def test_a_signal_too_large_to_record_is_refused_when_sent(runtime: torpor.Runtime) -> None:
    """A message is refused at post time if the event recording it could not be stored, so a
    run never blocks on a message it accepted; one just inside the limit is delivered."""
    from torpor import serde

    @torpor.workflow(name="g7.big_signal", version="1")
    def sig(run: torpor.Run, _: Any) -> int:
        return len(run.wait_for("go"))

    assert runtime.run(sig, None, run_id="sig").status == "waiting"
    client = torpor.Client(runtime.store)
    with pytest.raises(torpor.PayloadError, match="limit for messages"):
        client.signal("sig", "go", "x" * (serde.MAX_PAYLOAD_BYTES - 40))
    fits = serde.MAX_PAYLOAD_BYTES - 4096 - 100
    client.signal("sig", "go", "x" * fits)
    res = runtime.resume("sig")
    assert (res.outcome, res.result) == ("succeeded", fits), res
