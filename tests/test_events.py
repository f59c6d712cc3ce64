"""The event model and its pure fold (guarantee G4), proven over random histories.

A small state machine (:class:`Model`, independent of :mod:`torpor.history`) generates *valid*
run histories: lease changes, steps started / completed / failed / retried, effects intended /
observed / reconciled / failed, artifacts, approvals requested / decided / revoked / consumed,
waits on signals, timers and approvals, user checkpoints, verifications, warnings, outcomes that
the evidence allows, and reopening. :func:`impossible` derives, from any reachable state,
events that cannot happen next. Properties:

- every generated history folds, event by event;
- every impossible event is refused with a TransitionError naming the run, the seq and the
  rule, and leaves the state exactly as it was;
- folding a prefix and then the rest equals folding the whole;
- a RunState survives a JSON round trip (what the engine checkpoint relies on), and folding
  the rest onto the round-tripped state equals folding the whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hyp import examples
from torpor.errors import TransitionError
from torpor.history import (
    EVENT_TYPES,
    REOPENABLE,
    ApprovalConsumed,
    ApprovalDecided,
    ApprovalRefused,
    ApprovalRequested,
    ApprovalRevoked,
    ArtifactCreated,
    AttentionNeeded,
    BudgetSet,
    CancelRequested,
    CheckpointSaved,
    ChildEnded,
    ContextBuilt,
    ContextCompacted,
    EffectFailed,
    EffectIntended,
    EffectObserved,
    EffectReconciled,
    Event,
    LeaseAcquired,
    MessageRefused,
    ModelCalled,
    Outcome,
    Payload,
    PlannedStep,
    PlanRecorded,
    Policy,
    ReplyRetracted,
    RunFinished,
    RunForked,
    RunReopened,
    RunStarted,
    RunState,
    RunStatus,
    SignalReceived,
    SteerReceived,
    SteerTaken,
    StepCompleted,
    StepFailed,
    StepStarted,
    ToolCallSettled,
    Verdict,
    VerificationRecorded,
    VersionAccepted,
    WaitCompleted,
    WaitEscalated,
    WaitStarted,
    WarningRecorded,
    apply,
    checkpoint_answers,
    fold,
    type_of,
)

RUN = "run-ä"
FAST = settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

hexes = st.text("0123456789abcdef", min_size=64, max_size=64)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
CRITERIA = ["tests", "lint", "compile"]
SIGNALS = ["go", "data"]
DOUBT = ("intended", "unknown")


# --------------------------------------------------------------------------- the model


@dataclass
class Model:
    """What a valid history allows next; deliberately written apart from the fold."""

    criteria: list[str]
    version: str = "1"
    epoch: int = 0
    n: int = 0  # fresh-id counter
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    effects: dict[str, dict[str, Any]] = field(default_factory=dict)
    artifacts: dict[str, int] = field(default_factory=dict)
    hashes: list[str] = field(default_factory=list)
    approvals: dict[str, dict[str, Any]] = field(default_factory=dict)
    wait: dict[str, Any] | None = None
    #: Buffered signals by name: {"id", "arrived" (ms or None), "wait" (the wait it answers)}.
    signals: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    verifications: dict[str, bool] = field(default_factory=dict)
    warnings: int = 0
    applied: int = 0
    outcome: Outcome | None = None
    plan_version: int = 0
    plan: dict[str, dict[str, Any]] = field(default_factory=dict)
    compactions: int = 0
    #: Steering messages (issue 39): {"id", "interrupt", "taken"}.
    steers: list[dict[str, Any]] = field(default_factory=list)
    #: Events so far (a fork's run_forked names the seq it follows).
    seq: int = 1

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def open_steps(self, policy: Policy | None = None) -> list[str]:
        return [
            k
            for k, v in self.steps.items()
            if v["status"] == "started" and (policy is None or v["policy"] is policy)
        ]

    def in_doubt(self, step_id: str | None = None) -> list[str]:
        return [
            k
            for k, e in self.effects.items()
            if e["status"] in DOUBT and (step_id is None or e["step"] == step_id)
        ]


Draw = Callable[[st.SearchStrategy[Any]], Any]
Action = Callable[[Draw, Model], list[Payload]]


def a_lease(draw: Draw, m: Model) -> list[Payload]:
    m.epoch += draw(st.integers(1, 3))
    return [LeaseAcquired(owner=m.fresh("worker-"), epoch=m.epoch)]


def a_version(draw: Draw, m: Model) -> list[Payload]:
    old, m.version = m.version, m.fresh("v")
    return [VersionAccepted(from_version=old, to_version=m.version)]


def a_step_new(draw: Draw, m: Model) -> list[Payload]:
    sid = m.fresh("step-")
    policy = draw(st.sampled_from([*Policy, Policy.EFFECT]))
    ih = draw(hexes) if policy is Policy.COMPUTE else None
    m.steps[sid] = {"policy": policy, "status": "started", "attempt": 1, "ih": ih}
    return [
        StepStarted(step_id=sid, policy=policy, input_hash=ih, purpose=draw(st.text(max_size=5)))
    ]


def retryable(m: Model) -> list[str]:
    out = []
    for k, v in m.steps.items():
        if v["status"] == "started" and v["policy"] is not Policy.EFFECT:
            out.append(k)  # a crash left it open: a new attempt supersedes it
        elif v["status"] == "failed":
            out.append(k)
        elif v["status"] == "completed" and v["policy"] is Policy.COMPUTE:
            out.append(k)  # reruns for a new input hash
    return out


def a_step_retry(draw: Draw, m: Model) -> list[Payload]:
    sid = draw(st.sampled_from(retryable(m)))
    v = m.steps[sid]
    if v["status"] == "completed":
        v["ih"] = draw(hexes.filter(lambda h: h != v["ih"]))
    v["attempt"] += draw(st.integers(1, 2))
    v["status"] = "started"
    return [StepStarted(step_id=sid, policy=v["policy"], attempt=v["attempt"], input_hash=v["ih"])]


def whole_retryable(m: Model) -> list[str]:
    """Read/compute steps a whole-step record may take another attempt of (not open)."""
    return [
        k
        for k in retryable(m)
        if m.steps[k]["policy"] in (Policy.READ, Policy.COMPUTE)
        and m.steps[k]["status"] != "started"
    ]


def a_step_whole(draw: Draw, m: Model) -> list[Payload]:
    """A whole read/compute attempt in one step_completed: a new step or another attempt."""
    again = whole_retryable(m)
    if again and draw(st.booleans()):
        sid = draw(st.sampled_from(again))
        v = m.steps[sid]
        if v["status"] == "completed":
            v["ih"] = draw(hexes.filter(lambda h: h != v["ih"]))
        v["attempt"] += draw(st.integers(1, 2))
    else:
        sid = m.fresh("step-")
        policy = draw(st.sampled_from([Policy.READ, Policy.COMPUTE]))
        ih = draw(hexes) if policy is Policy.COMPUTE else None
        v = m.steps[sid] = {"policy": policy, "status": "started", "attempt": 1, "ih": ih}
    v["status"] = "completed"
    return [
        StepCompleted(
            step_id=sid,
            result=draw(json_values),
            policy=v["policy"],
            input_hash=v["ih"],
            attempt=v["attempt"],
            purpose=draw(st.text(max_size=5)),
        )
    ]


def settleable(m: Model) -> list[str]:
    return [k for k in m.open_steps() if not m.in_doubt(k)]


def a_step_complete(draw: Draw, m: Model) -> list[Payload]:
    sid = draw(st.sampled_from(settleable(m)))
    v = m.steps[sid]
    v["status"] = "completed"
    return [
        StepCompleted(step_id=sid, result=draw(json_values), policy=v["policy"], input_hash=v["ih"])
    ]


def a_step_fail(draw: Draw, m: Model) -> list[Payload]:
    sid = draw(st.sampled_from(settleable(m)))
    m.steps[sid]["status"] = "failed"
    return [StepFailed(step_id=sid, error=draw(st.text(max_size=8)))]


def a_effect_intend(draw: Draw, m: Model) -> list[Payload]:
    sid = draw(st.sampled_from(m.open_steps(Policy.EFFECT)))
    again = [
        k for k, e in m.effects.items() if e["step"] == sid and e["status"] in ("absent", "failed")
    ]
    if again and draw(st.booleans()):
        key = draw(st.sampled_from(again))
        attempt = m.effects[key]["attempt"] + 1
    else:
        key, attempt = m.fresh("key-"), 1
    mine = [k for k, a in m.approvals.items() if a["status"] == "consumed" and a["by"] == sid]
    approval = draw(st.sampled_from([None, *mine]))
    m.effects[key] = {"step": sid, "status": "intended", "attempt": attempt}
    return [
        EffectIntended(
            step_id=sid, key=key, operation="send", attempt=attempt, approval_id=approval
        )
    ]


def a_effect_observe(draw: Draw, m: Model) -> list[Payload]:
    key = draw(st.sampled_from([k for k, e in m.effects.items() if e["status"] == "intended"]))
    m.effects[key]["status"] = "observed"
    m.applied += 1
    return [EffectObserved(key=key, result=draw(json_values))]


def a_effect_reconcile(draw: Draw, m: Model) -> list[Payload]:
    key = draw(st.sampled_from(m.in_doubt()))
    e = m.effects[key]
    by = "engine" if e["status"] == "intended" and draw(st.booleans()) else "alice"
    verdict = draw(st.sampled_from(list(Verdict)))
    e["status"] = verdict.value
    if verdict is Verdict.APPLIED:
        m.applied += 1
    return [EffectReconciled(key=key, verdict=verdict, by=by, result=draw(json_values))]


def a_effect_fail(draw: Draw, m: Model) -> list[Payload]:
    keys = [k for k, e in m.effects.items() if e["status"] == "intended"]
    key = draw(st.sampled_from(keys))
    m.effects[key]["status"] = "failed"
    return [EffectFailed(key=key, error="boom")]


def a_artifact(draw: Draw, m: Model) -> list[Payload]:
    name = draw(st.sampled_from(["patch", "report"]))
    m.artifacts[name] = m.artifacts.get(name, 0) + 1
    sha = draw(hexes)
    m.hashes.append(sha)
    return [
        ArtifactCreated(
            name=name, sha256=sha, version=m.artifacts[name], size=draw(st.integers(0, 9))
        )
    ]


def a_approval_request(draw: Draw, m: Model) -> list[Payload]:
    aid = m.fresh("appr-")
    pool = st.sampled_from(m.hashes) | hexes if m.hashes else hexes
    hashes = draw(st.lists(pool, min_size=1, max_size=3, unique=True))
    due = draw(st.lists(st.integers(0, 2**41), max_size=2, unique=True).map(sorted))
    m.approvals[aid] = {
        "hashes": hashes, "status": "requested", "by": None, "decided": False, "due": due,
        "stages": 0,
    }  # fmt: skip
    return [ApprovalRequested(approval_id=aid, name="ship", hashes=hashes, escalate_at_ms=due)]


def escalating(m: Model) -> list[str]:
    return [
        k
        for k, a in m.approvals.items()
        if a["status"] == "requested" and a["stages"] < len(a.get("due", ()))
    ]


def an_escalation(draw: Draw, m: Model) -> list[Payload]:
    """A stage of an approval's escalation chain (issue 39): a notify, or a hand-over (to the
    approver the model decides with)."""
    aid = draw(st.sampled_from(escalating(m)))
    a = m.approvals[aid]
    a["stages"] += 1
    action = draw(st.sampled_from(["notify", "approvers"]))
    people = ["alice"] if action == "approvers" else []
    return [
        WaitEscalated(
            wait_id=f"approval:{aid}", approval_id=aid, stage=a["stages"], action=action,
            approvers=people, required=1 if people else None,
        )
    ]  # fmt: skip


def a_steer(draw: Draw, m: Model) -> list[Payload]:
    mid = m.fresh("steer-")
    interrupt = draw(st.booleans())
    m.steers.append({"id": mid, "interrupt": interrupt, "taken": False})
    return [SteerReceived(message_id=mid, text="use staging", by="alice", interrupt=interrupt)]


def a_steer_take(draw: Draw, m: Model) -> list[Payload]:
    pending = [x for x in m.steers if not x["taken"]]
    k = draw(st.integers(1, len(pending)))
    for x in pending[:k]:
        x["taken"] = True
    return [SteerTaken(step_id=m.fresh("steer@"), message_ids=[x["id"] for x in pending[:k]])]


def a_retract(draw: Draw, m: Model) -> list[Payload]:
    mid = draw(st.sampled_from([x["id"] for x in m.steers if x["interrupt"]]))
    return [ReplyRetracted(step_id=m.fresh("model#"), message_id=mid)]


def in_status(m: Model, status: str) -> list[str]:
    return [k for k, a in m.approvals.items() if a["status"] == status]


def a_approval_decide(draw: Draw, m: Model) -> list[Payload]:
    aid = draw(st.sampled_from(in_status(m, "requested")))
    a = m.approvals[aid]
    decision = draw(st.sampled_from(["approve", "deny"]))
    a["status"] = "approved" if decision == "approve" else "denied"
    a["decided"] = True
    a["arrived"] = draw(st.none() | st.integers(0, 2**41))
    return [
        ApprovalDecided(
            approval_id=aid,
            decision=decision,
            approver="alice",
            hashes=draw(st.permutations(a["hashes"])),
            signature="sig",
            decided_at_ms=draw(st.integers(0, 2**41)),
            arrived_at_ms=a["arrived"],
        )
    ]


def a_approval_refuse(draw: Draw, m: Model) -> list[Payload]:
    """A decision refused where it was delivered (nothing changes), or a recorded one
    withdrawn (it no longer counts: the approval is requested again, unless revoked)."""
    aid = draw(st.sampled_from(sorted(m.approvals)))
    a = m.approvals[aid]
    withdrawn = a["decided"] and draw(st.booleans())
    if withdrawn:
        a["decided"] = False
        if a["status"] != "revoked":
            a["status"], a["by"] = "requested", None
    return [
        ApprovalRefused(
            approval_id=aid, approver="alice", reason="does not verify", withdrawn=withdrawn
        )
    ]


def a_approval_revoke(draw: Draw, m: Model) -> list[Payload]:
    aid = draw(st.sampled_from(in_status(m, "approved")))
    m.approvals[aid]["status"] = "revoked"
    return [ApprovalRevoked(approval_id=aid, by="alice")]


def a_approval_consume(draw: Draw, m: Model) -> list[Payload]:
    aid = draw(st.sampled_from(in_status(m, "approved")))
    sid = draw(st.sampled_from(m.open_steps()))
    a = m.approvals[aid]
    hashes = draw(st.lists(st.sampled_from(a["hashes"]), min_size=1, unique=True))
    a["status"], a["by"] = "consumed", sid
    return [ApprovalConsumed(approval_id=aid, step_id=sid, hashes=hashes)]


def a_wait_start(draw: Draw, m: Model) -> list[Payload]:
    kinds = ["signal", "timer"] + (["approval"] if m.approvals else [])
    kind = draw(st.sampled_from(kinds))
    deadline = draw(st.none() | st.integers(0, 2**41))
    if kind == "timer":
        deadline = draw(st.integers(0, 2**41))
    if kind == "signal":
        name = draw(st.sampled_from(SIGNALS))
    elif kind == "approval":
        name = draw(st.sampled_from(sorted(m.approvals)))
    else:
        name = "sleep"
    m.wait = {"id": m.fresh("wait-"), "kind": kind, "name": name, "deadline": deadline}
    return [WaitStarted(wait_id=m.wait["id"], kind=kind, name=name, deadline_ms=deadline)]


def in_time(arrived: int | None, deadline: int | None) -> bool:
    """A message satisfies a wait only if it arrived before its deadline (unknown: in time)."""
    return deadline is None or arrived is None or arrived < deadline


def answering(m: Model) -> list[str]:
    """Buffered signals the open wait may take: of its name, addressed to it or to none,
    arrived before its deadline."""
    w = m.wait
    if w is None or w["kind"] != "signal":
        return []
    return [
        sig["id"]
        for sig in m.signals.get(w["name"], [])
        if sig["wait"] in (None, w["id"]) and in_time(sig["arrived"], w["deadline"])
    ]


def a_signal(draw: Draw, m: Model) -> list[Payload]:
    name = draw(st.sampled_from(SIGNALS))
    sig = m.fresh("sig-")
    arrived = draw(st.none() | st.integers(0, 2**41))
    w = m.wait
    wait_id = None
    if (
        w is not None
        and w["kind"] == "signal"
        and w["name"] == name
        and in_time(arrived, w["deadline"])
        and draw(st.booleans())
    ):
        wait_id = w["id"]  # an answer addressed to the open wait
    m.signals.setdefault(name, []).append({"id": sig, "arrived": arrived, "wait": wait_id})
    return [
        SignalReceived(
            signal_id=sig,
            name=name,
            payload=draw(json_values),
            arrived_at_ms=arrived,
            wait_id=wait_id,
        )
    ]


def buffered(m: Model) -> list[tuple[str, str]]:
    return [(name, sig["id"]) for name, sigs in m.signals.items() for sig in sigs]


def a_refuse(draw: Draw, m: Model) -> list[Payload]:
    """A message with no effect: a buffered signal no wait will take, or one never received."""
    options = buffered(m)
    if options and draw(st.booleans()):
        name, sig = draw(st.sampled_from(options))
        m.signals[name] = [x for x in m.signals[name] if x["id"] != sig]
        return [MessageRefused(message_id=sig, kind="signal", reason="unused", name=name)]
    kind = draw(st.sampled_from(["signal", "decision", "cancel"]))
    return [MessageRefused(message_id=m.fresh("msg-"), kind=kind, reason="run already finished")]


def wait_endings(m: Model) -> list[str]:
    w = m.wait
    if w is None:
        return []
    out = []
    if answering(m):
        out.append("signal")
    if w["kind"] == "timer":
        out.append("timer")
    decided = False
    if w["kind"] == "approval":
        a = m.approvals[w["name"]]
        decided = a["status"] != "requested" and in_time(a.get("arrived"), w["deadline"])
        if decided:
            out.append("decision")
    # Decided by arrival: a wait whose answer arrived in time cannot time out.
    if w["deadline"] is not None and not answering(m) and not decided:
        out.append("deadline")
    return out


def a_wait_complete(draw: Draw, m: Model) -> list[Payload]:
    assert m.wait is not None
    via = draw(st.sampled_from(wait_endings(m)))
    sig = None
    if via == "signal":
        sig = draw(st.sampled_from(answering(m)))
        name = m.wait["name"]
        m.signals[name] = [x for x in m.signals[name] if x["id"] != sig]
    wid, m.wait = m.wait["id"], None
    return [WaitCompleted(wait_id=wid, via=via, signal_id=sig)]


def a_child_ended(draw: Draw, m: Model) -> list[Payload]:
    """A child run's outcome, told to its parent (issue 37). Only outcomes a parent may
    succeed over: one over an ``unresolved`` or ``blocked`` child is refused (G14), which
    the model's ``finish`` does not know."""
    done = [o for o in Outcome if o not in REOPENABLE]
    return [
        ChildEnded(
            child_run_id=m.fresh("child-"),
            outcome=draw(st.sampled_from(done)),
            seq=draw(st.integers(2, 99)),
            message_id=m.fresh("msg-"),
        )
    ]


def a_forked(draw: Draw, m: Model) -> list[Payload]:
    """The history so far as a fork's copied prefix (issue 45): enabled at rest (no step open,
    no effect in doubt); every approval requested, or approved and not consumed, is raised
    again (its decisions set aside); the code's version may change."""
    renewed = {}
    for aid, a in sorted(m.approvals.items()):
        if a["status"] in ("requested", "approved"):
            a["status"], a["by"], a["decided"] = "requested", None, False
            renewed[aid] = m.fresh("nonce-")
    version = m.fresh("v") if draw(st.booleans()) else ""
    m.version = version or m.version
    return [RunForked(origin="origin", at_seq=m.seq, version=version, renewed=renewed)]


def a_checkpoint(draw: Draw, m: Model) -> list[Payload]:
    counters = draw(st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 9)))
    return [CheckpointSaved(state=draw(json_values), counters=counters)]


def a_verify(draw: Draw, m: Model) -> list[Payload]:
    name = draw(st.sampled_from([*m.criteria, "extra"]))
    passed = draw(st.booleans())
    m.verifications[name] = passed
    return [VerificationRecorded(name=name, passed=passed, detail=draw(json_values))]


def a_warn(draw: Draw, m: Model) -> list[Payload]:
    m.warnings += 1
    return [WarningRecorded(message=draw(st.text(max_size=8)))]


def a_cancel(draw: Draw, m: Model) -> list[Payload]:
    return [CancelRequested(by="bob")]


def legal_outcomes(m: Model) -> list[Outcome]:
    if m.in_doubt():
        return [Outcome.UNRESOLVED]
    out = [Outcome.BLOCKED, Outcome.UNRESOLVED, Outcome.FAILED, Outcome.CANCELLED]
    if all(m.verifications.get(c) for c in m.criteria):
        out.append(Outcome.SUCCEEDED_WITH_WARNINGS)
        if not m.warnings:
            out.append(Outcome.SUCCEEDED)
    if not m.applied:
        out.append(Outcome.STOPPED_SAFE)
    return out


def a_finish(draw: Draw, m: Model) -> list[Payload]:
    m.outcome = draw(st.sampled_from(legal_outcomes(m)))
    m.wait = None
    if m.outcome not in REOPENABLE:  # calls never run end with the run
        for v in m.plan.values():
            if v["status"] == "pending":
                v["status"] = "skipped"
    return [RunFinished(outcome=m.outcome, reason="r", result=draw(json_values))]


def a_reopen(draw: Draw, m: Model) -> list[Payload]:
    m.outcome = None
    retry = draw(st.booleans())
    return [RunReopened(by="alice", reason="settled", retry=retry)]


def a_attention(draw: Draw, m: Model) -> list[Payload]:
    return [AttentionNeeded(detail=draw(st.text(min_size=1, max_size=8).filter(str.strip)))]


TOOLS = ["fetch", "write"]


def a_plan(draw: Draw, m: Model) -> list[Payload]:
    """A plan version: new steps, succeeded ones kept as they are, failed ones planned again;
    each step depends only on earlier steps of the list or on succeeded ones."""
    m.plan_version += 1
    succeeded = [k for k, v in m.plan.items() if v["status"] == "succeeded"]
    again = [k for k, v in m.plan.items() if v["status"] not in ("succeeded", "pending")]
    ids = draw(st.lists(st.sampled_from(succeeded), unique=True)) if succeeded else []
    if again:
        ids += draw(st.lists(st.sampled_from(again), unique=True))
    ids += [m.fresh("call-") for _ in range(draw(st.integers(0, 3)))]
    ids = draw(st.permutations(ids))
    for v in m.plan.values():
        if v["status"] == "pending":
            v["status"] = "superseded"
    steps: list[PlannedStep] = []
    for i, cid in enumerate(ids):
        pool = [*ids[:i], *succeeded]
        deps = draw(st.lists(st.sampled_from(pool), unique=True, max_size=2)) if pool else []
        cur = m.plan.get(cid)
        if cur is not None and cur["status"] == "succeeded":
            tool, h = cur["tool"], cur["hash"]
            deps = cur["deps"] if draw(st.booleans()) else deps
        else:
            tool, h = draw(st.sampled_from(TOOLS)), draw(hexes)
            m.plan[cid] = {"tool": tool, "hash": h, "deps": deps, "status": "pending"}
        steps.append(PlannedStep(call_id=cid, tool=tool, args_hash=h, depends_on=deps))
    return [PlanRecorded(version=m.plan_version, planner="p", steps=steps)]


def settleable_calls(m: Model) -> list[str]:
    return [k for k, v in m.plan.items() if v["status"] == "pending"]


def a_settle(draw: Draw, m: Model) -> list[Payload]:
    cid = draw(st.sampled_from(settleable_calls(m)))
    v = m.plan[cid]
    ok = all(m.plan[d]["status"] == "succeeded" for d in v["deps"])
    outcomes = ["failed", "invalid", "denied", "skipped"] + (["succeeded"] if ok else [])
    v["status"] = draw(st.sampled_from(outcomes))
    ran = v["status"] in ("succeeded", "failed")
    return [
        ToolCallSettled(
            call_id=cid,
            outcome=v["status"],
            observation=draw(json_values),
            executed_by=f"tool:{cid}" if ran or draw(st.booleans()) else None,
        )
    ]


def a_model_called(draw: Draw, m: Model) -> list[Payload]:
    sid = draw(st.sampled_from(m.open_steps(Policy.READ)))
    return [
        ModelCalled(
            step_id=sid,
            model="m",
            prompt_hash=draw(hexes),
            input_tokens=draw(st.integers(0, 10**6)),
            output_tokens=draw(st.integers(0, 10**6)),
            cost_usd=draw(st.none() | st.floats(0, 10)),
        )
    ]


def a_context_compacted(draw: Draw, m: Model) -> list[Payload]:
    sid = draw(st.sampled_from(m.open_steps(Policy.READ)))
    m.compactions += 1
    before = draw(st.integers(0, 10**5))
    return [
        ContextCompacted(
            step_id=sid,
            number=m.compactions,
            turns=[1, 2],
            call_ids=["c1"],
            refs=["model#1"],
            summary_hash=draw(hexes),
            summary_tokens=draw(st.integers(0, 10**4)),
            buffer_tokens_before=before,
            buffer_tokens_after=draw(st.integers(0, before)),
        )
    ]


def a_context_built(draw: Draw, m: Model) -> list[Payload]:
    sid = draw(st.sampled_from(m.open_steps(Policy.READ)))
    return [
        ContextBuilt(
            step_id=sid,
            context_hash=draw(hexes),
            sections={"goal": draw(st.integers(0, 100)), "buffer": draw(st.integers(0, 100))},
            total_tokens=draw(st.integers(0, 10**4)),
            budget_tokens=10**4,
        )
    ]


def a_budget(draw: Draw, m: Model) -> list[Payload]:
    limits = {
        "tokens": draw(st.none() | st.integers(1, 10**7)),
        "cost_usd": draw(st.none() | st.floats(0.01, 100)),
        "steps": draw(st.none() | st.integers(1, 1000)),
        "wall_clock_s": draw(st.none() | st.floats(0.5, 10**5)),
    }
    if all(v is None for v in limits.values()):
        limits["steps"] = 10
    return [BudgetSet(**limits, by=draw(st.sampled_from(["agent", "alice"])))]


def enabled(m: Model) -> dict[str, Action]:
    if m.outcome is not None:
        after: dict[str, Action] = {"refuse": a_refuse}  # a message that came too late
        if m.outcome in REOPENABLE:
            after["reopen"] = a_reopen
        return after
    acts: dict[str, Action] = {
        "refuse": a_refuse,
        "lease": a_lease,
        "version": a_version,
        "artifact": a_artifact,
        "approval_request": a_approval_request,
        "signal": a_signal,
        "child_ended": a_child_ended,
        "checkpoint": a_checkpoint,
        "verify": a_verify,
        "warn": a_warn,
        "cancel": a_cancel,
        "attention": a_attention,
        "finish": a_finish,
        "plan": a_plan,
        "budget": a_budget,
    }
    if settleable_calls(m):
        acts["settle"] = a_settle
    acts["steer"] = a_steer
    if any(not x["taken"] for x in m.steers):
        acts["steer_take"] = a_steer_take
    if any(x["interrupt"] for x in m.steers):
        acts["retract"] = a_retract
    if escalating(m):
        acts["escalate"] = an_escalation
    if not m.open_steps() and not m.in_doubt():
        acts["forked"] = a_forked
    if m.open_steps(Policy.READ):
        acts["model_called"] = a_model_called
        acts["context_compacted"] = a_context_compacted
        acts["context_built"] = a_context_built
    if m.wait is None:
        acts["step_new"] = a_step_new
        acts["step_whole"] = a_step_whole
        acts["wait_start"] = a_wait_start
        if retryable(m):
            acts["step_retry"] = a_step_retry
    elif wait_endings(m):
        acts["wait_complete"] = a_wait_complete
    if settleable(m):
        acts["step_complete"] = a_step_complete
        acts["step_fail"] = a_step_fail
    if m.open_steps(Policy.EFFECT):
        acts["effect_intend"] = a_effect_intend
    if any(e["status"] == "intended" for e in m.effects.values()):
        acts["effect_observe"] = a_effect_observe
    if m.in_doubt():
        acts["effect_reconcile"] = a_effect_reconcile
    if any(e["status"] == "intended" for e in m.effects.values()):
        acts["effect_fail"] = a_effect_fail
    if in_status(m, "requested"):
        acts["approval_decide"] = a_approval_decide
    if m.approvals:
        acts["approval_refuse"] = a_approval_refuse
    if in_status(m, "approved"):
        acts["approval_revoke"] = a_approval_revoke
        if m.open_steps():
            acts["approval_consume"] = a_approval_consume
    return acts


#: How often each enabled action is drawn (default 2): effects and steps are the heart of a
#: run and need several actions in a row, an outcome ends the history.
WEIGHTS = {
    "finish": 1,
    "refuse": 1,
    "cancel": 1,
    "version": 1,
    "step_new": 5,
    "step_complete": 3,
    "effect_intend": 8,
    "effect_observe": 6,
    "effect_reconcile": 6,
    "approval_consume": 4,
    "wait_complete": 4,
}


def to_events(payloads: list[Payload], run_id: str = RUN) -> list[Event]:
    return [
        Event(run_id=run_id, seq=i, type=type_of(p), payload=p, at_ms=1000 + i, epoch=0)
        for i, p in enumerate(payloads, start=1)
    ]


@st.composite
def histories(draw: Draw, max_len: int = 45) -> list[Event]:
    """A valid history: run_started, then actions the model allows."""
    m = Model(criteria=draw(st.lists(st.sampled_from(CRITERIA), unique=True, max_size=2)))
    payloads: list[Payload] = [
        RunStarted(
            workflow="wf", version="1", input=draw(json_values), criteria=m.criteria, goal="g"
        )
    ]
    for _ in range(draw(st.integers(0, max_len))):
        acts = enabled(m)
        if not acts:
            break
        weighted = [a for a in sorted(acts) for _ in range(WEIGHTS.get(a, 2))]
        name = draw(st.sampled_from(weighted))
        m.seq = len(payloads)
        payloads.extend(acts[name](draw, m))
    return to_events(payloads)


# --------------------------------------------------------------------------- impossible events


def impossible(s: RunState) -> list[tuple[str, Event]]:
    """Events that cannot come next after state ``s``, each with a label for the report."""
    nxt = s.seq + 1
    out: list[tuple[str, Event]] = []

    def add(
        label: str, p: Payload, *, seq: int = nxt, run_id: str = s.run_id, etype: str = ""
    ) -> None:
        out.append(
            (
                label,
                Event(
                    run_id=run_id, seq=seq, type=etype or type_of(p), payload=p, at_ms=0, epoch=0
                ),
            )
        )

    warn = WarningRecorded(message="w")
    started = RunStarted(workflow="wf", version="1")
    if s.seq == 0:
        add("first event is not run_started", warn)
        add("first event is not run_started", StepStarted(step_id="x", policy=Policy.READ))
        add("seq does not start at 1", started, seq=2)
        return out
    add("seq gap", warn, seq=nxt + 1)
    add("seq repeated", warn, seq=s.seq)
    add("event of another run", warn, run_id="other-run")
    add("payload of another type", CancelRequested(), etype="warning_recorded")
    add("second run_started", started)
    add("steering message taken that never arrived", SteerTaken(step_id="b", message_ids=["no"]))
    taken = [x.message_id for x in s.steering if x.status != "pending"]
    if taken:
        add("steering message taken twice", SteerTaken(step_id="b", message_ids=taken[:1]))
    if s.status is RunStatus.FINISHED:
        add("event after run_finished", warn)
        add("step after run_finished", StepStarted(step_id="late", policy=Policy.READ))
        add("signal after run_finished", SignalReceived(signal_id="late", name="go"))
        add("lease after run_finished", LeaseAcquired(owner="w", epoch=s.epoch + 1))
        add("second run_finished", RunFinished(outcome=Outcome.FAILED))
        add("refusal without a reason", MessageRefused(message_id="m", kind="signal", reason=""))
        if s.outcome not in REOPENABLE:
            add("reopen a run that is not unresolved/blocked", RunReopened(by="alice"))
        return out
    add("reopen a run that is not finished", RunReopened(by="alice"))
    add("run_forked after fewer events than it copied", RunForked(origin="o", at_seq=s.seq + 1))
    add("lease epoch not above the current one", LeaseAcquired(owner="w", epoch=s.epoch))
    add(
        "version_accepted from a version the run is not at",
        VersionAccepted(from_version=s.version + "x", to_version="9"),
    )
    add("step completed that never started", StepCompleted(step_id="never"))
    add(
        "whole-step record of an effect step",
        StepCompleted(step_id="never", policy=Policy.EFFECT, attempt=1),
    )
    add("whole-step record without a policy", StepCompleted(step_id="never", attempt=1))
    add(
        "whole-step record with a negative attempt",
        StepCompleted(step_id="never", policy=Policy.READ, attempt=-1),
    )
    add("step failed that never started", StepFailed(step_id="never", error="e"))
    add("effect observed that was never intended", EffectObserved(key="never"))
    add(
        "effect reconciled that was never intended",
        EffectReconciled(key="never", verdict=Verdict.ABSENT),
    )
    add("effect failed that was never intended", EffectFailed(key="never", error="e"))
    add(
        "effect intended on a step never started",
        EffectIntended(step_id="never", key="k-new", operation="op"),
    )
    add(
        "approval decided that was never requested",
        ApprovalDecided(
            approval_id="never", decision="approve", approver="a", hashes=["h"], signature="s"
        ),
    )
    add("approval revoked that was never requested", ApprovalRevoked(approval_id="never", by="a"))
    add(
        "decision refused on an approval never requested",
        ApprovalRefused(approval_id="never", approver="a", reason="r"),
    )
    add(
        "approval consumed that was never requested",
        ApprovalConsumed(approval_id="never", step_id="x", hashes=["h"]),
    )
    add(
        "approval bound to no content",
        ApprovalRequested(approval_id="fresh-appr", name="n", hashes=[]),
    )
    add(
        "artifact with a bad sha256",
        ArtifactCreated(name="fresh-art", sha256="abc", version=1, size=0),
    )
    add(
        "artifact with an uppercase sha256",
        ArtifactCreated(name="fresh-art", sha256="A" * 64, version=1, size=0),
    )
    add(
        "first artifact version is not 1",
        ArtifactCreated(name="fresh-art", sha256="a" * 64, version=2, size=0),
    )
    add("timer wait without a deadline", WaitStarted(wait_id="w-new", kind="timer", name="sleep"))
    for name, ref in s.artifacts.items():
        add(
            "artifact version repeated",
            ArtifactCreated(name=name, sha256="b" * 64, version=ref.version, size=0),
        )
        add(
            "artifact version skipped",
            ArtifactCreated(name=name, sha256="b" * 64, version=ref.version + 2, size=0),
        )

    in_doubt = s.effects_in_doubt()
    criteria_ok = all(c in s.verifications and s.verifications[c].passed for c in s.criteria)
    if not criteria_ok:
        add("succeeded with a failing or missing criterion", RunFinished(outcome=Outcome.SUCCEEDED))
        add(
            "succeeded_with_warnings with a failing or missing criterion",
            RunFinished(outcome=Outcome.SUCCEEDED_WITH_WARNINGS),
        )
    if s.warnings:
        add("succeeded although warnings were recorded", RunFinished(outcome=Outcome.SUCCEEDED))
    if s.effects_applied:
        add("stopped_safe after an applied effect", RunFinished(outcome=Outcome.STOPPED_SAFE))
    if in_doubt:
        for o in Outcome:
            if o is not Outcome.UNRESOLVED:
                add(f"{o.value} with an effect in doubt", RunFinished(outcome=o))

    # --- agents: plans, tool-call outcomes, model calls, budgets
    add("plan version skipped", PlanRecorded(version=s.plan_version + 2, planner="p"))
    add("plan version repeated", PlanRecorded(version=s.plan_version, planner="p"))
    nv = s.plan_version + 1
    add(
        "plan lists a step twice",
        PlanRecorded(
            version=nv,
            planner="p",
            steps=[PlannedStep(call_id="dup", tool="t"), PlannedStep(call_id="dup", tool="t")],
        ),
    )
    add(
        "plan step depends on an unknown step",
        PlanRecorded(
            version=nv,
            planner="p",
            steps=[PlannedStep(call_id="fresh-call", tool="t", depends_on=["nowhere"])],
        ),
    )
    add(
        "plan step depends on a later step",
        PlanRecorded(
            version=nv,
            planner="p",
            steps=[
                PlannedStep(call_id="fresh-a", tool="t", depends_on=["fresh-b"]),
                PlannedStep(call_id="fresh-b", tool="t"),
            ],
        ),
    )
    add(
        "tool call settled that was never planned",
        ToolCallSettled(call_id="never", outcome="failed", executed_by="x"),
    )
    add(
        "model call in a step never started",
        ModelCalled(
            step_id="never", model="m", prompt_hash="a" * 64, input_tokens=1, output_tokens=1
        ),
    )
    add("budget that names no limit", BudgetSet(by="alice"))
    for cid, info in s.plan.items():
        if info.status == "succeeded":
            add(
                "succeeded step changed by a new plan",
                PlanRecorded(
                    version=nv,
                    planner="p",
                    steps=[
                        PlannedStep(call_id=cid, tool=info.tool, args_hash=info.args_hash + "x")
                    ],
                ),
            )
        else:
            add(
                "plan step depends on a step that has not succeeded",
                PlanRecorded(
                    version=nv,
                    planner="p",
                    steps=[PlannedStep(call_id="fresh-call", tool="t", depends_on=[cid])],
                ),
            )
        if info.status != "pending":
            add(
                f"tool call settled while {info.status}",
                ToolCallSettled(call_id=cid, outcome="skipped"),
            )
        else:
            add(
                "tool call ran without naming its step",
                ToolCallSettled(call_id=cid, outcome="failed"),
            )
            if any(s.plan[d].status != "succeeded" for d in info.depends_on):
                add(
                    "tool call succeeded before its dependencies",
                    ToolCallSettled(call_id=cid, outcome="succeeded", executed_by="x"),
                )
    for sid, info in s.steps.items():
        if info.status != "started" or info.policy is not Policy.READ:
            add(
                "model call outside an open read step",
                ModelCalled(
                    step_id=sid, model="m", prompt_hash="a" * 64, input_tokens=0, output_tokens=0
                ),
            )
        else:
            add(
                "model call with a bad prompt hash",
                ModelCalled(
                    step_id=sid, model="m", prompt_hash="xyz", input_tokens=0, output_tokens=0
                ),
            )

    for sid, info in s.steps.items():
        other = next(p for p in Policy if p is not info.policy)
        add(
            "step restarted under another policy",
            StepStarted(step_id=sid, policy=other, attempt=info.attempt + 1),
        )
        if info.status == "started":
            add(
                "whole-step record for an open step",
                StepCompleted(step_id=sid, policy=info.policy, attempt=info.attempt + 1),
            )
        elif info.policy in (Policy.READ, Policy.COMPUTE):
            add(
                "whole-step record not above the last attempt",
                StepCompleted(step_id=sid, policy=info.policy, attempt=info.attempt),
            )
        if info.policy in (Policy.READ, Policy.COMPUTE):
            add(
                "whole-step record under another policy",
                StepCompleted(step_id=sid, policy=other, attempt=info.attempt + 1),
            )
        if info.status != "started":
            add("step completed that is not open", StepCompleted(step_id=sid))
            add("step failed that is not open", StepFailed(step_id=sid, error="e"))
            if info.policy is Policy.EFFECT:
                add(
                    "effect intended on a closed step",
                    EffectIntended(step_id=sid, key="k-new", operation="op"),
                )
        # A completed step is no longer in the compact state; restarting it is refused by the
        # store against the indexed history (tests/test_store_sqlite.py, conformance suite).
        if info.status != "completed":
            add(
                "step attempt not above the last",
                StepStarted(
                    step_id=sid,
                    policy=info.policy,
                    attempt=info.attempt,
                    input_hash=info.input_hash,
                ),
            )
        if info.status == "started" and info.policy is Policy.EFFECT:
            add(
                "open effect step restarted",
                StepStarted(step_id=sid, policy=info.policy, attempt=info.attempt + 1),
            )
            for aid, a in s.approvals.items():
                if a.consumed_by != sid:
                    add(
                        "effect cites an approval its step did not consume",
                        EffectIntended(step_id=sid, key="k-new", operation="op", approval_id=aid),
                    )
            add(
                "effect cites an unknown approval",
                EffectIntended(step_id=sid, key="k-new", operation="op", approval_id="never"),
            )
        if info.status == "started" and info.policy is not Policy.EFFECT:
            add(
                "effect intended on a non-effect step",
                EffectIntended(step_id=sid, key="k-new", operation="op"),
            )
        if info.status == "started" and any(
            e.step_id == sid and e.status in DOUBT for e in s.effects.values()
        ):
            add("step completed with its effect in doubt", StepCompleted(step_id=sid))
            add("step failed with its effect in doubt", StepFailed(step_id=sid, error="e"))

    for key, e in s.effects.items():
        if e.status != "intended":
            add("effect observed that is not intended", EffectObserved(key=key))
        if e.status not in DOUBT:
            add(
                "effect reconciled that is not in doubt",
                EffectReconciled(key=key, verdict=Verdict.APPLIED, by="alice"),
            )
        if e.status == "unknown":
            add(
                "engine settles an effect a person must settle",
                EffectReconciled(key=key, verdict=Verdict.ABSENT),
            )
        if e.status != "intended":
            add("effect failed that is not intended", EffectFailed(key=key, error="e"))
        step = s.steps.get(e.step_id)
        if step is not None and step.status == "started":
            if e.status not in ("absent", "failed"):
                add(
                    "effect key performed again",
                    EffectIntended(
                        step_id=e.step_id, key=key, operation="op", attempt=e.attempt + 1
                    ),
                )
            else:
                add(
                    "effect attempt not above the last",
                    EffectIntended(step_id=e.step_id, key=key, operation="op", attempt=e.attempt),
                )

    open_step = next((k for k, v in s.steps.items() if v.status == "started"), None)
    for aid, a in s.approvals.items():
        add(
            "approval requested twice",
            ApprovalRequested(approval_id=aid, name="n", hashes=["c" * 64]),
        )
        if a.status != "requested":
            add(
                "approval decided twice",
                ApprovalDecided(
                    approval_id=aid,
                    decision="approve",
                    approver="a",
                    hashes=a.hashes,
                    signature="s",
                ),
            )
        else:
            add(
                "decision names other content",
                ApprovalDecided(
                    approval_id=aid,
                    decision="approve",
                    approver="a",
                    hashes=[*a.hashes, "d" * 64],
                    signature="s",
                ),
            )
        if not a.counted():
            add(
                "withdrawal of a decision never counted",
                ApprovalRefused(approval_id=aid, approver="a", reason="r", withdrawn=True),
            )
        if a.status != "approved":
            add(f"approval revoked while {a.status}", ApprovalRevoked(approval_id=aid, by="a"))
            add(
                f"approval consumed while {a.status}",
                ApprovalConsumed(approval_id=aid, step_id=open_step or "x", hashes=a.hashes[:1]),
            )
        else:
            add(
                "approval consumed with hashes not approved",
                ApprovalConsumed(approval_id=aid, step_id=open_step or "x", hashes=["e" * 64]),
            )
            add(
                "approval consumed for no content",
                ApprovalConsumed(approval_id=aid, step_id=open_step or "x", hashes=[]),
            )
            add(
                "approval consumed by a step that is not running",
                ApprovalConsumed(approval_id=aid, step_id="never", hashes=a.hashes[:1]),
            )

    for name, pending in s.signals.items():
        for sig in pending:
            add("signal received twice", SignalReceived(signal_id=sig.signal_id, name=name))

    w = s.wait
    if w is None:
        add("wait completed while not waiting", WaitCompleted(wait_id="w", via="timer"))
        add(
            "answer addressed to a wait while none is open",
            SignalReceived(signal_id="fresh-sig", name="go", wait_id="w"),
        )
    else:
        add("step started while waiting", StepStarted(step_id="fresh-step", policy=Policy.READ))
        add(
            "whole step recorded while waiting",
            StepCompleted(step_id="fresh-step", policy=Policy.READ, attempt=1),
        )
        add("second wait while waiting", WaitStarted(wait_id="w2", kind="signal", name="go"))
        add("wrong wait completed", WaitCompleted(wait_id=w.wait_id + "x", via="timer"))
        if w.kind != "timer":
            add("timer completes a non-timer wait", WaitCompleted(wait_id=w.wait_id, via="timer"))
        if w.deadline_ms is None:
            add(
                "deadline completes a wait without one",
                WaitCompleted(wait_id=w.wait_id, via="deadline"),
            )
        if w.kind != "signal":
            add(
                "signal completes a non-signal wait",
                WaitCompleted(wait_id=w.wait_id, via="signal", signal_id="x"),
            )
        else:
            add(
                "wait completed by a signal never received",
                WaitCompleted(wait_id=w.wait_id, via="signal", signal_id="never"),
            )
            answer = s.answer()
            if answer is not None and w.deadline_ms is not None:
                add(
                    "wait timed out though an answer arrived before its deadline",
                    WaitCompleted(wait_id=w.wait_id, via="deadline"),
                )
            for sig in s.signals.get(w.name, []):
                if not sig.answers(w):
                    add(
                        "wait completed by a signal that does not answer it (late, or "
                        "addressed to another wait)",
                        WaitCompleted(wait_id=w.wait_id, via="signal", signal_id=sig.signal_id),
                    )
            if w.deadline_ms is not None:
                add(
                    "answer addressed to the open wait arriving after its deadline",
                    SignalReceived(
                        signal_id="fresh-sig",
                        name=w.name,
                        arrived_at_ms=w.deadline_ms,
                        wait_id=w.wait_id,
                    ),
                )
            add(
                "answer addressed to a wait that is not open",
                SignalReceived(signal_id="fresh-sig", name=w.name, wait_id=w.wait_id + "x"),
            )
        if w.kind != "approval":
            add(
                "decision completes a non-approval wait",
                WaitCompleted(wait_id=w.wait_id, via="decision"),
            )
        elif s.approvals[w.name].status == "requested":
            add(
                "decision wait completed before a decision",
                WaitCompleted(wait_id=w.wait_id, via="decision"),
            )
        else:
            a = s.approvals[w.name]
            late = (
                w.deadline_ms is not None
                and a.arrived_at_ms is not None
                and a.arrived_at_ms >= w.deadline_ms
            )
            if late:
                add(
                    "decision that arrived after the deadline completes the wait",
                    WaitCompleted(wait_id=w.wait_id, via="decision"),
                )
            elif w.deadline_ms is not None:
                add(
                    "approval wait timed out though its decision arrived in time",
                    WaitCompleted(wait_id=w.wait_id, via="deadline"),
                )
    return out


# --------------------------------------------------------------------------- properties


def dump(s: RunState) -> dict[str, Any]:
    return s.model_dump(mode="json")


@FAST
@given(histories())
def test_every_valid_history_folds(events: list[Event]) -> None:
    state = RunState(run_id=RUN)
    for e in events:
        apply(state, e)  # raises on a wrongly refused event
    assert state.seq == len(events)
    assert dump(fold(events)) == dump(state)


@FAST
@given(histories(), st.data())
def test_prefix_then_rest_equals_whole(events: list[Event], data: st.DataObject) -> None:
    k = data.draw(st.integers(1, len(events)), label="cut")
    whole = fold(events)
    prefix = fold(events[:k])
    before = dump(prefix)
    assert dump(fold(events[k:], prefix)) == dump(whole)
    assert dump(prefix) == before  # fold(…, state) works on a copy


@FAST
@given(histories(), st.data())
def test_state_survives_json_round_trip(events: list[Event], data: st.DataObject) -> None:
    k = data.draw(st.integers(1, len(events)), label="cut")
    prefix = fold(events[:k])
    text = prefix.model_dump_json()
    back = RunState.model_validate_json(text)
    assert dump(back) == dump(prefix)
    assert back.model_dump_json() == text
    # Loading = checkpoint + tail: folding the rest onto the decoded checkpoint is the same.
    assert dump(fold(events[k:], back)) == dump(fold(events))


@FAST
@given(histories(), st.data())
def test_every_impossible_event_is_refused(events: list[Event], data: st.DataObject) -> None:
    k = data.draw(st.integers(0, len(events)), label="cut")
    state = fold(events[:k]) if k else RunState(run_id=RUN)
    candidates = impossible(state)
    label, bad = data.draw(st.sampled_from(candidates), label="mutation")
    before = dump(state)
    with pytest.raises(TransitionError) as info:
        apply(state, bad)
    err = info.value
    assert err.run_id == RUN, label
    assert err.seq == bad.seq, label
    assert err.event_type == bad.type, label
    assert err.rule, label
    assert f"run {RUN!r} seq {bad.seq}" in str(err)
    assert dump(state) == before, f"refused {label!r} changed the state"


@FAST
@given(histories(), st.data())
def test_a_user_checkpoint_never_makes_a_valid_history_impossible(
    events: list[Event], data: st.DataObject
) -> None:
    """Pruning at a user checkpoint only forgets what no later event may need: a checkpoint
    inserted anywhere a run is not finished leaves the rest of the history valid."""
    k = data.draw(st.integers(1, len(events)), label="cut")
    state = fold(events[:k])
    if state.status is RunStatus.FINISHED:
        return
    ckpt = Event(
        run_id=RUN, seq=k + 1, type="checkpoint_saved", payload=CheckpointSaved(), at_ms=0, epoch=0
    )
    rest = [e.model_copy(update={"seq": e.seq + 1}) for e in events[k:]]
    fold([*events[:k], ckpt, *rest])


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_all_impossible_events_at_every_prefix(events: list[Event]) -> None:
    """Exhaustively: at every prefix of a valid history, every impossible event is refused and
    the state is left exactly as it was (the valid next event is then still accepted)."""
    state = RunState(run_id=RUN)
    for e in [*events, None]:
        before = dump(state)
        for label, bad in impossible(state):
            with pytest.raises(TransitionError) as info:
                apply(state, bad)
            assert (info.value.run_id, info.value.seq) == (RUN, bad.seq), label
            assert dump(state) == before, f"refused {label!r} changed the state"
        if e is not None:
            apply(state, e)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.data())
def test_spliced_impossible_event_refuses_the_whole_history(
    events: list[Event], data: st.DataObject
) -> None:
    """An impossible event in the middle of a history: fold() of the whole sequence raises at
    exactly that seq (nothing after it is ever considered)."""
    k = data.draw(st.integers(1, len(events)), label="cut")
    state = fold(events[:k])
    cands = [(lbl, e) for lbl, e in impossible(state) if e.seq == k + 1 and e.run_id == RUN]
    label, bad = data.draw(st.sampled_from(cands), label="mutation")
    rest = [e.model_copy(update={"seq": e.seq + 1}) for e in events[k:]]
    with pytest.raises(TransitionError) as info:
        fold([*events[:k], bad, *rest])
    assert info.value.seq == k + 1, label


@pytest.mark.slow
def test_the_generator_reaches_every_event_type() -> None:
    """Sanity of the generator itself: every event type shows up in valid histories."""
    seen: set[str] = set()

    @settings(max_examples=400, deadline=None, database=None, derandomize=True)
    @given(histories())
    def collect(events: list[Event]) -> None:
        seen.update(e.type for e in events)

    collect()
    assert seen == set(EVENT_TYPES)


# --------------------------------------------------------------------------- unit tests


def ev(s: RunState, p: Payload) -> RunState:
    return apply(
        s, Event(run_id=s.run_id, seq=s.seq + 1, type=type_of(p), payload=p, at_ms=0, epoch=0)
    )


def started(criteria: list[str] | None = None) -> RunState:
    s = RunState(run_id="r")
    return ev(s, RunStarted(workflow="wf", version="1", criteria=criteria or [], goal="ship it"))


def test_fold_of_nothing_needs_a_state() -> None:
    with pytest.raises(ValueError):
        fold([])


def test_transition_error_names_run_seq_and_rule() -> None:
    s = started()
    with pytest.raises(TransitionError) as info:
        ev(s, StepCompleted(step_id="ghost"))
    err = info.value
    assert (err.run_id, err.seq, err.event_type) == ("r", 2, "step_completed")
    assert "ghost" in err.rule and "never started" in err.rule
    assert str(err) == f"run 'r' seq 2: step_completed refused: {err.rule}"


def test_approval_consumed_after_revoke_is_refused() -> None:
    s = started()
    h = "a" * 64
    ev(s, ApprovalRequested(approval_id="ap", name="ship", hashes=[h]))
    ev(
        s,
        ApprovalDecided(
            approval_id="ap", decision="approve", approver="al", hashes=[h], signature="s"
        ),
    )
    ev(s, ApprovalRevoked(approval_id="ap", by="al"))
    ev(s, StepStarted(step_id="push", policy=Policy.EFFECT))
    with pytest.raises(TransitionError, match="revoked"):
        ev(s, ApprovalConsumed(approval_id="ap", step_id="push", hashes=[h]))


def test_consumed_approval_authorizes_only_its_step() -> None:
    s = started()
    h = "a" * 64
    ev(s, ApprovalRequested(approval_id="ap", name="ship", hashes=[h]))
    ev(
        s,
        ApprovalDecided(
            approval_id="ap", decision="approve", approver="al", hashes=[h], signature="s"
        ),
    )
    ev(s, StepStarted(step_id="push", policy=Policy.EFFECT))
    ev(s, StepStarted(step_id="mail", policy=Policy.EFFECT))
    ev(s, ApprovalConsumed(approval_id="ap", step_id="push", hashes=[h]))
    with pytest.raises(TransitionError, match="has not consumed"):
        ev(s, EffectIntended(step_id="mail", key="k2", operation="mail", approval_id="ap"))
    ev(s, EffectIntended(step_id="push", key="k1", operation="push", approval_id="ap"))
    # After a verdict of absent, the same step may try again under the same approval.
    ev(s, EffectReconciled(key="k1", verdict=Verdict.ABSENT))
    ev(s, EffectIntended(step_id="push", key="k1", operation="push", attempt=2, approval_id="ap"))


def test_a_performed_effect_leaves_the_state_and_is_counted() -> None:
    """An effect that happened leaves the state like a completed step (the state stays the size
    of what is in doubt) and is counted; the checkpoint answers it as performed. That its key is
    never performed again is the store's rule, checked against its effect index
    (test_store_conformance: test_a_performed_key_is_never_intended_again)."""
    s = started()
    ev(s, StepStarted(step_id="push", policy=Policy.EFFECT))
    ev(s, EffectIntended(step_id="push", key="k", operation="push"))
    ev(s, EffectObserved(key="k", result="sha"))
    ev(s, StepCompleted(step_id="push", policy=Policy.EFFECT))
    ev(s, StepStarted(step_id="mail", policy=Policy.EFFECT))
    ev(s, EffectIntended(step_id="mail", key="m", operation="mail"))
    ev(s, EffectFailed(key="m", error="refused"))
    ev(s, StepFailed(step_id="mail", error="refused"))
    assert set(s.effects) == {"m"} and s.effects_applied == 1
    ev(s, CheckpointSaved(state={"i": 1}))
    # The failed step stays (replay raises its failure again instead of running it).
    assert {k: v.status for k, v in s.steps.items()} == {"mail": "failed"}
    assert s.effects == {}  # the failed one certainly did not happen: pruned
    assert checkpoint_answers(s)["effects"] == {}
    assert checkpoint_answers(s)["effects_performed"] == 1


def test_cancel_with_an_effect_in_doubt_must_be_unresolved() -> None:
    s = started()
    ev(s, StepStarted(step_id="push", policy=Policy.EFFECT))
    ev(s, EffectIntended(step_id="push", key="k", operation="push"))
    for o in (Outcome.CANCELLED, Outcome.BLOCKED, Outcome.STOPPED_SAFE, Outcome.FAILED):
        with pytest.raises(TransitionError, match="in doubt"):
            ev(s, RunFinished(outcome=o))
    ev(s, RunFinished(outcome=Outcome.UNRESOLVED, reason="push may have happened"))
    # A person settles it: the run is reopened and may finish honestly.
    ev(s, RunReopened(by="al"))
    ev(s, EffectReconciled(key="k", verdict=Verdict.APPLIED, by="al"))
    ev(s, StepCompleted(step_id="push", policy=Policy.EFFECT))
    with pytest.raises(TransitionError, match="stopped_safe"):
        ev(s, RunFinished(outcome=Outcome.STOPPED_SAFE))
    ev(s, RunFinished(outcome=Outcome.SUCCEEDED))


def test_lone_state_is_json_with_awkward_values() -> None:
    s = started()
    ev(s, CheckpointSaved(state={"big": 10**30, "neg0": -0.0, "tiny": 5e-324, "s": "é\u2028\x00"}))
    back = RunState.model_validate_json(s.model_dump_json())
    assert json.dumps(back.user_state, sort_keys=True) == json.dumps(s.user_state, sort_keys=True)


# ------------------------------------------------------------------ checkpoint_answers


def test_answers_of_a_fresh_run() -> None:
    a = checkpoint_answers(started())
    assert a == {
        "establishing": "ship it",
        "evidence": {"verifications": {}, "artifacts": {}},
        "effects": {},
        "effects_performed": 0,
        "next": "runnable: the next step may start",
    }


def test_answers_name_the_step_its_purpose_and_the_evidence() -> None:
    s = started(["tests"])
    h = "f" * 64
    ev(
        s,
        StepStarted(
            step_id="fix:a.py", policy=Policy.COMPUTE, purpose="modernize a.py", input_hash="1"
        ),
    )
    ev(s, ArtifactCreated(name="patch", sha256=h, version=1, size=3))
    ev(s, VerificationRecorded(name="tests", passed=False))
    a = checkpoint_answers(s)
    assert a["establishing"] == "fix:a.py: modernize a.py"
    assert a["evidence"] == {
        "verifications": {"tests": {"passed": False}},
        "artifacts": {"patch": f"sha256:{h} v1"},
    }
    ev(s, StepCompleted(step_id="fix:a.py", policy=Policy.COMPUTE, input_hash="1"))
    ev(s, StepStarted(step_id="plain", policy=Policy.READ))
    assert checkpoint_answers(s)["establishing"] == "plain"


def test_answers_of_effects_in_doubt_and_settled() -> None:
    s = started()
    ev(s, StepStarted(step_id="push", policy=Policy.EFFECT))
    ev(s, EffectIntended(step_id="push", key="k1", operation="push"))
    a = checkpoint_answers(s)
    assert a["effects"] == {"k1": "intended"}
    assert a["next"] == "reconcile effects in doubt: k1"
    ev(s, EffectReconciled(key="k1", verdict=Verdict.ABSENT))
    assert checkpoint_answers(s)["effects"] == {}  # absent: certainly did not happen
    ev(s, EffectIntended(step_id="push", key="k1", operation="push", attempt=2))
    ev(s, EffectObserved(key="k1"))
    a = checkpoint_answers(s)
    assert a["effects"] == {} and a["effects_performed"] == 1
    assert a["next"] == "runnable: the next step may start"


def test_answers_of_a_wait_with_deadline() -> None:
    s = started()
    ev(s, WaitStarted(wait_id="w", kind="signal", name="go", deadline_ms=1234))
    assert (
        checkpoint_answers(s)["next"]
        == "waiting for signal 'go' (deadline 1970-01-01T00:00:01.234Z)"
    )
    s2 = started()
    ev(s2, WaitStarted(wait_id="w", kind="approval", name="ap"))
    assert checkpoint_answers(s2)["next"] == "waiting for approval 'ap'"


def test_answers_of_a_finished_run() -> None:
    s = started()
    ev(s, RunFinished(outcome=Outcome.BLOCKED, reason="budget exhausted"))
    assert checkpoint_answers(s)["next"] == "finished: blocked (budget exhausted)"
    s2 = started()
    ev(s2, RunFinished(outcome=Outcome.SUCCEEDED))
    assert checkpoint_answers(s2)["next"] == "finished: succeeded"


def test_answers_are_json() -> None:
    s = started(["tests"])
    ev(s, VerificationRecorded(name="tests", passed=True, detail={"n": 3}))
    json.dumps(checkpoint_answers(s))


def test_a_new_plan_supersedes_pending_steps_and_keeps_finished_ones() -> None:
    s = started()
    ev(
        s,
        PlanRecorded(
            version=1,
            planner="code",
            steps=[
                PlannedStep(call_id="a", tool="fetch", args_hash="h1"),
                PlannedStep(call_id="b", tool="write", args_hash="h2", depends_on=["a"]),
                PlannedStep(call_id="c", tool="write", args_hash="h3", depends_on=["b"]),
            ],
        ),
    )
    ev(s, ToolCallSettled(call_id="a", outcome="succeeded", executed_by="tool:a@v1"))
    ev(s, ToolCallSettled(call_id="b", outcome="failed", executed_by="tool:b@v1"))
    ev(
        s,
        PlanRecorded(
            version=2,
            planner="code",
            steps=[
                PlannedStep(call_id="b2", tool="write", args_hash="h4", depends_on=["a"]),
                PlannedStep(call_id="c", tool="write", args_hash="h5", depends_on=["b2"]),
            ],
        ),
    )
    assert s.plan_version == 2
    assert {k: v.status for k, v in s.plan.items()} == {
        "a": "succeeded",  # kept although v2 does not list it
        "b": "failed",
        "c": "pending",  # planned again under v2 with other arguments
        "b2": "pending",
    }
    assert s.plan["c"].args_hash == "h5" and s.plan["c"].version == 2
    assert s.usage.tool_calls == 2
    with pytest.raises(TransitionError, match="finished steps stay finished"):
        ev(
            s.model_copy(deep=True),
            PlanRecorded(version=3, planner="code", steps=[PlannedStep(call_id="a", tool="fetch")]),
        )


def test_model_calls_sum_into_usage_and_budgets_merge() -> None:
    s = started()
    ev(s, BudgetSet(tokens=100, steps=5))
    ev(s, StepStarted(step_id="model", policy=Policy.READ))
    ev(
        s,
        ModelCalled(
            step_id="model", model="m", prompt_hash="a" * 64, input_tokens=30, output_tokens=12
        ),
    )
    ev(s, StepCompleted(step_id="model"))
    ev(s, StepStarted(step_id="model#2", policy=Policy.READ))
    ev(
        s,
        ModelCalled(
            step_id="model#2",
            model="m",
            prompt_hash="b" * 64,
            input_tokens=1,
            output_tokens=2,
            cost_usd=0.5,
        ),
    )
    assert (s.usage.tokens, s.usage.model_calls, s.usage.cost_unknown) == (45, 2, 1)
    assert s.usage.cost_usd == 0.5
    ev(s, BudgetSet(tokens=1000, by="alice"))
    assert (s.budget.tokens, s.budget.steps, s.budget.cost_usd) == (1000, 5, None)
