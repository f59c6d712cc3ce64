"""Every message a run receives gets a recorded disposition (G11), on both backends:

1. a wait's deadline is a deadline: whether a message satisfies a wait is decided by when it
   *arrived* (the store's clock at posting) against the deadline fixed when the wait began, not
   by when a process got round to looking (FakeClock: time moves only when the test says);
2. a cancel is never dropped: it is taken at the run's next boundary, including the boundary of
   finishing; a message reaching a run after its outcome is refused where it is sent, and a
   finished run never holds an unread message;
3. answers go to the wait they answer, once: by name they are buffered until a wait of that
   name takes them; addressed to one wait instance they go to that wait or are refused.

The real-process versions (the CLI, worker processes, a process paused before its outcome)
are in ``tests/test_messages_procs.py``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import runtime_kit as kit
import torpor
from torpor.errors import InboxError, RunFinishedError
from torpor.history import fold
from torpor.store import open_store
from torpor.testing import FakeClock

T0 = 1_900_000_000.0  # the fake clock's start (epoch seconds)


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path) -> None:
    kit.use_ledger(tmp_path / "ledger.jsonl")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


class World:
    """One database on a fake clock; ``restart()`` is a new runtime (a new owner, a new
    connection: only what is durable carries over), ``client`` another process's view."""

    def __init__(self, url: str, clock: FakeClock, tmp: Path):
        self.url, self.clock, self.tmp = url, clock, tmp
        self.rt = self._runtime()
        self.client = torpor.Client(open_store(url, clock=clock))

    def _runtime(self) -> torpor.Runtime:
        return torpor.Runtime(self.url, str(self.tmp / "artifacts"), clock=self.clock)

    def restart(self) -> torpor.Runtime:
        self.rt.close()
        self.rt = self._runtime()
        return self.rt

    def at(self, seconds: float) -> None:
        """Move the clock to ``T0 + seconds``."""
        self.clock.advance(T0 + seconds - self.clock())

    def close(self) -> None:
        self.rt.close()
        self.client.close()


@pytest.fixture
def world(store_url: str, clock: FakeClock, tmp_path: Path) -> Iterator[World]:
    w = World(store_url, clock, tmp_path)
    yield w
    w.close()


def _escalate(run_id: str, idempotency_key: str) -> str:
    kit.ledger("effect", branch="timeout", key=idempotency_key)
    return "escalated"


def _proceed(answer: Any, idempotency_key: str) -> str:
    kit.ledger("effect", branch="answer", key=idempotency_key)
    return "proceeded"


@torpor.workflow(name="msg.deadline", version="1")
def deadline_flow(run: torpor.Run, _: Any) -> dict[str, Any]:
    try:
        answer = run.wait_for("approval", timeout=timedelta(seconds=60))
    except torpor.WaitTimeout:
        run.effect("escalate", _escalate, run.run_id)  # the timeout branch
        branch = "timeout"
    else:
        run.effect("proceed", _proceed, answer)
        branch = "answer"
    run.wait_for("done")  # keeps the run open, so the buffer can be looked at
    return {"branch": branch}


def _branches() -> list[str]:
    return [e["branch"] for e in kit.ledger_entries("effect")]


def _wait_ends(client: torpor.Client, rid: str) -> list[Any]:
    return [e for e in client.events(rid) if e.type == "wait_completed"]


# ------------------------------------------------------------------ 1. deadlines by arrival


def test_restart_before_the_deadline_times_out_at_the_deadline(world: World) -> None:
    world.rt.run(deadline_flow, None, run_id="d55")
    world.at(55)
    res = world.restart().resume("d55")
    assert res.status == "waiting" and res.wake_at_ms == int((T0 + 60) * 1000), res
    world.at(59.999)
    assert world.restart().resume("d55").status == "waiting"
    assert _branches() == []
    world.at(60)
    world.restart().resume("d55")
    (end,) = _wait_ends(world.client, "d55")
    assert (end.payload.via, end.at_ms) == ("deadline", int((T0 + 60) * 1000))
    assert _branches() == ["timeout"]


def test_restart_after_the_deadline_times_out_at_once(world: World) -> None:
    world.rt.run(deadline_flow, None, run_id="d90")
    world.at(90)
    world.restart().resume("d90")
    (end,) = _wait_ends(world.client, "d90")
    assert (end.payload.via, end.at_ms) == ("deadline", int((T0 + 90) * 1000))
    assert _branches() == ["timeout"]


def test_an_answer_arriving_after_the_deadline_does_not_satisfy_the_wait(world: World) -> None:
    """Nothing runs when the deadline passes; the answer arrives at 65 s; the run resumes at
    70 s: the timeout branch runs, its effect once, and the late answer stays buffered, listed
    as arrived after the deadline of the wait — never taken by it."""
    world.rt.run(deadline_flow, None, run_id="d65")
    world.at(65)
    world.client.signal("d65", "approval", "yes", message_id="late-yes")
    world.at(70)
    res = world.restart().resume("d65")
    assert _branches() == ["timeout"]
    assert res.status == "waiting", res  # now on "done"
    (end,) = _wait_ends(world.client, "d65")
    assert end.payload.via == "deadline"
    world.restart().resume("d65")  # resumed again: the branch's effect is not repeated
    assert _branches() == ["timeout"]
    sent = world.client.send_signal("d65", "approval", "again")  # no wait of its name is open
    assert (sent.status, sent.wait_id) == ("buffered", None)
    [late] = [m for m in world.client.messages("d65") if m.message_id == "late-yes"]
    assert late.status == "late" and late.wait_id == "wait:approval"
    assert late.arrived_at_ms == int((T0 + 65) * 1000)
    assert late.reason == "arrived after the deadline of wait wait:approval"
    # It is kept: a later wait of its name would take it. The run ends; it is refused then.
    world.client.signal("d65", "done", None)
    res = world.restart().resume("d65")
    assert res.outcome == "succeeded" and res.result == {"branch": "timeout"}, res
    views = {m.message_id: m for m in world.client.messages("d65")}
    late = views["late-yes"]
    assert late.status == "refused" and "after the deadline of wait wait:approval" in late.reason
    assert views[sent.message_id].status == "refused"  # unused: no wait for it came
    assert world.client.state("d65").signals == {}
    fold(world.client.events("d65"))


def test_an_answer_that_arrived_in_time_is_taken_however_late_the_run_looks(
    world: World,
) -> None:
    world.rt.run(deadline_flow, None, run_id="d59")
    world.at(59)
    sent = world.client.send_signal("d59", "approval", "yes")
    assert (sent.status, sent.wait_id) == ("waiting", "wait:approval")
    world.at(60)
    late = world.client.send_signal("d59", "approval", "no")
    assert (late.status, late.wait_id) == ("late", "wait:approval")
    world.at(600)
    world.restart().resume("d59")
    (end,) = _wait_ends(world.client, "d59")
    assert (end.payload.via, end.payload.payload) == ("signal", "yes")
    assert _branches() == ["answer"]


def _publish(text: str, idempotency_key: str) -> str:
    kit.ledger("effect", branch="published", key=idempotency_key)
    return "published"


@torpor.workflow(name="msg.approval", version="1")
def approval_flow(run: torpor.Run, _: Any) -> str:
    ref = run.artifact("draft.txt", "hello", media_type="text/plain")
    ok = run.approval("publish", [ref], timeout=timedelta(seconds=60))
    run.effect("publish", _publish, "hello", approval=ok, artifacts=[ref])
    return "published"


def test_a_decision_arriving_after_the_approval_deadline_does_not_authorize(
    world: World,
) -> None:
    assert world.rt.run(approval_flow, None, run_id="a65").status == "waiting"
    world.at(65)
    world.client.decide("a65", None, "approve", "alice")
    res = world.restart().resume("a65")
    assert res.outcome == "blocked" and "timed out" in res.reason, res
    assert _branches() == []
    (end,) = _wait_ends(world.client, "a65")
    assert end.payload.via == "deadline"


# ------------------------------------------------------------------ 2. cancels are never dropped


def _post_cancel(url: str, run_id: str, clock: FakeClock) -> str:
    with torpor.Client(open_store(url, clock=clock)) as c:
        c.cancel(run_id, by="ops", reason="stop it")
    return "cancel posted"


def _notify(run_id: str, idempotency_key: str) -> str:
    kit.ledger("effect", branch="notified", key=idempotency_key)
    return "notified"


@torpor.workflow(name="msg.last_step", version="1")
def last_step_flow(run: torpor.Run, cfg: dict[str, Any]) -> str:
    run.effect("notify", _notify, run.run_id)
    run.step("last", _post_cancel, cfg["url"], run.run_id, CLOCKS[cfg["clock"]])
    return "done"


#: Clocks by name, for workflows whose input must be JSON.
CLOCKS: dict[str, FakeClock] = {}


def test_a_cancel_during_the_last_step_ends_the_run_cancelled(world: World) -> None:
    CLOCKS["c"] = world.clock
    res = world.rt.run(last_step_flow, {"url": world.url, "clock": "c"}, run_id="c1")
    assert res.outcome == "cancelled", res
    assert "cancelled by ops: stop it" in res.reason and "1 effect(s)" in res.reason
    types = [e.type for e in world.client.events("c1")]
    assert types.count("cancel_requested") == 1 and types[-1] == "run_finished"
    assert world.client.inbox("c1") == []  # never an unread message in a finished run
    assert [(e.key, e.status) for e in world.client.effects("c1")] == [("c1/notify", "observed")]
    assert _branches() == ["notified"]
    with pytest.raises(RunFinishedError, match="already finished: cancelled"):
        world.client.signal("c1", "go", 1)


def test_the_store_refuses_a_message_to_a_finished_run(world: World) -> None:
    world.rt.run(deadline_flow, None, run_id="f1")
    world.client.signal("f1", "approval", "yes", message_id="m1")
    world.client.signal("f1", "done", None)
    assert world.rt.resume("f1").outcome == "succeeded"
    store = world.client.store
    with pytest.raises(RunFinishedError, match="run 'f1' already finished: succeeded"):
        store.post_inbox("f1", "signal", {"name": "go"}, message_id="m2")
    with pytest.raises(RunFinishedError):
        store.post_inbox("f1", "cancel", {"by": "ops"})
    # A redelivery of a message the run already took is still a no-op, not an error.
    assert store.post_inbox("f1", "signal", {"name": "approval"}, message_id="m1") is False
    assert store.pending_inbox("f1") == []


def _flaky(what: str, idempotency_key: str) -> str:
    raise ConnectionError("service down")


def _cannot_tell(call: torpor.EffectCall) -> torpor.Unknown:
    return torpor.Unknown("no record")


@torpor.workflow(name="msg.unresolved", version="1")
def unresolved_flow(run: torpor.Run, _: Any) -> str:
    run.effect("pay", _flaky, "x", reconcile=_cannot_tell)
    return "paid"


def test_a_message_that_got_into_a_finished_run_is_refused_on_the_record(world: World) -> None:
    """A reopening message reaches a finished (unresolved) run, but does not apply: it is
    recorded as refused, and the run keeps its outcome, holding no unread message."""
    assert world.rt.run(unresolved_flow, None, run_id="u1").outcome == "unresolved"
    body = {"key": "u1/nope", "verdict": "absent", "by": "bob"}
    assert world.client.store.post_inbox("u1", "resolve", body, message_id="r1")
    res = world.restart().resume("u1")
    assert res.outcome == "unresolved", res
    assert world.client.inbox("u1") == []
    [refused] = [m for m in world.client.messages("u1") if m.status == "refused"]
    assert refused.message_id == "r1" and refused.kind == "resolve"
    assert refused.reason.startswith("run already finished: unresolved")
    assert world.client.get("u1").status == "finished"
    fold(world.client.events("u1"))


@torpor.workflow(name="msg.quick", version="1")
def quick_flow(run: torpor.Run, _: Any) -> str:
    run.step("one", lambda: 1)
    return "done"


def test_cancels_racing_the_outcome_are_taken_or_refused_never_dropped(
    store_url: str, tmp_path: Path
) -> None:
    """Runs finish while cancels are posted to them from other threads, each just after its
    run's last step was recorded (a few ms before, at or after its outcome): every cancel is
    either taken (the run ends cancelled, the cancel recorded) or refused where it was sent
    (the run had finished); no finished run holds an unread message."""
    n = 12
    rng = random.Random(12)
    with torpor.Runtime(store_url, str(tmp_path / "a")) as rt:
        ids = [rt.start(quick_flow, None, run_id=f"race-{i}") for i in range(n)]
        jitter = {rid: rng.uniform(0, 0.01) for rid in ids}
        posted: dict[str, str] = {}
        go = threading.Barrier(2 * n)

        def execute(rid: str) -> None:
            go.wait()
            rt.resume(rid)

        def cancel(rid: str) -> None:
            with torpor.Client(store_url) as c:
                go.wait()
                while c.get(rid).last_seq < 3:  # run_started, lease_acquired, the step
                    time.sleep(0.001)
                time.sleep(jitter[rid])
                try:
                    c.store.post_inbox(rid, "cancel", {"by": "ops"}, message_id=f"c-{rid}")
                    posted[rid] = "posted"
                except RunFinishedError:
                    posted[rid] = "refused"

        threads = [threading.Thread(target=f, args=(r,)) for r in ids for f in (execute, cancel)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        client = torpor.Client(rt.store)
        for rid in ids:
            st = client.state(rid)
            assert st.status == "finished", rid
            assert client.inbox(rid) == [], rid
            if posted[rid] == "posted":
                assert st.cancel_requested and st.outcome == "cancelled", (rid, st.outcome)
            else:
                assert not st.cancel_requested and st.outcome == "succeeded", rid


# ------------------------------------------------------------------ 3. answers go to their wait


@torpor.workflow(name="msg.questions", version="1")
def questions(run: torpor.Run, _: Any) -> list[Any]:
    q1 = run.wait_for("Q1")
    q2 = run.wait_for("Q2", timeout=timedelta(seconds=60))
    return [q1, q2]


def test_answers_addressed_to_a_wait_go_to_it_once_or_are_refused(world: World) -> None:
    c = world.client
    world.rt.run(questions, None, run_id="q")
    assert c.send_signal("q", "Q9", "nine").status == "buffered"  # no wait for Q9 yet
    first = c.send_signal("q", None, "one", wait_id="wait:Q1")
    assert (first.name, first.status, first.wait_id) == ("Q1", "waiting", "wait:Q1")
    # Refused where it is sent: already answered (the first answer is pending), unknown.
    with pytest.raises(InboxError, match="already answered"):
        c.send_signal("q", None, "uno", wait_id="wait:Q1")
    with pytest.raises(InboxError, match="no open wait 'wait:Q7'"):
        c.send_signal("q", "Q7", "seven", wait_id="wait:Q7")
    with pytest.raises(InboxError, match="waits for signal 'Q1', not 'Q2'"):
        c.send_signal("q", "Q2", "two", wait_id="wait:Q1")
    assert world.restart().resume("q").status == "waiting"  # now on Q2
    with pytest.raises(InboxError, match="already answered"):
        c.send_signal("q", "Q1", "again", wait_id="wait:Q1")
    # Two answers to Q2 that both passed the sender's check (the run had not looked yet):
    # the first is taken, the second refused on the record, naming the first.
    a = c.send_signal("q", "Q2", "two", wait_id="wait:Q2")
    post = c.store.post_inbox
    post("q", "signal", {"name": "Q2", "payload": "deux", "wait_id": "wait:Q2"}, "second")
    world.at(61)
    with pytest.raises(InboxError, match="timed out"):
        c.send_signal("q", "Q2", "too late", wait_id="wait:Q2")
    # An addressed answer that passed the check but arrived after the deadline is refused too.
    post("q", "signal", {"name": "Q2", "payload": "tard", "wait_id": "wait:Q2"}, "late-1")
    res = world.restart().resume("q")
    assert res.outcome == "succeeded" and res.result == ["one", "two"], res
    waits = {e.payload.wait_id: e.payload.signal_id for e in _wait_ends(c, "q")}
    assert waits == {"wait:Q1": first.message_id, "wait:Q2": a.message_id}  # tied, once
    views = {m.message_id: m for m in c.messages("q")}
    assert views[first.message_id].status == "consumed"
    assert views[a.message_id].status == "consumed"
    assert views["second"].status == "refused"
    assert (
        views["second"].reason == f"wait wait:Q2 was already answered (by message {a.message_id})"
    )
    assert views["late-1"].status == "refused"
    assert views["late-1"].reason == "arrived after the deadline of wait wait:Q2"
    [nine] = [m for m in views.values() if m.name == "Q9"]
    assert nine.status == "refused"
    assert nine.reason.startswith("unused: the run ended succeeded before a wait for 'Q9'")
    assert c.inbox("q") == [] and c.state("q").signals == {}
    with pytest.raises(RunFinishedError):
        c.send_signal("q", "Q9", "after the end")
    fold(c.events("q"))


@torpor.workflow(name="msg.loop", version="1")
def loop_flow(run: torpor.Run, n: int) -> list[Any]:
    return [run.wait_for("msg") for _ in range(n)]


def test_signals_by_name_are_buffered_and_taken_one_per_wait(world: World) -> None:
    """Signals by name arriving in the same millisecond (the fake clock stands still) are
    taken in the order they arrived, one per wait, each once."""
    c = world.client
    rid = world.rt.start(loop_flow, 8, run_id="loop")
    for i in range(8):
        assert c.signal(rid, "msg", i, message_id=f"m{7 - i}") is True
    res = world.rt.resume(rid)
    assert res.outcome == "succeeded" and res.result == list(range(8)), res
    ends = [e.payload.signal_id for e in _wait_ends(c, rid)]
    assert ends == [f"m{7 - i}" for i in range(8)]
