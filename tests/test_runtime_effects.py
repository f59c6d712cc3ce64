"""G2 under real crashes: an effect reaches the outside world at most once per idempotency key,
exactly once when the run succeeds; an effect in doubt that cannot be reconciled leaves the run
``unresolved`` — never retried blindly, never called failed — until a person settles it.

The outside world is the ledger file; ``reconcile`` looks for the idempotency key there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime_kit import Lab

#: Real subprocesses (CLI runs, interpreters): the default tier, not the fast one.
pytestmark = pytest.mark.proc

EFFECTS = """
def find_sent_logged(call):
    ledger("reconcile", key=call.idempotency_key, attempt=call.attempt)
    return find_sent(call)


def cannot_tell(call):
    ledger("reconcile", key=call.idempotency_key, attempt=call.attempt)
    return torpor.Unknown("the mail relay keeps no log")


def send_then_time_out(what, idempotency_key):
    ledger("effect", key=idempotency_key, what=what)
    raise TimeoutError("no answer from the relay after sending")


def refuse(what, idempotency_key):
    raise ConnectionRefusedError("relay refused the connection")


RECONCILERS = {"find": find_sent_logged, "unknown": cannot_tell, "none": None}
SENDERS = {"send": send, "timeout": send_then_time_out, "refuse": refuse}


@torpor.workflow(name="g2.mail", version="1")
def mail(run, cfg):
    before = run.step("draft", work, "draft", "hello")
    sent = run.effect(
        "send", SENDERS[cfg["send"]], before, reconcile=RECONCILERS[cfg["reconcile"]]
    )
    after = run.step("after", work, "after", 1)
    return {"sent": sent, "after": after}
"""


@pytest.fixture
def lab(tmp_path: Path, db_url: str) -> Lab:
    lab = Lab(tmp_path, db_url, tmp_path / "ledger.jsonl")
    lab.module("g2wf", EFFECTS)
    return lab


def start(lab: Lab, rid: str, crash_at: str, send: str = "send", reconcile: str = "find") -> None:
    cfg = {"send": send, "reconcile": reconcile}
    p = lab.drive("g2wf", rid, workflow="g2.mail", input=cfg, crash_at=crash_at)
    assert p.killed, p.describe()


def test_killed_after_call_before_record_reconciles_applied(lab: Lab) -> None:
    start(lab, "a1", "effect.called")
    assert len(lab.ledger("effect")) == 1  # the mail went out; the record did not
    st = lab.state("a1")
    assert st.effects["a1/send"].status == "intended"

    p = lab.resume_until_finished("g2wf", "a1")
    assert p.result is not None
    assert p.result["outcome"] == "succeeded", p.result
    assert p.result["result"]["sent"] == {"sent": "hello"}
    assert len(lab.ledger("effect")) == 1, "the effect was performed twice"
    assert [r["key"] for r in lab.ledger("reconcile")] == ["a1/send"]
    types = [e.type for e in lab.events("a1")]
    assert "effect_reconciled" in types and "effect_observed" not in types
    rec = next(e for e in lab.events("a1") if e.type == "effect_reconciled")
    assert rec.payload.verdict == "applied"  # type: ignore[attr-defined]
    lab.check_no_rerun_after_record("a1")


def test_killed_after_intent_before_call_reconciles_absent(lab: Lab) -> None:
    start(lab, "b1", "effect.intended")
    assert lab.ledger("effect") == []  # died before calling out

    p = lab.resume_until_finished("g2wf", "b1")
    assert p.result is not None and p.result["outcome"] == "succeeded", p.describe()
    hits = lab.ledger("effect")
    assert len(hits) == 1, "performed once after reconcile found it absent"
    assert hits[0]["pid"] == lab.pids[-1]
    verdicts = [e.payload.verdict for e in lab.events("b1") if e.type == "effect_reconciled"]  # type: ignore[attr-defined]
    assert verdicts == ["absent"]
    intents = [e.payload.attempt for e in lab.events("b1") if e.type == "effect_intended"]  # type: ignore[attr-defined]
    assert intents == [1, 2]


@pytest.mark.parametrize("reconcile", ["unknown", "none"])
def test_unknown_outcome_is_unresolved_then_a_person_says_applied(lab: Lab, reconcile: str) -> None:
    start(lab, "u1", "effect.called", reconcile=reconcile)
    assert len(lab.ledger("effect")) == 1

    first = lab.drive("g2wf", "u1", resume=True)
    assert first.result is not None, first.describe()
    assert first.result["outcome"] == "unresolved", first.result
    why = "the mail relay keeps no log" if reconcile == "unknown" else "no reconcile function"
    assert why in first.result["reason"]
    c = lab.client()
    try:
        answers = c.answers("u1")
        assert answers["effects"] == {"u1/send": "unknown"}
        assert "unresolved" in answers["next"] and why in answers["next"]
        assert [(v.key, v.status) for v in c.effects("u1")] == [("u1/send", "unknown")]
    finally:
        c.close()

    # Resuming again changes nothing: never retried blindly, reconcile not asked again.
    n_events = len(lab.events("u1"))
    again = lab.drive("g2wf", "u1", resume=True)
    assert again.result is not None and again.result["outcome"] == "unresolved"
    assert len(lab.events("u1")) == n_events
    assert len(lab.ledger("effect")) == 1
    assert len(lab.ledger("reconcile")) == (1 if reconcile == "unknown" else 0)

    # A person looked at the relay: it was sent.
    c = lab.client()
    try:
        c.resolve("u1", "u1/send", "applied", "alice", result={"sent": "hello", "by": "alice"})
    finally:
        c.close()
    done = lab.resume_until_finished("g2wf", "u1")
    assert done.result is not None
    assert done.result["outcome"] == "succeeded", done.result
    assert done.result["result"]["sent"] == {"sent": "hello", "by": "alice"}
    assert len(lab.ledger("effect")) == 1
    assert len(lab.ledger("step", name="after")) == 1
    reopened = [e for e in lab.events("u1") if e.type == "run_reopened"]
    assert len(reopened) == 1 and reopened[0].payload.by == "alice"  # type: ignore[attr-defined]
    lab.check_no_rerun_after_record("u1")


def test_unknown_outcome_then_a_person_says_absent_performs_exactly_once(lab: Lab) -> None:
    start(lab, "u2", "effect.intended", reconcile="unknown")
    assert lab.ledger("effect") == []
    first = lab.drive("g2wf", "u2", resume=True)
    assert first.result is not None and first.result["outcome"] == "unresolved"
    assert lab.ledger("effect") == []  # not retried blindly

    c = lab.client()
    try:
        c.resolve("u2", "u2/send", "absent", "bob", reason="not in the relay's queue")
    finally:
        c.close()
    done = lab.resume_until_finished("g2wf", "u2")
    assert done.result is not None and done.result["outcome"] == "succeeded", done.result
    assert len(lab.ledger("effect")) == 1, "absent -> performed exactly once"
    # And it stays once: resuming the finished run does nothing more.
    lab.drive("g2wf", "u2", resume=True)
    assert len(lab.ledger("effect")) == 1


def test_effect_raising_after_it_applied_is_reconciled_not_retried(lab: Lab) -> None:
    """No crash: the call itself fails after the world changed (a timeout on the reply)."""
    p = lab.drive("g2wf", "t1", workflow="g2.mail", input={"send": "timeout", "reconcile": "find"})
    assert p.result is not None and p.result["outcome"] == "succeeded", p.describe()
    assert len(lab.ledger("effect")) == 1
    rec = [e.payload for e in lab.events("t1") if e.type == "effect_reconciled"]
    assert rec[0].verdict == "applied" and "TimeoutError" in rec[0].reason  # type: ignore[attr-defined]


def test_effect_refused_and_confirmed_absent_fails_honestly(lab: Lab) -> None:
    p = lab.drive("g2wf", "f1", workflow="g2.mail", input={"send": "refuse", "reconcile": "find"})
    assert p.result is not None, p.describe()
    assert p.result["outcome"] == "failed", p.result
    assert "ConnectionRefusedError" in p.result["reason"]
    assert lab.ledger("effect") == [] and lab.ledger("step", name="after") == []


def test_effect_raising_with_unknown_outcome_is_unresolved(lab: Lab) -> None:
    p = lab.drive("g2wf", "f2", workflow="g2.mail", input={"send": "timeout", "reconcile": "none"})
    assert p.result is not None and p.result["outcome"] == "unresolved", p.describe()
    assert "TimeoutError" in p.result["reason"]
    assert len(lab.ledger("effect")) == 1
    assert lab.ledger("step", name="after") == []


def test_cancelling_a_run_with_an_effect_in_doubt_stays_honest(lab: Lab) -> None:
    """Killed after the call, then cancelled before anyone resumed it: the mail may have gone
    out, so the run cannot just say ``cancelled`` — it is ``unresolved`` until a person settles
    the effect, and then it ends ``cancelled`` without performing anything more."""
    start(lab, "c1", "effect.called")
    c = lab.client()
    try:
        c.cancel("c1", by="ops", reason="wrong recipient")
    finally:
        c.close()
    p = lab.drive("g2wf", "c1", resume=True)
    assert p.result is not None, p.describe()
    assert p.result["outcome"] == "unresolved", p.result
    assert "wrong recipient" in p.result["reason"] or "cancel" in p.result["reason"]
    assert "c1/send" in p.result["reason"]
    c = lab.client()
    try:
        assert c.answers("c1")["effects"] == {"c1/send": "intended"}
        c.resolve("c1", "c1/send", "applied", "ops", result={"sent": "hello"})
    finally:
        c.close()
    done = lab.resume_until_finished("g2wf", "c1")
    assert done.result is not None and done.result["outcome"] == "cancelled", done.result
    assert len(lab.ledger("effect")) == 1
    assert lab.ledger("step", name="after") == []


@pytest.mark.parametrize("verdict", ["applied", "absent"])
def test_a_person_settles_the_effect_before_anyone_resumes(lab: Lab, verdict: str) -> None:
    """Crashed with the effect in doubt; a person checks the relay and resolves it before the
    run is resumed: the resume takes the person's word and does not ask reconcile."""
    point = "effect.called" if verdict == "applied" else "effect.intended"
    start(lab, "p1", point)
    c = lab.client()
    try:
        assert [(v.key, v.status) for v in c.effects("p1")] == [("p1/send", "intended")]
        c.resolve("p1", "p1/send", verdict, "dana", result={"sent": "hello", "by": "dana"})
    finally:
        c.close()
    done = lab.resume_until_finished("g2wf", "p1")
    assert done.result is not None and done.result["outcome"] == "succeeded", done.result
    assert len(lab.ledger("effect")) == 1
    assert lab.ledger("reconcile") == []
    if verdict == "applied":
        assert done.result["result"]["sent"] == {"sent": "hello", "by": "dana"}
    else:
        assert lab.ledger("effect")[0]["pid"] == lab.pids[-1]
