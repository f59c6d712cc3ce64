"""The seeds' recovery list ("Test recovery as aggressively as the happy path"), one test each,
every one reproducible from a seed (``TORPOR_SEEDS_SEED=N``; the seed is printed):

1. kill the worker after it writes an artifact but before it records the checkpoint;
2. drop the acknowledgement after an external effect committed;
3. expire the lease during a slow tool call;
4. deliver the same wake event twice;
5. resume with a different model and a compacted context — the agent's memory layer is not
   there yet, so the "model" is a recorded step whose model id comes from the environment, and
   the context is a working buffer compacted into the workflow's checkpoint;
6. revoke an approval while the run waits.

Each asks what the seeds ask: one correct effect, or a legible unresolved state — never a
corrupted story (the history folds; nothing recorded twice).
"""

from __future__ import annotations

import os
import random
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import runtime_kit as kit
import torpor
from runtime_kit import Lab
from torpor import faults
from torpor.errors import RunFinishedError
from torpor.history import fold
from torpor.testing import Target, assert_effects, effect_counts, explore, step_runs

#: Real processes killed and resumed: the full suite runs these; the fast tier skips them.
pytestmark = pytest.mark.slow

#: Read at import: the autouse fixture clears TORPOR_* variables before each test runs.
SEED_OVERRIDE = os.environ.get("TORPOR_SEEDS_SEED")


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    s = int(SEED_OVERRIDE) if SEED_OVERRIDE else random.SystemRandom().randrange(1 << 30)
    print(f"\n{request.node.name}: seed {s} (replay with TORPOR_SEEDS_SEED={s})")
    return s


@pytest.fixture
def lab(tmp_path: Path, db_url: str) -> Lab:
    return Lab(tmp_path, db_url, tmp_path / "ledger.jsonl")


@pytest.fixture
def plan() -> Iterator[Any]:
    """Install a fault plan in this process for one test."""
    yield faults.install
    faults.reset()


def _folds(client: torpor.Client, run_id: str) -> torpor.RunState:
    st = fold(client.events(run_id))
    assert st.seq == client.state(run_id).seq
    return st


# --------------------------------------------------------------------- 1. artifact, no checkpoint

PAGES = """
import torpor
from torpor.testing import FileLedger


def publish(refs, idempotency_key):
    FileLedger.here().record(idempotency_key, pages=len(refs))
    return {"published": len(refs)}


def find(call):
    return torpor.Applied({"published": 3}) if FileLedger.here().has(call.idempotency_key) \\
        else torpor.Absent()


@torpor.workflow(name="seeds.pages", version="1")
def pages(run, n):
    st = run.restore({"i": 0, "refs": []})
    while st["i"] < n:
        text = run.compute("render", lambda i: f"page {i}\\n" * 50, st["i"])
        ref = run.artifact(f"page-{st['i']}", text, media_type="text/plain")
        st["refs"].append(ref.sha256)
        st["i"] += 1
        run.checkpoint(st)
    out = run.effect("publish", publish, st["refs"], reconcile=find)
    return {"refs": st["refs"], **out}
"""


def test_kill_after_artifact_written_before_checkpoint(tmp_path: Path, seed: int) -> None:
    """Every boundary from ``artifact.stored`` (bytes stored, not recorded) to
    ``checkpoint.saved`` (the checkpoint naming it committed) of a seeded page, crashed, then
    resumed (and crashed again during recovery): the artifact is recorded once, the checkpoint
    refers to it by hash, and publishing happens once."""
    (tmp_path / "pagesflow.py").write_text(textwrap.dedent(PAGES))
    page = random.Random(seed).randint(1, 3)

    def window(boundaries: list[str]) -> list[str]:
        start = boundaries.index(f"artifact.stored@{page}")
        end = boundaries.index(f"checkpoint.saved@{page}")
        return boundaries[start : end + 1]

    target = Target(
        module="pagesflow",
        workflow="seeds.pages",
        input=3,
        paths=[str(tmp_path)],
        ledger="torpor.testing:world_ledger",
    )
    report = explore(
        target, seed=seed, kinds=["crash"], select=window, workdir=tmp_path / "w", jobs=2
    )
    print(report.summary())
    report.assert_ok()
    plans = [c.plan.split(" > ")[0] for c in report.cases]
    assert plans[0] == f"crash:artifact.stored@{page}" and plans[-1].startswith(
        "crash:checkpoint.saved@"
    )
    assert len(plans) >= 5 and all(c.procs[0].killed for c in report.cases)
    # The crash-free run's record: three artifacts, each once, checkpointed by hash.
    assert len(report.baseline["result"]["refs"]) == 3


# --------------------------------------------------------------------- 2. lost acknowledgement


def _deliver(what: str, idempotency_key: str) -> dict[str, Any]:
    kit.ledger("effect", key=idempotency_key, what=what)
    return {"delivered": what}


def _find(call: torpor.EffectCall) -> Any:
    hits = kit.ledger_entries("effect", key=call.idempotency_key)
    return torpor.Applied({"delivered": hits[-1]["what"]}) if hits else torpor.Absent()


@torpor.workflow(name="seeds.ack", version="1")
def three_effects(run: torpor.Run, reconciled: bool) -> Any:
    out = []
    for name in ("invoice", "receipt", "notice"):
        out.append(
            run.effect(
                name, _deliver, f"{name} for {run.input}", reconcile=_find if reconciled else None
            )
        )
    return out


@pytest.mark.parametrize("reconciled", [True, False], ids=["reconcile", "no-reconcile"])
def test_acknowledgement_lost_after_the_effect_committed(
    runtime: torpor.Runtime,
    client: torpor.Client,
    tmp_path: Path,
    plan: Any,
    seed: int,
    reconciled: bool,
) -> None:
    """The call reached the world, then its reply was lost (``ack:effect.called@k``, k drawn
    from the seed): with a reconcile the run finds the delivery and goes on — one delivery of
    each; without one it stops ``unresolved`` naming the effect, and never delivers twice."""
    kit.use_ledger(tmp_path / "ledger.jsonl")
    p = faults.FaultPlan.from_seed(seed, ["effect.called"] * 3, actions=["ack"])
    which = ("invoice", "receipt", "notice")[p.rules[0].nth - 1]
    print(f"plan {p}: the acknowledgement of {which!r} is lost")
    plan(p)
    res = runtime.run(three_effects, reconciled, run_id="ack")
    faults.reset()
    key = f"ack/{which}"
    deliveries = Counter(e["key"] for e in kit.ledger_entries("effect"))
    assert deliveries[key] == 1, deliveries
    if reconciled:
        assert res.outcome == "succeeded", res
        assert_effects(client, "ack", {"invoice": 1, "receipt": 1, "notice": 1}, deliveries)
        verdicts = [
            (e.payload.key, e.payload.verdict.value)  # type: ignore[attr-defined]
            for e in client.events("ack")
            if e.type == "effect_reconciled"
        ]
        assert verdicts == [(key, "applied")]
    else:
        assert res.outcome == "unresolved", res
        assert key in res.reason and "AcknowledgementLost" in res.reason
        assert "torpor resolve ack" in res.reason  # what a person does next
        assert effect_counts(client, "ack").get(key, 0) == 0  # in doubt, not claimed done
        again = runtime.resume("ack")  # resuming never retries it blindly
        assert again.outcome == "unresolved"
        assert Counter(e["key"] for e in kit.ledger_entries("effect"))[key] == 1
    _folds(client, "ack")


# --------------------------------------------------------------------- 3. lease expires mid-call

SLOW_CALLS: Counter[str] = Counter()


def _slow_tool(seconds: float) -> str:
    SLOW_CALLS[threading.current_thread().name] += 1
    time.sleep(seconds)
    return "analysed"


@torpor.workflow(name="seeds.slow", version="1")
def slow(run: torpor.Run, seconds: float) -> Any:
    run.step("fetch", lambda: "data")
    verdict = run.step("analyse", _slow_tool, seconds)
    sent = run.effect("report", _deliver, verdict, reconcile=_find)
    return {"verdict": verdict, **sent}


def test_lease_expires_during_a_slow_tool_call(
    db_url: str, tmp_path: Path, plan: Any, seed: int
) -> None:
    """Worker A's renewal is delayed past its lease's expiry (``delay:lease.renewing@1``) while
    its tool call runs; worker B takes the run over and finishes it. When A's call returns, its
    write is fenced off (LeaseLostError): one recorded analysis, one report, two epochs."""
    kit.use_ledger(tmp_path / "ledger.jsonl")
    SLOW_CALLS.clear()
    rng = random.Random(seed)
    ttl, delay, call_s = 0.8, rng.uniform(1.2, 1.8), rng.uniform(2.2, 2.8)
    print(f"lease ttl {ttl}s, renewal delayed {delay:.2f}s, tool call {call_s:.2f}s")
    plan(f"delay:lease.renewing@1={delay:.3f}")
    a = torpor.Runtime(db_url, lease_ttl_s=ttl, heartbeat_s=ttl / 3, owner="worker-a")
    b = torpor.Runtime(db_url, lease_ttl_s=ttl, heartbeat_s=ttl / 3, owner="worker-b")
    a_error: list[BaseException] = []

    a.start(slow, call_s, run_id="slow")

    def worker_a() -> None:
        try:
            a.resume("slow")
        except BaseException as exc:
            a_error.append(exc)

    ta = threading.Thread(target=worker_a, name="worker-a")
    ta.start()
    client = torpor.Client(b.store)
    try:
        deadline = time.monotonic() + 10
        while True:  # until A's lease has run out (its renewal is late)
            rec = client.get("slow")
            if rec.lease_owner == "worker-a" and rec.lease_expires_at_ms < b.store.now_ms():
                break
            assert time.monotonic() < deadline, "A's lease never expired"
            time.sleep(0.02)
        res: Any = None
        t_b = threading.Thread(target=lambda: res_box.append(b.resume("slow")), name="worker-b")
        res_box: list[Any] = []
        t_b.start()
        t_b.join(30)
        ta.join(30)
        res = res_box[0]
        assert res.outcome == "succeeded", res
        assert len(a_error) == 1 and isinstance(a_error[0], torpor.errors.LeaseLostError), a_error
        assert step_runs(client, "slow") == {"fetch": 1, "analyse": 1, "report": 1}
        assert SLOW_CALLS == {"worker-a": 1, "worker-b": 1}  # never completed by A: B redoes it
        assert_effects(
            client, "slow", {"report": 1}, Counter(e["key"] for e in kit.ledger_entries("effect"))
        )
        epochs = [
            e.payload.epoch  # type: ignore[attr-defined]
            for e in client.events("slow")
            if e.type == "lease_acquired"
        ]
        assert len(epochs) == 2 and epochs[0] < epochs[1]
        _folds(client, "slow")
    finally:
        client.close()
        a.close()
        b.close()


# --------------------------------------------------------------------- 4. the same wake twice


@torpor.workflow(name="seeds.wake", version="1")
def woken(run: torpor.Run, _: Any) -> Any:
    got = run.wait_for("go")
    sent = run.effect("ship", _deliver, f"ship {got}", reconcile=_find)
    return {"got": got, **sent}


def test_the_same_wake_event_delivered_twice(
    runtime: torpor.Runtime, db_url: str, tmp_path: Path, plan: Any, seed: int
) -> None:
    """The wake (a signal) is delivered twice with the same id (``twice:wake.posted@1``), and
    two executors are woken by it at once (seeded start order and jitter): the wait completes
    once, the effect happens once, the second delivery is a no-op."""
    kit.use_ledger(tmp_path / "ledger.jsonl")
    rng = random.Random(seed)
    client = torpor.Client(runtime.store)
    res = runtime.run(woken, None, run_id="wake")
    assert res.status == "waiting"
    deliveries: list[bool] = []
    post = runtime.store.post_inbox

    def counted(*a: Any, **kw: Any) -> bool:
        ok = post(*a, **kw)
        deliveries.append(ok)
        return ok

    runtime.store.post_inbox = counted  # type: ignore[method-assign]
    plan("twice:wake.posted@1")
    assert client.signal("wake", "go", "v1", message_id="delivery-1") is True
    faults.reset()
    runtime.store.post_inbox = post  # type: ignore[method-assign]
    assert deliveries == [False, True]  # delivered again (inner call first): deduplicated
    assert [m.message_id for m in client.inbox("wake")] == ["delivery-1"]
    other = torpor.Runtime(db_url)
    results: list[Any] = []
    errors: list[BaseException] = []

    def wake(rt: torpor.Runtime, pause: float) -> None:
        time.sleep(pause)
        try:
            results.append(rt.resume("wake"))
        except torpor.errors.LeaseHeldError as exc:
            errors.append(exc)  # the other executor has it: the right answer

    pauses = [rng.uniform(0, 0.01), rng.uniform(0, 0.01)]
    threads = [
        threading.Thread(target=wake, args=(rt, p))
        for rt, p in zip((runtime, other), pauses, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    other.close()
    assert len(results) + len(errors) == 2
    final = runtime.resume("wake")
    assert final.outcome == "succeeded" and final.result["got"] == "v1", final
    assert step_runs(client, "wake") == {"wait:go": 1, "ship": 1}
    assert_effects(
        client, "wake", {"ship": 1}, Counter(e["key"] for e in kit.ledger_entries("effect"))
    )
    # A late duplicate of the same delivery is refused; the run is untouched.
    before = len(client.events("wake"))
    with pytest.raises(RunFinishedError):
        client.signal("wake", "go", "v1", message_id="delivery-1")
    body = {"name": "go", "payload": "v1"}  # a transport redelivering below the client
    assert runtime.store.post_inbox("wake", "signal", body, "delivery-1") is False
    assert runtime.resume("wake").outcome == "succeeded"
    assert len(client.events("wake")) == before
    _folds(client, "wake")


# --------------------------------------------------------------------- 5. other model, compacted

THINKER = '''
import os

import torpor

BUDGET = 400  # characters of context handed to a model call


def model_call(prompt):
    """The "model": which one answers comes from the environment (swapped on resume)."""
    model = os.environ["SEED_MODEL"]
    ledger("model", model=model, chars=len(prompt), run=None)
    return {"model": model, "text": f"{model} thought about {len(prompt)} chars"}


def compact(buffer):
    """Summarize the working buffer: keep conclusions and artifact references, drop raw text."""
    return [f"summary of {len(buffer)} notes: " + "; ".join(n[:20] for n in buffer)][:1]


@torpor.workflow(name="seeds.thinker", version="1")
def thinker(run, turns):
    st = run.restore({"turn": 0, "buffer": [], "answers": []})
    while st["turn"] < turns:
        context = "\\n".join(st["buffer"])[-BUDGET:]
        answer = run.step("model", model_call, f"turn {st['turn']}\\n{context}")
        raw = run.artifact(f"tool-output-{st['turn']}", "x" * 2000)
        st["buffer"].append(f"turn {st['turn']}: {answer['text']} (output {raw.sha256[:8]})")
        if len("\\n".join(st["buffer"])) > BUDGET // 2:
            st["buffer"] = compact(st["buffer"])
        st["answers"].append(answer["model"])
        st["turn"] += 1
        run.checkpoint(st)
    return st["answers"]
'''


def test_resume_with_a_different_model_and_a_compacted_context(lab: Lab, seed: int) -> None:
    """Killed at a seeded turn under model m1, resumed under model m2: the calls m1 answered are
    never made (or paid) again, the next ones go to m2, and the context handed to every call
    stays within the budget however long the run."""
    mod = lab.module("thinker", THINKER)
    turns = 8
    crash_turn = random.Random(seed).randint(2, turns - 1)
    point = random.Random(seed + 1).choice(["checkpoint.saved", "artifact.stored"])
    print(f"crash at {point}@{crash_turn} under m1, resume under m2")
    first = lab.drive(
        mod,
        "think",
        workflow="seeds.thinker",
        input=turns,
        crash_at=f"{point}@{crash_turn}",
        env={"SEED_MODEL": "m1"},
    )
    assert first.killed, first.describe()
    done = lab.resume_until_finished(mod, "think", env={"SEED_MODEL": "m2"})
    assert done.result is not None and done.result["outcome"] == "succeeded", done.describe()
    answers = done.result["result"]
    calls = lab.ledger("model")
    # Each turn was answered by exactly one model call that the record kept.
    assert [c["model"] for c in calls].count("m1") + [c["model"] for c in calls].count("m2") == len(
        calls
    )
    assert len(answers) == turns and answers == sorted(answers)  # m1 first, then m2
    assert answers.count("m1") in (crash_turn - 1, crash_turn)
    assert len(calls) == turns  # no call paid twice (the model step is recorded before a crash)
    assert all(c["chars"] <= 400 + 20 for c in calls), calls  # bounded context
    st = lab.state("think")
    assert len("\n".join(st.user_state["buffer"])) <= 400


# --------------------------------------------------------------------- 6. revoke while waiting

SHIP = """
import torpor


def push(ref, idempotency_key):
    ledger("effect", key=idempotency_key, what=ref)
    return {"pushed": ref}


def find_push(call):
    hits = ledger_entries("effect", key=call.idempotency_key)
    return torpor.Applied({"pushed": hits[-1]["what"]}) if hits else torpor.Absent()


@torpor.workflow(name="seeds.ship", version="1")
def ship(run, text):
    ref = run.artifact("patch", text)
    approval = run.approval("ship", [ref])
    run.step("prepare", work, "prepare", 1)
    return run.effect("push", push, ref.sha256, approval=approval, artifacts=[ref],
                      reconcile=find_push)
"""


@pytest.mark.parametrize("when", ["before-resume", "after-decision-recorded"])
def test_revoke_an_approval_while_the_run_waits(lab: Lab, seed: int, when: str) -> None:
    """Approved, then revoked before the effect that consumes it ran: either before the run
    resumed, or after a resume recorded the decision and was killed at a seeded boundary before
    the consumption. The run ends ``blocked`` naming the revocation; nothing is pushed."""
    mod = lab.module("shipflow", SHIP)
    first = lab.drive(mod, "ship", workflow="seeds.ship", input="patch v1\n")
    assert first.result is not None and first.result["status"] == "waiting", first.describe()
    client = lab.client()
    try:
        aid, _ = client.decide("ship", None, "approve", "alice")
        if when == "after-decision-recorded":
            crash = random.Random(seed).choice(
                ["wait.completed@1", "append.after@1", "append.before@2"]
            )
            print(f"resume killed at {crash}")
            killed = lab.drive(mod, "ship", resume=True, crash_at=crash)
            assert killed.killed, killed.describe()
            assert client.state("ship").approvals[aid].status == "approved"
        client.revoke("ship", aid, "carol", reason="the patch breaks the build")
        done = lab.resume_until_finished(mod, "ship")
    finally:
        client.close()
    assert done.result is not None
    assert done.result["outcome"] == "blocked", done.result
    assert "revoked" in done.result["reason"]
    assert lab.ledger("effect") == []
    events = lab.events("ship")
    assert "effect_intended" not in [e.type for e in events]
    assert fold(events).approvals[aid].status == "revoked"
