"""One conformance suite every store backend passes: the same tests on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

import torpor
from torpor.errors import (
    InboxPendingError,
    LeaseHeldError,
    LeaseLostError,
    RunNotFoundError,
    SchemaVersionError,
)
from torpor.history import (
    EffectIntended,
    Event,
    RunStarted,
    RunState,
    StepCompleted,
    StepStarted,
    apply,
    fold,
)
from torpor.store import SQLStore, open_store


@pytest.fixture
def store(store_url: str) -> Any:
    s = open_store(store_url)
    yield s
    s.close()


def _start(store: SQLStore, run_id: str = "r1") -> RunState:
    assert store.create_run(run_id, RunStarted(workflow="wf", version="1"))
    return store.load(run_id)


def _ev(state: RunState, payload: Any, epoch: int) -> Event:
    from torpor.history import type_of

    return Event(
        run_id=state.run_id,
        seq=state.seq + 1,
        type=type_of(payload),
        payload=payload,
        at_ms=1,
        epoch=epoch,
    )


def _append_step(store: SQLStore, lease: Any, state: RunState, step_id: str, result: Any) -> None:
    evs = []
    for p in (
        StepStarted(step_id=step_id, policy="read"),
        StepCompleted(step_id=step_id, result=result, policy="read"),
    ):
        ev = _ev(state, p, lease.epoch)
        apply(state, ev)
        evs.append(ev)
    store.append(lease, evs, state)


def test_create_run_is_idempotent(store: SQLStore) -> None:
    assert store.create_run("r1", RunStarted(workflow="wf", version="1"))
    assert not store.create_run("r1", RunStarted(workflow="other", version="9"))
    rec = store.get_run("r1")
    assert (rec.workflow, rec.version, rec.status, rec.last_seq) == ("wf", "1", "pending", 1)
    with pytest.raises(RunNotFoundError):
        store.get_run("nope")


def test_lease_exclusive_and_epoch_grows(store: SQLStore) -> None:
    _start(store)
    a = store.acquire_lease("r1", "host-a:1:x", ttl_s=30)
    with pytest.raises(LeaseHeldError):
        store.acquire_lease("r1", "host-b:2:y", ttl_s=30)
    store.release_lease(a)
    b = store.acquire_lease("r1", "host-b:2:y", ttl_s=30)
    assert b.epoch == a.epoch + 1
    renewed = store.renew_lease(b)
    assert renewed.epoch == b.epoch
    with pytest.raises(LeaseLostError):
        store.renew_lease(a)


def test_stale_epoch_write_is_rejected_and_writes_nothing(store: SQLStore) -> None:
    state = _start(store)
    a = store.acquire_lease("r1", "host-a:1:x", ttl_s=0.3)
    _append_step(store, a, state, "s1", 1)
    time.sleep(0.4)  # a's lease expires (judged by the store's clock)
    b = store.acquire_lease("r1", "host-b:2:y", ttl_s=30)
    stale = state.model_copy(deep=True)
    with pytest.raises(LeaseLostError):
        _append_step(store, a, stale, "s2", 2)
    assert [e.seq for e in store.read_events("r1")] == [1, 2, 3]
    _append_step(store, b, state, "s2", 2)
    assert store.load("r1").model_dump() == fold(store.read_events("r1")).model_dump()


def test_expired_lease_cannot_write_even_untaken(store: SQLStore) -> None:
    state = _start(store)
    a = store.acquire_lease("r1", "host-a:1:x", ttl_s=0.2)
    time.sleep(0.3)
    with pytest.raises(LeaseLostError):
        _append_step(store, a, state, "s1", 1)
    assert store.get_run("r1").last_seq == 1


def test_load_is_checkpoint_plus_tail(store: SQLStore) -> None:
    store.checkpoint_every = 10
    state = _start(store)
    lease = store.acquire_lease("r1", "o:1:x", ttl_s=30)
    for i in range(25):
        _append_step(store, lease, state, f"s{i}", i)
    rec = store.get_run("r1")
    assert rec.last_seq == 51
    assert 51 - rec.checkpoint_seq < 10 + 2
    loaded = store.load("r1")
    assert loaded.model_dump() == fold(store.read_events("r1")).model_dump()
    comps = store.completions_after("r1", 0)
    assert comps["s7"].result == 7
    c = store.step_completion("r1", "s24")
    assert c is not None and c.result == 24
    assert store.step_completion("r1", "nope") is None


def test_completed_step_never_restarts(store: SQLStore) -> None:
    state = _start(store)
    lease = store.acquire_lease("r1", "o:1:x", ttl_s=30)
    _append_step(store, lease, state, "s1", 1)
    ev = _ev(state, StepStarted(step_id="s1", policy="read"), lease.epoch)
    with pytest.raises(torpor.errors.TransitionError):
        store.append(lease, [ev], apply(state.model_copy(deep=True), ev))
    assert store.get_run("r1").last_seq == 3


def test_inbox_dedupe_wake_and_guard(store: SQLStore) -> None:
    _start(store)
    assert store.post_inbox("r1", "signal", {"name": "go"}, message_id="m1")
    assert not store.post_inbox("r1", "signal", {"name": "go"}, message_id="m1")
    msgs = store.pending_inbox("r1")
    assert [m.message_id for m in msgs] == ["m1"]
    assert store.count_pending_inbox("r1") == 1
    state = store.load("r1")
    lease = store.acquire_lease("r1", "o:1:x", ttl_s=30)
    ev = _ev(state, StepStarted(step_id="s", policy="read"), lease.epoch)
    with pytest.raises(InboxPendingError):
        store.append(lease, [ev], apply(state.model_copy(deep=True), ev), if_inbox_empty=True)
    with pytest.raises(RunNotFoundError):
        store.post_inbox("nope", "signal", {"name": "go"})


def test_claim_next_gives_each_run_to_one_claimer(store: SQLStore) -> None:
    for i in range(20):
        store.create_run(f"r{i}", RunStarted(workflow="wf", version="1"))
    claimed: list[str] = []
    lock = threading.Lock()

    def claimer(n: int) -> None:
        while True:
            lease = store.claim_next(f"host:{n}:c", ttl_s=30)
            if lease is None:
                return
            with lock:
                claimed.append(lease.run_id)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted(f"r{i}" for i in range(20))
    assert store.runnable_runs() == []


def test_list_runs_filters(store: SQLStore) -> None:
    for i in range(3):
        store.create_run(f"r{i}", RunStarted(workflow="wf", version="1"))
    assert len(store.list_runs()) == 3
    assert len(store.list_runs(status="pending")) == 3
    assert store.list_runs(outcome="succeeded") == []


def test_ambiguous_commit_is_read_back(store: SQLStore) -> None:
    state = _start(store)
    lease = store.acquire_lease("r1", "o:1:x", ttl_s=30)
    before = state.model_copy(deep=True)
    _append_step(store, lease, state, "s1", 1)
    evs = store.read_events("r1", 1)
    assert store.appends.landed(evs) is True
    ghost = [_ev(state, StepStarted(step_id="s2", policy="read"), lease.epoch)]
    assert store.appends.landed(ghost) is False
    other = [_ev(before, StepStarted(step_id="x", policy="read"), lease.epoch)]
    assert store.appends.landed(other) is None


def test_newer_schema_is_refused(store_url: str) -> None:
    s = open_store(store_url)
    with s.driver.transaction() as cur:
        s.driver.execute(
            cur, "INSERT INTO torpor_schema (version, applied_at_ms) VALUES (999, 0)", {}
        )
    s.close()
    with pytest.raises(SchemaVersionError):
        open_store(store_url)


@torpor.workflow(name="conformance.e2e", criteria=["checked"])
def _e2e(run: torpor.Run, inp: Any) -> Any:
    a = run.step("a", lambda: 1)
    ref = run.artifact("out", f"value {a}")
    st = run.restore({"i": 0})
    for i in range(st["i"], 3):
        run.compute("c", lambda x: x * 2, i)
        st["i"] = i + 1
        run.checkpoint(st)
    appr = run.approval("ship", [ref])
    sent = run.effect("send", lambda idempotency_key: idempotency_key, approval=appr)
    got = run.wait_for("go", timeout=timedelta(seconds=30))
    run.verify("checked", True)
    return {"sent": sent, "got": got}


def test_workflow_end_to_end(store_url: str) -> None:
    rt = torpor.Runtime(store_url)
    c = torpor.Client(rt.store)
    try:
        res = rt.run("conformance.e2e", None, run_id="e2e")
        assert res.status == "waiting"
        c.decide("e2e", None, "approve", "alice")
        assert rt.resume("e2e").status == "waiting"
        c.signal("e2e", "go", {"x": 1}, message_id="m")
        c.signal("e2e", "go", {"x": 1}, message_id="m")
        res = rt.resume("e2e")
        assert res.outcome == "succeeded", res
        assert res.result == {"sent": "e2e/send", "got": {"x": 1}}
        st = c.state("e2e")
        assert st.model_dump() == fold(c.events("e2e")).model_dump()
    finally:
        rt.close()


def test_message_id_reused_for_another_run_is_refused(store: SQLStore) -> None:
    _start(store, "a")
    _start(store, "b")
    assert store.post_inbox("a", "signal", {"name": "go"}, message_id="m")
    with pytest.raises(torpor.TorporError, match="already used for run 'a'"):
        store.post_inbox("b", "signal", {"name": "go"}, message_id="m")
    assert store.pending_inbox("b") == []


def test_corrupt_inbox_body_does_not_block_the_run(store: SQLStore) -> None:
    _start(store)
    store.post_inbox("r1", "signal", {"name": "go"}, message_id="bad")
    with store.driver.transaction() as cur:
        store.driver.execute(
            cur, "UPDATE inbox SET body = 'not json' WHERE message_id = :m", {"m": "bad"}
        )
    [msg] = store.pending_inbox("r1")
    assert (msg.message_id, msg.body) == ("bad", {})


_RESOLVE_CALLS: list[str] = []


def _unknown(call: torpor.EffectCall) -> torpor.Unknown:
    return torpor.Unknown("the service does not say")


def _flaky_send(idempotency_key: str) -> str:
    _RESOLVE_CALLS.append(idempotency_key)
    raise ConnectionError("timed out after sending")


@torpor.workflow(name="conformance.unresolved")
def _unresolved_wf(run: torpor.Run, inp: Any) -> Any:
    return run.effect("send", _flaky_send, reconcile=_unknown)


def test_a_settled_unresolved_run_is_picked_up_by_a_worker(store_url: str) -> None:
    from torpor.worker import Worker

    _RESOLVE_CALLS.clear()
    rt = torpor.Runtime(store_url)
    c = torpor.Client(rt.store)
    try:
        assert rt.run("conformance.unresolved", run_id="u").outcome == "unresolved"
        assert rt.store.runnable_runs() == []
        c.resolve("u", "u/send", "applied", "ops", result="sent-by-hand")
        assert rt.store.runnable_runs() == ["u"]
        stats = Worker(rt, poll_s=0.05).run(until_idle=True, max_seconds=20)
        assert stats.outcomes == {"succeeded": 1}
        assert c.get("u").outcome == "succeeded"
        assert c.state("u").result == "sent-by-hand"
        assert _RESOLVE_CALLS == ["u/send"]  # the person settled it; never performed again
    finally:
        rt.close()


def test_unreachable_postgres_is_one_clear_store_error() -> None:
    with pytest.raises(torpor.errors.StoreError, match=r"unreachable.*refused") as err:
        open_store("postgresql://postgres:hunter2@127.0.0.1:1/nowhere")
    assert "hunter2" not in str(err.value)


def test_two_runs_approving_the_same_content(store_url: str) -> None:
    """Approval ids are content-bound, so they repeat across runs; decisions must not clash."""
    rt = torpor.Runtime(store_url)
    c = torpor.Client(rt.store)
    try:
        for rid in ("same-1", "same-2"):
            assert rt.run("conformance.e2e", None, run_id=rid).status == "waiting"
        aid1, _ = c.decide("same-1", None, "approve", "alice")
        aid2, _ = c.decide("same-2", None, "deny", "bob")
        assert aid1 == aid2
        assert rt.resume("same-1").status == "waiting"  # now waits for its signal
        assert rt.resume("same-2").outcome == "blocked"
    finally:
        rt.close()


def test_oversized_message_is_refused_at_the_door(store: SQLStore) -> None:
    from torpor import serde

    _start(store)
    with pytest.raises(torpor.PayloadError, match=r"run 'r1'.*over the"):
        store.post_inbox("r1", "signal", {"name": "go", "payload": "x" * serde.MAX_PAYLOAD_BYTES})
    assert store.pending_inbox("r1") == []  # nothing queued that could block the run


def test_self_referencing_value_is_a_payload_error(store_url: str) -> None:
    loop: list[Any] = []
    loop.append(loop)
    rt = torpor.Runtime(store_url)
    try:
        with pytest.raises(torpor.PayloadError, match="nested deeper"):
            rt.start("conformance.e2e", loop, run_id="loop")
    finally:
        rt.close()


def test_owner_in_another_pid_namespace_is_never_judged_dead() -> None:
    from torpor.owners import new_owner_id, owner_is_dead

    host, _pid, rest = new_owner_id().split(":", 2)
    rand, boot, ns, start = rest.split("~")
    gone_pid = "4194303"  # above any pid in use
    assert owner_is_dead(f"{host}:{gone_pid}:{rand}~{boot}~{ns}~{start}")
    assert not owner_is_dead(f"{host}:{gone_pid}:{rand}~{boot}~1~{start}")  # other namespace
    assert not owner_is_dead(f"{host}:{gone_pid}:{rand}~other~{ns}~{start}")  # other boot
    assert not owner_is_dead(f"{host}:{gone_pid}:{rand}")  # no identity: expiry decides


def test_the_run_row_follows_the_state_through_steady_appends(store: SQLStore) -> None:
    """Plain steps of a running run leave the row's status columns alone (the steady short
    path); every append that changes them writes them: the row always says what the folded
    state says, through waits, a wake time, a version change and the outcome."""
    from torpor.history import (
        LeaseAcquired,
        Outcome,
        RunFinished,
        VersionAccepted,
        WaitCompleted,
        WaitStarted,
    )

    state = _start(store)
    lease = store.acquire_lease("r1", "host-a:1:x", ttl_s=30)
    n = [0]
    seen: list[str] = []
    real = store.driver.write_one  # the plain path: one fenced insert, the row left alone

    def spy(*a: Any) -> Any:
        seen.append("steady")
        return real(*a)

    store.driver.write_one = spy  # type: ignore[method-assign]

    def write(*payloads: Any, wake_at_ms: int | None = None, new: str = "") -> None:
        evs = []
        for p in payloads:
            ev = _ev(state, p, lease.epoch)
            apply(state, ev)
            evs.append(ev)
        store.append(lease, evs, state, wake_at_ms=wake_at_ms, new_steps={new})

    def step() -> None:
        n[0] += 1
        sid = f"s{n[0]}"  # proved new (as the executor does): the short path
        write(StepCompleted(step_id=sid, result=n[0], policy="read", attempt=1), new=sid)

    def row() -> tuple[Any, ...]:
        r = store.get_run("r1")
        return (r.status, r.outcome, r.wake_at_ms, r.version, r.last_seq)

    write(LeaseAcquired(owner=lease.owner, epoch=lease.epoch))
    for _ in range(3):
        step()
        assert row() == ("running", None, None, "1", state.seq)
    deadline = 4_000_000_000_000
    write(
        WaitStarted(wait_id="w", kind="timer", name="t", deadline_ms=deadline), wake_at_ms=deadline
    )
    assert row() == ("waiting", None, deadline, "1", state.seq)
    write(WaitCompleted(wait_id="w", via="timer"))
    assert row() == ("running", None, None, "1", state.seq)
    step()
    write(VersionAccepted(from_version="1", to_version="2"))
    assert row() == ("running", None, None, "2", state.seq)
    for _ in range(70):  # past a checkpoint_every boundary on the short path
        step()
    assert row() == ("running", None, None, "2", state.seq)
    assert store.load("r1") == state
    write(RunFinished(outcome=Outcome.SUCCEEDED, reason="done"))
    assert row() == ("finished", "succeeded", None, "2", state.seq)
    assert store.load("r1") == state
    assert seen.count("steady") >= 70, seen  # the steady path was taken for plain steps


def test_a_performed_key_is_never_intended_again(store: SQLStore) -> None:
    """G2 at the store: a performed effect leaves the run state (it stays the size of what is
    in doubt), and its key stays in the effect index: intending it again — by the same step or
    another, after a user checkpoint, or after a reload — is refused and writes nothing, and a
    key a person settled as applied counts as performed too. A key settled absent may be
    intended again."""
    from torpor.history import (
        CheckpointSaved,
        EffectIntended,
        EffectObserved,
        EffectReconciled,
        Verdict,
    )

    state = _start(store)
    lease = store.acquire_lease("r1", "o:1:x", ttl_s=30)

    def write(*payloads: Any) -> None:
        evs = []
        for p in payloads:
            ev = _ev(state, p, lease.epoch)
            apply(state, ev)
            evs.append(ev)
        store.append(lease, evs, state)

    write(
        StepStarted(step_id="push", policy="effect"),
        EffectIntended(step_id="push", key="k", operation="push"),
    )
    write(EffectObserved(key="k", result="sha"), StepCompleted(step_id="push", policy="effect"))
    write(
        StepStarted(step_id="pay", policy="effect"),
        EffectIntended(step_id="pay", key="p", operation="pay"),
    )
    write(EffectReconciled(key="p", verdict=Verdict.APPLIED, by="alice"))
    write(StepCompleted(step_id="pay", policy="effect"))
    write(
        StepStarted(step_id="mail", policy="effect"),
        EffectIntended(step_id="mail", key="m", operation="mail"),
    )
    write(EffectReconciled(key="m", verdict=Verdict.ABSENT))
    write(CheckpointSaved(state={"i": 1}))
    assert state.effects == {} and state.effects_applied == 2
    assert store.load("r1") == state
    before = [e.seq for e in store.read_events("r1")]
    for key, step in (("k", "push-again"), ("k", "other"), ("p", "pay-again")):
        trial = store.load("r1")
        evs = []
        for p in (
            StepStarted(step_id=step, policy="effect"),
            EffectIntended(step_id=step, key=key, operation="op"),
        ):
            ev = _ev(trial, p, lease.epoch)
            apply(trial, ev)  # the compact fold no longer knows the key: the store must
            evs.append(ev)
        with pytest.raises(torpor.errors.TransitionError, match=f"effect '{key}' was performed"):
            store.append(lease, evs, trial)
        assert [e.seq for e in store.read_events("r1")] == before
    write(
        StepStarted(step_id="mail-again", policy="effect"),
        EffectIntended(step_id="mail-again", key="m", operation="mail", attempt=2),
    )


# ------------------------------------------------------- queues, schedules, episodes, retention


def test_queue_rows_and_the_queue_view(store: SQLStore) -> None:
    from torpor.store.base import Dispatch
    from torpor.store.domain import QueueView

    limits = dict(concurrency=2, key_concurrency=1, rate_limit=3, rate_period_ms=60_000)
    store.set_queue("q1", **limits, key_rate_limit=None, key_rate_period_ms=None)
    assert store.queue_row("q1") == ("q1", 2, 1, 3, 60_000, None, None)
    store.set_queue("q0", **{**limits, "concurrency": None}, key_rate_limit=1, key_rate_period_ms=5)
    assert [r[0] for r in store.queue_rows()] == ["q0", "q1"]
    assert store.delete_queue("q0") and not store.delete_queue("q0")
    assert store.queue_row("q0") is None and store.queue_view("nope", 10) is None
    for rid in ("r1", "r2"):
        store.create_run(rid, RunStarted(workflow="wf", version="1"), Dispatch("q1", "k", 5))
    store.create_run("free", RunStarted(workflow="wf", version="1"))
    assert store.run_queue_row("r1") == ("pending", "q1", "k", 5, None, None)
    assert store.queue_view("free", 10) == QueueView(("pending", None, None, 0, None, None))
    assert store.queue_view("r1", 10) == QueueView(store.run_queue_row("r1"), store.queue_row("q1"))
    lease = store.claim_next("host-a:1:x", ttl_s=30)
    assert lease is not None and lease.run_id == "r1"  # (created first, same priority)
    view = store.queue_view("r2", 10)
    assert view is not None and view.queue == store.queue_row("q1")
    assert [r[:2] for r in view.active] == [("r1", "k")] == [r[:2] for r in view.recent]
    assert store.queue_view("r1", 10) == QueueView(store.run_queue_row("r1"))  # started
    assert [r[0] for r in store.runs_queue_columns(10)] == ["free", "r1", "r2"]
    assert store.damaged_pending_queue_columns(10) == []


def test_schedule_rows_move_on_by_compare_and_set(store: SQLStore) -> None:
    kw = dict(workflow="wf", input_json="{}", cron="* * * * *", tz="UTC", catchup="one")
    store.put_schedule("s", **kw, queue=None, next_fire_ms=1000, now_ms=500)
    row = store.schedule_row("s")
    assert row is not None and row[:7] == ("s", "wf", "{}", "* * * * *", "UTC", "one", None)
    assert (bool(row[7]), row[8:]) == (False, (1000, None, 1, None, None))
    assert store.due_schedule_rows(999, 10) == [] and store.due_schedule_rows(1000, 10) == [row]
    assert store.next_schedule_fire_ms() == 1000
    move = dict(generation=1, prev_fire_ms=1000, next_fire_ms=2000, last_fire_ms=1000, now_ms=1)
    assert store.advance_schedule("s", **move) and not store.advance_schedule("s", **move)
    fail = dict(generation=1, prev_fire_ms=2000, retry_at_ms=5000, error="boom", now_ms=2)
    assert store.fail_schedule("s", **fail)
    assert store.schedule_row("s")[8:] == (2000, 1000, 1, "boom", 5000)
    assert store.due_schedule_rows(3000, 10) == [] and store.next_schedule_fire_ms() == 5000
    store.pause_schedule("s", paused=True, next_fire_ms=None)
    assert store.due_schedule_rows(9000, 10) == [] and store.next_schedule_fire_ms() is None
    store.pause_schedule("s", paused=False, next_fire_ms=7000)
    paused, *rest = store.schedule_row("s")[7:]
    assert (bool(paused), rest) == (False, [7000, 1000, 3, None, None])
    store.put_schedule("s", **kw, queue="q", next_fire_ms=8000, now_ms=3)
    assert store.schedule_row("s")[6:11:4] == ("q", 4)
    assert [r[0] for r in store.schedule_rows()] == ["s"]
    assert store.delete_schedule("s") and not store.delete_schedule("s")


def test_episode_rows_write_once_supersede_search_and_prune(store: SQLStore) -> None:
    from torpor.episodes.model import pair_tag, tags_for
    from torpor.store.domain import EpisodeFilter, EpisodeRecord

    sha = "a" * 64
    assert store.episode_filing("r1") is None
    store.create_run("r1", RunStarted(workflow="wf", version="1"), scope="s", task_type="t")
    assert store.episode_filing("r1") == ("wf", "s", "t", 0)

    def rec(n: int, verdict: str) -> EpisodeRecord:
        return EpisodeRecord(
            f"r1:ended@{n}", "r1", f"ended@{n}", "s", "a", "t", "ended", "completed",
            f"deploy {n}", "retry the deploy", n, 1000 + n, {}, {"artifacts": [sha]},
            {"deploy": verdict}, " ".join(tags_for("s", "a", "t", "completed")),
        )  # fmt: skip

    def differ(new: dict[str, str], old: dict[str, str]) -> bool:
        return any(old.get(k) not in (None, v) for k, v in new.items())

    first, second = rec(1, "failed"), rec(2, "succeeded")
    kw: dict[str, Any] = dict(contradicts=differ, window=10)
    assert store.write_episodes([first], captured=("r1", 1), **kw) == [first]
    assert store.write_episodes([first], captured=None, **kw) == []  # written once
    assert store.episode_filing("r1") == ("wf", "s", "t", 1)
    assert store.write_episodes([second], captured=None, **kw) == [second]
    row = store.episode_row(first.episode_id)
    assert row[15] == second.episode_id and row[16] == second.created_at_ms  # valid until then
    assert store.count_episodes() == 2 and store.episode_runs_behind(10) == []
    assert store.collect_episode_refs(dry_run=True) == (0, 2, 1)
    f = EpisodeFilter("s", (pair_tag("s", "t"),), task_type="t")
    with store.episode_index() as ix:
        assert ix.count(f, [], 100) == 2 and ix.count(f, ["retry"], 100) == 2
        ids = [r[0] for r in ix.scored(f, {"deploy": 1.0}, 10)]
        found, more = ix.recent(f, ["deploy"], 10, 2)
        assert sorted(ids) == sorted(i for i, _ in found) and len(ids) == 2 and not more
        live = ix.rows(f, ids)
    assert [r[0] for r in live.values()] == [second.episode_id]  # the superseded is left out
    assert store.supersede_episode(second.episode_id, first.episode_id)
    assert not store.supersede_episode(second.episode_id, first.episode_id)
    assert store.prune_episodes(before_ms=10**6, superseded_only=True, batch=1) == 2
    assert store.count_episodes() == 0 and store.collect_episode_refs(dry_run=False) == (0, 0, 0)


def test_episode_vector_rows_by_id_once_per_model_and_swept(store: SQLStore) -> None:
    """Issue 32: vectors keyed by (episode id, model), float32 bytes in and out on both
    backends (a blob / a ``real[]``), written once, read by id, swept with their episode."""
    from torpor.episodes import Episode, EpisodeStore
    from torpor.store.episode_vectors import pack

    def ep(n: int) -> Episode:
        return Episode(
            f"v{n}:ended@1",
            f"v{n}",
            "ended@1",
            "s",
            "a",
            "t",
            "ended",
            "failed",
            f"summary {n}",
            "",
            1,
            1_000 * n,
        )

    EpisodeStore(store, embedder=None).write([ep(1), ep(2)])
    v1, v2 = pack([0.5, -0.25, 1e-3]), pack([1.0, 0.0, 0.0])
    assert store.write_episode_vectors("m", [("v1:ended@1", v1)], now_ms=5) == 1
    store.write_episode_vectors("m", [("v1:ended@1", v2), ("v2:ended@1", v2)], now_ms=6)
    assert store.episode_vectors("m", ["v1:ended@1", "v2:ended@1", "v9"]) == {
        "v1:ended@1": v1,  # the first write stays
        "v2:ended@1": v2,
    }
    assert store.episodes_without_vectors("m", 10) == []
    assert store.episodes_without_vectors("other", 10) == [
        ("v2:ended@1", "summary 2", ""),
        ("v1:ended@1", "summary 1", ""),
    ]
    assert store.count_episode_vectors("m") == 2
    assert store.prune_episodes(before_ms=1_500, superseded_only=False, batch=10) == 1
    assert store.drop_orphan_episode_vectors() == 1
    assert store.episode_vectors("m", ["v1:ended@1", "v2:ended@1"]) == {"v2:ended@1": v2}


def test_retention_rows_and_an_archive_restored_under_another_id(store: SQLStore) -> None:
    import dataclasses

    from torpor.errors import StoreError
    from torpor.store.domain import RetentionPolicy

    state = _start(store)
    lease = store.acquire_lease("r1", "host-a:1:x", ttl_s=30)
    _append_step(store, lease, state, "s1", {"n": 1})
    policy = RetentionPolicy("wf", keep_last=0)
    store.set_retention_policy(policy)
    assert store.retention_policies() == [policy]
    assert store.expired_runs(policy) == [] and not store.delete_run("r1")  # not finished
    store.set_retention_policy(RetentionPolicy("wf"))
    assert store.retention_policies() == []
    assert isinstance(store.reclaim_pages(), str) and store.referenced_artifacts() == set()
    assert store.collectable_chunks(0) == (0, 0) and store.run_blob_bytes("r1") == (0, 0)
    assert [r.run_id for r in store.largest_runs(5, "wf")] == ["r1"]
    lines = list(
        store.archive_lines(dataclasses.asdict(store.get_run("r1")), store.iter_events("r1"))
    )
    with pytest.raises(StoreError, match="exists already"):
        store.restore_run(lines, "here")
    lines[0] = lines[0].replace('"r1"', '"r1-copy"', 1)
    assert store.restore_run(lines, "here") == "r1-copy"
    assert [e.type for e in store.read_events("r1-copy")] == [
        e.type for e in store.read_events("r1")
    ]


def test_child_rows_and_the_outcome_told_to_the_parent(store: SQLStore) -> None:
    """Issue 37: a run created with a parent is listed as its child; recording a child's
    outcome posts a ``child`` message to the parent and wakes it, in the same transaction —
    once per outcome — and tells a finished parent nothing."""
    from torpor.history import Outcome, RunFinished, WaitStarted

    _start(store, "p")
    for kid in ("p.b", "p.a"):
        assert store.create_run(kid, RunStarted(workflow="wf", version="1", parent="p"))
    assert [r.run_id for r in store.child_runs("p")] == ["p.b", "p.a"]  # oldest first
    assert store.run_parent("p.a") == "p" and store.run_parent("p") is None
    assert store.run_parent("nope") is None and store.child_runs("nope") == []
    # The parent goes to wait (holding nothing).
    lp = store.acquire_lease("p", "host-a:1:x", ttl_s=30)
    ps = store.load("p")
    evs = []
    for pl in (
        _lease_acquired(lp),
        StepStarted(step_id="children", policy="read"),
        WaitStarted(wait_id="children", kind="children", name="p.a", children=["p.a"], need=1),
    ):
        ev = _ev(ps, pl, lp.epoch)
        apply(ps, ev)
        evs.append(ev)
    store.append(lp, evs, ps)
    store.release_lease(lp)
    assert store.get_run("p").status == "waiting" and "p" not in store.runnable_runs()
    # The child ends: its outcome append tells the parent.
    lc = store.acquire_lease("p.a", "host-a:1:x", ttl_s=30)
    cs = store.load("p.a")
    evs = []
    for pl in (_lease_acquired(lc), RunFinished(outcome=Outcome.FAILED, reason="boom")):
        ev = _ev(cs, pl, lc.epoch)
        apply(cs, ev)
        evs.append(ev)
    store.append(lc, evs, cs, if_inbox_empty=True)
    msgs = store.pending_inbox("p")
    assert [(m.kind, m.body) for m in msgs] == [
        ("child", {"child": "p.a", "outcome": "failed", "seq": cs.seq})
    ]
    assert msgs[0].message_id == f"child:p.a:{cs.seq}"
    assert "p" in store.runnable_runs()  # woken
    # A finished parent is told nothing (it takes no message).
    _start(store, "q")
    assert store.create_run("q.a", RunStarted(workflow="wf", version="1", parent="q"))
    for rid, outcome in (("q", Outcome.SUCCEEDED), ("q.a", Outcome.CANCELLED)):
        lease = store.acquire_lease(rid, "host-a:1:x", ttl_s=30)
        st = store.load(rid)
        evs = []
        for pl in (_lease_acquired(lease), RunFinished(outcome=outcome)):
            ev = _ev(st, pl, lease.epoch)
            apply(st, ev)
            evs.append(ev)
        store.append(lease, evs, st, if_inbox_empty=True)
    assert store.pending_inbox("q") == []


def _lease_acquired(lease: Any) -> Any:
    from torpor.history import LeaseAcquired

    return LeaseAcquired(owner=lease.owner, epoch=lease.epoch)


def test_a_fan_in_wakes_its_parent_once_enough_children_ended(store: SQLStore) -> None:
    """Issue 37: with the count of outcomes its wait still needs kept on its row, a parent is
    woken by the outcome that makes it enough — and by an unresolved one at once — not by
    every child."""
    from torpor.history import Outcome, RunFinished, WaitStarted

    _start(store, "f")
    kids = ["f.1", "f.2", "f.3", "f.4"]
    for kid in kids:
        assert store.create_run(kid, RunStarted(workflow="wf", version="1", parent="f"))

    def finish(rid: str, outcome: Outcome) -> None:
        lease = store.acquire_lease(rid, "host-a:1:x", ttl_s=30)
        st = store.load(rid)
        evs = []
        for pl in (_lease_acquired(lease), RunFinished(outcome=outcome)):
            ev = _ev(st, pl, lease.epoch)
            apply(st, ev)
            evs.append(ev)
        store.append(lease, evs, st, if_inbox_empty=True)

    finish("f.1", Outcome.SUCCEEDED)  # before the wait: counted when the parent keeps count
    lp = store.acquire_lease("f", "host-a:1:x", ttl_s=30)
    ps = store.load("f")
    evs = []
    for pl in (
        _lease_acquired(lp),
        StepStarted(step_id="children", policy="read"),
        WaitStarted(wait_id="children", kind="children", name="f", children=kids[:3], need=3),
    ):
        ev = _ev(ps, pl, lp.epoch)
        apply(ps, ev)
        evs.append(ev)
    store.append(lp, evs, ps, consumes=[(m.message_id, ps.seq) for m in store.pending_inbox("f")])
    assert store.await_children("f", kids[:3], 3) == 2
    store.release_lease(lp)
    assert "f" not in store.runnable_runs()
    finish("f.4", Outcome.SUCCEEDED)  # not waited on: wakes early at worst, never late
    finish("f.2", Outcome.FAILED)
    assert "f" in store.runnable_runs()  # enough: 2 of the 2 still needed (f.4 counted too)
    # An unresolved child wakes its parent whatever the count.
    _start(store, "g")
    assert store.create_run("g.1", RunStarted(workflow="wf", version="1", parent="g"))
    assert store.create_run("g.2", RunStarted(workflow="wf", version="1", parent="g"))
    lg = store.acquire_lease("g", "host-a:1:x", ttl_s=30)
    gs = store.load("g")
    evs = []
    for pl in (
        _lease_acquired(lg),
        StepStarted(step_id="children", policy="read"),
        WaitStarted(wait_id="children", kind="children", name="g", children=["g.1", "g.2"], need=2),
    ):
        ev = _ev(gs, pl, lg.epoch)
        apply(gs, ev)
        evs.append(ev)
    store.append(lg, evs, gs)
    assert store.await_children("g", ["g.1", "g.2"], 2) == 2
    store.release_lease(lg)
    lc = store.acquire_lease("g.1", "host-a:1:x", ttl_s=30)
    cs = store.load("g.1")
    evs = []
    for pl in (
        _lease_acquired(lc),
        StepStarted(step_id="send", policy="effect"),
        EffectIntended(step_id="send", key="g.1/send", operation="send"),
        RunFinished(outcome=Outcome.UNRESOLVED, reason="in doubt"),
    ):
        ev = _ev(cs, pl, lc.epoch)
        apply(cs, ev)
        evs.append(ev)
    store.append(lc, evs, cs, if_inbox_empty=True)
    assert "g" in store.runnable_runs()
