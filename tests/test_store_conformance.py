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
from torpor.history import Event, RunStarted, RunState, StepCompleted, StepStarted, apply, fold
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
