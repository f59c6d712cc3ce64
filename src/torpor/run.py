"""The run handle a workflow receives: durable steps, effects, artifacts, waits, approvals.

Every primitive has a stable id (its name; a repeated name in one execution gets ``#2``,
``#3`` …, as Absurd does). On resume the workflow function runs again from the top — or from
the state restored by :meth:`Run.restore` — and every primitive whose record exists returns the
recorded result instead of executing again (G1). Recovery follows each step's policy:

- ``read``: repeated if it never completed;
- ``compute``: the recorded result is reused while its input hash is unchanged;
- ``effect``: the intent is committed *before* the call and the observation after; an intent
  without an observation is *reconciled* through the tool's ``reconcile`` — applied, absent
  (perform now) or unknown (the run ends ``unresolved``) — never retried blindly (G2);
- ``decision``: a person's approval, bound to the content hashes decided on (G6).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from . import faults, serde, signing
from .errors import (
    ApprovalDeniedError,
    ApprovalInvalidError,
    AsyncMisuseError,
    EffectNotApplied,
    EffectUnresolved,
    NonDeterminismError,
    PayloadError,
    RunStopped,
    StepError,
    Suspended,
    TorporError,
    WaitTimeout,
)
from .history import (
    ApprovalConsumed,
    ApprovalRequested,
    ArtifactCreated,
    ArtifactRef,
    CheckpointSaved,
    EffectFailed,
    EffectIntended,
    EffectObserved,
    EffectReconciled,
    Event,
    Outcome,
    Payload,
    Policy,
    RunState,
    StepCompleted,
    StepFailed,
    StepStarted,
    Verdict,
    VerificationRecorded,
    WaitCompleted,
    WaitStarted,
    WarningRecorded,
)
from .store.base import Completion, InboxPendingError

if TYPE_CHECKING:
    from .runtime import Execution


#: How often a consuming append refused for pending inbox messages is re-checked and retried.
_GUARD_RETRIES = 20


# ------------------------------------------------------------------ reconcile verdicts


@dataclass(frozen=True)
class Applied:
    """Reconcile found the effect happened; ``result`` stands for its return value."""

    result: Any = None


@dataclass(frozen=True)
class Absent:
    """Reconcile found the effect did not happen: it is safe to perform it now."""


@dataclass(frozen=True)
class Unknown:
    """Reconcile cannot tell: the run becomes ``unresolved`` and waits for a person."""

    reason: str = "outcome cannot be determined"


Reconciliation = Applied | Absent | Unknown


@dataclass(frozen=True)
class EffectCall:
    """What ``reconcile`` is asked about: the effect's identity and the call's arguments."""

    run_id: str
    step_id: str
    idempotency_key: str
    operation: str
    attempt: int
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Approval:
    """A granted approval: authorizes effects on exactly ``hashes``."""

    approval_id: str
    name: str
    hashes: tuple[str, ...]
    approver: str


def _accepts_kw(fn: Callable[..., Any], name: str) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return name in sig.parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()
    )


def _in_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _refuse_async_in_loop(fn: Callable[..., Any]) -> None:
    """Refuse, before anything is recorded or called, an async function given to the sync API
    inside a running event loop."""
    if inspect.iscoroutinefunction(fn) and _in_loop():
        raise AsyncMisuseError()


def _run_sync(value: Any) -> Any:
    """Resolve an awaitable returned by a step function called from sync code."""
    if inspect.isawaitable(value):
        if not _in_loop():
            return asyncio.run(_await(value))
        if inspect.iscoroutine(value):
            value.close()  # never started: nothing ran, and no "never awaited" warning
        raise AsyncMisuseError()
    return value


async def _await(aw: Awaitable[Any]) -> Any:
    return await aw


class Run:
    """The handle passed to a workflow function ``fn(run, input)``.

    Public attributes: ``run_id``, ``input``. Read-only view: :attr:`state`.
    """

    def __init__(self, ex: Execution):
        self._ex = ex
        self.run_id: str = ex.state.run_id
        self.input: Any = ex.state.input
        self._counters: dict[str, int] = {}
        self._id_tasks: dict[str, Any] = {}
        #: The id of the primitive being executed (named by a divergence error).
        self._asked: str | None = None

    # ------------------------------------------------------------- basics

    @property
    def state(self) -> RunState:
        """The current folded state (do not mutate)."""
        return self._ex.state

    def _next_id(self, name: str) -> str:
        n = self._counters.get(name, 0) + 1
        self._counters[name] = n
        sid = name if n == 1 else f"{name}#{n}"
        self._asked = sid
        return sid

    def _append(self, *payloads: Payload, **kw: Any) -> list[Event]:
        ex = self._ex
        # The first new write of this execution: has the replay caught up with the history?
        # (A compute step rerun for a changed input is no new step: its id is recorded.)
        if ex.gate and self._asked not in ex.cache:
            first = ex.gate_new_write(self._asked)
            out = ex.append([*first, *payloads], **kw)
            ex.gate, ex.pending_version = False, None
            return out
        return ex.append(list(payloads), **kw)

    def _completion(self, sid: str, policy: Policy) -> Completion | None:
        ex = self._ex
        comp = ex.completion(sid)
        if comp is not None:
            if comp.policy is not None and comp.policy != policy.value:
                raise NonDeterminismError(
                    f"run {self.run_id!r} step {sid!r} was recorded (seq {comp.seq}) as a "
                    f"{comp.policy} step, but the code now asks for a {policy.value} step with "
                    "that id: the workflow changed in a way that does not match the recorded "
                    "history. Resume with the code the run was recorded under, or keep recorded "
                    'runs on the old path with `if run.patched("<change>"):`. Nothing was '
                    "recorded."
                )
            if comp.seq > ex.replay_at:
                ex.replay_at = comp.seq
        return comp

    def patched(self, change: str) -> bool:
        """Whether this run takes the new path of a code change named ``change``.

        True for a run that reaches this point under code that has the check (a new run, or an
        old one that had not got this far): a marker is recorded, so the answer stays True on
        every replay. False for a run that recorded steps past this point without the marker
        (it took the old path; keep it there)::

            if run.patched("send-receipt"):
                run.effect("receipt", send_receipt, order)   # new runs only

        Once no run recorded before the change is left, drop the check and keep the new path.
        """
        sid = self._next_id(f"patch:{change}")
        self._ex.boundary()
        if self._completion(sid, Policy.READ) is not None:
            return True
        if self._ex.replaying:
            return False  # recorded past this point without the marker: the old path
        self._append(
            StepStarted(step_id=sid, policy=Policy.READ, purpose=f"patch marker {change!r}"),
            StepCompleted(step_id=sid, policy=Policy.READ, result=True),
        )
        return True

    def _recorded_failure(self, sid: str) -> None:
        info = self.state.steps.get(sid)
        if info is not None and info.status == "failed":
            err = self._ex.failure_of(sid)
            raise StepError(self.run_id, sid, err)

    def _jsonable(self, sid: str | None, value: Any, what: str = "result") -> Any:
        try:
            out = serde.to_jsonable(value)
        except serde.NotSerializable as exc:
            raise PayloadError(self.run_id, sid, f"{what} is not serializable: {exc}") from None
        kind = type(out)
        if out is None or kind is int or kind is bool or kind is float:
            return out  # a scalar is far below the limit: no need to encode it to measure
        if kind is str and len(out) * 6 < serde.MAX_PAYLOAD_BYTES:
            return out  # (a JSON string is at most 6 bytes per character)
        size = len(serde.dumps(out).encode())
        if size > serde.MAX_PAYLOAD_BYTES:
            raise PayloadError(
                self.run_id,
                sid,
                f"{what} is {size} bytes, over the {serde.MAX_PAYLOAD_BYTES}-byte limit; "
                "store it with run.artifact() and return the reference",
            )
        return out

    # ------------------------------------------------------------- steps

    def step(
        self,
        step_id: str,
        fn: Callable[..., Any],
        *args: Any,
        policy: Policy | str = Policy.READ,
        purpose: str = "",
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` as a durable step; return its (recorded) result.

        ``policy`` is ``read`` (default; repeated if it never completed) or ``compute`` (the
        result is reused while the hash of ``(args, kwargs)`` is unchanged). The result must be
        JSON data (PayloadError naming the step otherwise). An exception from ``fn`` is recorded
        and raised as :class:`StepError`, also on replay.
        """
        sid, cached, ih, pol = self._step_pre(step_id, policy, args, kwargs)
        if cached is not None:
            return cached.result
        faults.note("step", sid)
        try:
            # (An async ``fn`` inside a running loop: calling it runs none of its body, and
            # _run_sync refuses the coroutine, so no check is needed before the call.)
            value = _run_sync(fn(*args, **kwargs))
        except AsyncMisuseError:
            raise
        except Exception as exc:
            self._step_fail(sid, pol, ih, purpose, exc)
        return self._step_post(sid, pol, ih, purpose, value)

    async def astep(
        self,
        step_id: str,
        fn: Callable[..., Any],
        *args: Any,
        policy: Policy | str = Policy.READ,
        purpose: str = "",
        **kwargs: Any,
    ) -> Any:
        """Async twin of :meth:`step` for async workflows (``fn`` may be sync or async)."""
        with self._concurrent(step_id):
            sid, cached, ih, pol = self._step_pre(step_id, policy, args, kwargs)
            if cached is not None:
                return cached.result
            faults.note("step", sid)
            try:
                value = fn(*args, **kwargs)
                if inspect.isawaitable(value):
                    value = await value
            except Exception as exc:
                self._step_fail(sid, pol, ih, purpose, exc)
            return self._step_post(sid, pol, ih, purpose, value)

    @contextmanager
    def _concurrent(self, step_id: str) -> Iterator[None]:
        """Refuse one id base used from two asyncio tasks (e.g. items of ``asyncio.gather``):
        repeated ids are numbered in call order (``x``, ``x#2``), and across tasks that order
        depends on timing, so a replay could hand one call's record to another (one customer
        charged twice, another never). Reuse within one task (a sequential loop) is fine.
        Raises NonDeterminismError before anything is recorded for the call."""
        try:
            task: Any = asyncio.current_task()
        except RuntimeError:
            task = None
        owner = self._id_tasks.setdefault(step_id, task)
        if owner is not task:
            raise NonDeterminismError(
                f"run {self.run_id!r}: the step id {step_id!r} is used from two concurrent "
                "asyncio tasks; repeated ids are numbered in call order, which concurrency "
                f"makes timing-dependent. Give each concurrent call its own id "
                f"(e.g. f'{step_id}:{{item}}')"
            )
        yield

    def compute(
        self, step_id: str, fn: Callable[..., Any], *args: Any, purpose: str = "", **kwargs: Any
    ) -> Any:
        """Shorthand for ``step(..., policy="compute")``."""
        return self.step(step_id, fn, *args, policy=Policy.COMPUTE, purpose=purpose, **kwargs)

    def _step_pre(
        self, step_id: str, policy: Policy | str, args: Any, kwargs: Any
    ) -> tuple[str, Completion | None, str | None, Policy]:
        pol = policy if policy.__class__ is Policy else Policy(policy)
        if pol is not Policy.READ and pol is not Policy.COMPUTE:
            raise TorporError(
                f"run.step policy must be read or compute, not {pol}; use run.effect() for effects"
            )
        sid = self._next_id(step_id)
        self._ex.boundary()
        ih = None
        if pol is Policy.COMPUTE:
            try:
                ih = serde.hash_value([list(args), kwargs])
            except serde.NotSerializable as exc:
                raise PayloadError(
                    self.run_id, sid, f"compute input is not hashable: {exc}"
                ) from None
        comp = self._completion(sid, pol)
        if comp is not None and (pol is Policy.READ or comp.input_hash == ih):
            return sid, comp, ih, pol
        self._recorded_failure(sid)
        return sid, None, ih, pol

    def _step_post(self, sid: str, pol: Policy, ih: str | None, purpose: str, value: Any) -> Any:
        data = self._jsonable(sid, value)
        # One event: the start of a read/compute step is written with its result (nothing it
        # does outside the process is recovered from a record of its start).
        self._append(
            StepCompleted(
                step_id=sid,
                result=data,
                policy=pol,
                input_hash=ih,
                attempt=self._ex.next_attempt(sid),
                purpose=purpose,
            )
        )
        return data

    def _step_fail(
        self, sid: str, pol: Policy, ih: str | None, purpose: str, exc: Exception
    ) -> None:
        err = f"{type(exc).__name__}: {exc}"
        self._append(
            StepStarted(
                step_id=sid,
                policy=pol,
                input_hash=ih,
                purpose=purpose,
                attempt=self._ex.next_attempt(sid),
            ),
            StepFailed(step_id=sid, error=err),
        )
        raise StepError(self.run_id, sid, err) from exc

    # ------------------------------------------------------------- effects

    def effect(
        self,
        step_id: str,
        fn: Callable[..., Any],
        *args: Any,
        reconcile: Callable[[EffectCall], Reconciliation] | None = None,
        key: str | None = None,
        approval: Approval | None = None,
        artifacts: Sequence[ArtifactRef | str] = (),
        operation: str | None = None,
        purpose: str = "",
        **kwargs: Any,
    ) -> Any:
        """Perform an external effect at most once per idempotency key (G2).

        ``key`` defaults to ``"<run_id>/<step_id>"``. If ``fn`` accepts an ``idempotency_key``
        parameter it is passed in, so the outside world can carry it (a commit trailer, a
        Message-ID, an API idempotency header) and ``reconcile`` can look for it. If it accepts
        ``fencing_token``, the lease epoch (an int that only grows) is passed in too.
        ``approval`` must be an approval granted on content covering ``artifacts`` (their
        hashes); it is consumed atomically with the intent (G6).
        Returns the recorded result. Raises StepError when the effect failed and reconcile
        confirmed it absent; the run ends ``unresolved`` when the outcome cannot be known.
        """
        _refuse_async_in_loop(fn)
        sid, cached, call = self._effect_pre(
            step_id, fn, args, kwargs, key, approval, artifacts, operation, purpose, reconcile
        )
        if call is None:  # recorded (or reconciled as applied): its result, even None
            return cached
        try:
            value = _run_sync(fn(*args, **call.kwargs))
            faults.point("effect.called")  # the world changed; `ack` faults raise here
        except Exception as exc:
            return self._effect_error(sid, call, reconcile, exc)
        return self._effect_post(sid, call, value)

    async def aeffect(
        self,
        step_id: str,
        fn: Callable[..., Any],
        *args: Any,
        reconcile: Callable[[EffectCall], Reconciliation] | None = None,
        key: str | None = None,
        approval: Approval | None = None,
        artifacts: Sequence[ArtifactRef | str] = (),
        operation: str | None = None,
        purpose: str = "",
        **kwargs: Any,
    ) -> Any:
        """Async twin of :meth:`effect`."""
        with self._concurrent(step_id):
            sid, cached, call = self._effect_pre(
                step_id, fn, args, kwargs, key, approval, artifacts, operation, purpose, reconcile
            )
            if call is None:  # recorded (or reconciled as applied): its result, even None
                return cached
            try:
                value = fn(*args, **call.kwargs)
                if inspect.isawaitable(value):
                    value = await value
                faults.point("effect.called")  # the world changed; `ack` faults raise here
            except Exception as exc:
                return self._effect_error(sid, call, reconcile, exc)
            return self._effect_post(sid, call, value)

    def _effect_pre(
        self,
        step_id: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        key: str | None,
        approval: Approval | None,
        artifacts: Sequence[ArtifactRef | str],
        operation: str | None,
        purpose: str,
        reconcile: Callable[[EffectCall], Reconciliation] | None,
    ) -> tuple[str, Any, EffectCall | None]:
        sid = self._next_id(step_id)
        self._ex.boundary()
        comp = self._completion(sid, Policy.EFFECT)
        if comp is not None:
            return sid, comp.result, None
        self._recorded_failure(sid)
        key = key or f"{self.run_id}/{sid}"
        op = str(operation or getattr(fn, "__qualname__", "effect"))
        kw = dict(kwargs)
        if _accepts_kw(fn, "idempotency_key"):
            kw["idempotency_key"] = key
        if _accepts_kw(fn, "fencing_token"):
            # The lease epoch, for services that reject stale writers (Kleppmann's fencing
            # tokens): a paused worker whose lease was taken over cannot complete the effect.
            kw["fencing_token"] = self._ex.lease.epoch
        info = self.state.effects.get(key)
        if info is not None and info.step_id != sid:
            raise NonDeterminismError(
                f"run {self.run_id!r}: idempotency key {key!r} belongs to step {info.step_id!r}, "
                f"not {sid!r}"
            )
        attempt = 1
        if info is not None and info.status == "intended":
            # Crashed between intent and observation: ask the outside world (never retry blindly).
            call = EffectCall(self.run_id, sid, key, op, info.attempt, args, kw)
            verdict = self._reconcile(call, reconcile)
            if isinstance(verdict, Applied):
                data = self._jsonable(sid, verdict.result, "reconciled result")
                self._append(
                    EffectReconciled(key=key, verdict=Verdict.APPLIED, result=data),
                    StepCompleted(step_id=sid, result=data, policy=Policy.EFFECT),
                )
                return sid, data, None
            if isinstance(verdict, Unknown):
                self._append(
                    EffectReconciled(key=key, verdict=Verdict.UNKNOWN, reason=verdict.reason)
                )
                raise EffectUnresolved(key, verdict.reason)
            self._append(
                EffectReconciled(key=key, verdict=Verdict.ABSENT, reason="reconcile found no trace")
            )
            info = self.state.effects[key]
        if info is not None and info.status == "unknown":
            raise EffectUnresolved(key, info.reason or "outcome unknown; awaiting a person")
        if info is not None and info.status == "applied":
            # A person settled it as applied; the completion is recorded with the resolution.
            raise NonDeterminismError(f"effect {key!r} applied but its step {sid!r} has no result")
        if info is not None:
            attempt = info.attempt + 1
        payloads: list[Payload] = []
        if self.state.steps.get(sid) is None or self.state.steps[sid].status != "started":
            payloads.append(
                StepStarted(
                    step_id=sid,
                    policy=Policy.EFFECT,
                    purpose=purpose,
                    attempt=self._ex.next_attempt(sid),
                )
            )
        approval_id = None
        consume = False
        if approval is not None:
            hashes = self._approval_hashes(approval, artifacts, sid)
            approval_id = approval.approval_id
            # A retry after `absent` (engine or person) stays under the consumption recorded
            # with this effect's first intent; any other use must find the approval unconsumed.
            consume = info is None or info.approval_id != approval_id
            if consume:
                self._check_approval(approval, hashes)
                payloads.append(
                    ApprovalConsumed(approval_id=approval_id, step_id=sid, hashes=hashes)
                )
        payloads.append(
            EffectIntended(
                step_id=sid, key=key, operation=op, attempt=attempt, approval_id=approval_id
            )
        )
        for _ in range(_GUARD_RETRIES):
            try:
                self._append(*payloads, guard_inbox=consume)
                break
            except InboxPendingError:
                # A message (a revocation?) landed between the check and the consuming append:
                # move it into the history and check the approval again before consuming it.
                assert approval is not None
                self._check_approval(approval, hashes)
        else:
            raise TorporError(
                f"run {self.run_id!r} step {sid!r}: inbox messages keep arriving; "
                "the approval could not be consumed"
            )
        faults.point("effect.intended")
        return sid, None, EffectCall(self.run_id, sid, key, op, attempt, args, kw)

    def _effect_post(self, sid: str, call: EffectCall, value: Any) -> Any:
        try:
            data = self._jsonable(sid, value)
        except PayloadError as exc:
            # The effect happened: record that fact honestly, then refuse the result.
            self._append(
                EffectObserved(
                    key=call.idempotency_key, result={"unserializable": repr(value)[:500]}
                ),
                StepFailed(step_id=sid, error=str(exc)),
            )
            raise
        self._append(
            EffectObserved(key=call.idempotency_key, result=data),
            StepCompleted(step_id=sid, result=data, policy=Policy.EFFECT),
        )
        return data

    def _effect_error(
        self,
        sid: str,
        call: EffectCall,
        reconcile: Callable[[EffectCall], Reconciliation] | None,
        exc: Exception,
    ) -> Any:
        err = f"{type(exc).__name__}: {exc}"
        verdict: Reconciliation
        if isinstance(exc, EffectNotApplied):
            verdict = Absent()
        else:
            verdict = self._reconcile(call, reconcile, err)
        key = call.idempotency_key
        if isinstance(verdict, Applied):
            data = self._jsonable(sid, verdict.result, "reconciled result")
            self._append(
                EffectReconciled(key=key, verdict=Verdict.APPLIED, result=data, reason=err),
                StepCompleted(step_id=sid, result=data, policy=Policy.EFFECT),
            )
            return data
        if isinstance(verdict, Unknown):
            self._append(
                EffectReconciled(
                    key=key, verdict=Verdict.UNKNOWN, reason=f"{err}; {verdict.reason}"
                )
            )
            raise EffectUnresolved(key, f"{err}; {verdict.reason}")
        self._append(EffectFailed(key=key, error=err), StepFailed(step_id=sid, error=err))
        raise StepError(self.run_id, sid, err) from exc

    def _reconcile(
        self,
        call: EffectCall,
        reconcile: Callable[[EffectCall], Reconciliation] | None,
        error: str | None = None,
    ) -> Reconciliation:
        if reconcile is None:
            # (The caller puts the call's own error, if any, in front of this reason.)
            return Unknown("no reconcile function: whether it happened cannot be checked")
        try:
            verdict = reconcile(call)
        except Exception as exc:
            return Unknown(f"reconcile raised {type(exc).__name__}: {exc}")
        if not isinstance(verdict, Applied | Absent | Unknown):
            return Unknown(f"reconcile returned {verdict!r}, not Applied/Absent/Unknown")
        return verdict

    # ------------------------------------------------------------- approvals

    def _approval_hashes(
        self, approval: Approval, artifacts: Sequence[ArtifactRef | str], sid: str
    ) -> list[str]:
        hashes = sorted({a.sha256 if isinstance(a, ArtifactRef) else a for a in artifacts})
        if not hashes:
            hashes = list(approval.hashes)
        missing = [h for h in hashes if h not in approval.hashes]
        if missing:
            raise ApprovalInvalidError(
                f"run {self.run_id!r} step {sid!r}: approval {approval.approval_id!r} does not "
                f"cover content sha256:{missing[0]} (the content changed after approval; "
                "a new approval is needed)"
            )
        return hashes

    def _check_approval(self, approval: Approval, hashes: list[str]) -> None:
        self._ex.sync_inbox(force=True)
        info = self.state.approvals.get(approval.approval_id)
        if info is None:
            raise ApprovalInvalidError(f"approval {approval.approval_id!r} was never requested")
        if info.status == "consumed":
            raise ApprovalInvalidError(
                f"approval {approval.approval_id!r} was already consumed by another effect"
            )
        if info.status != "approved":
            raise ApprovalInvalidError(
                f"approval {approval.approval_id!r} is {info.status}; the effect is not authorized"
            )
        body = signing.decision_body(
            self.run_id,
            approval.approval_id,
            "approve",
            info.approver or "",
            info.hashes,
            info.decided_at_ms,
        )
        if not signing.verify(self._ex.runtime.signing_key, body, info.signature or ""):
            raise ApprovalInvalidError(
                f"approval {approval.approval_id!r}: the decision's signature does not verify"
            )

    def approval(
        self,
        name: str,
        artifacts: Sequence[ArtifactRef | str],
        *,
        summary: str = "",
        timeout: timedelta | None = None,
    ) -> Approval:
        """Ask a person to approve exactly this content; wait durably for the decision.

        The approval id is ``<name>@<hash of the content hashes>``: different content is a
        different approval. Returns an :class:`Approval` to pass to :meth:`effect`. Raises
        ApprovalDeniedError when denied (or when ``timeout`` passes first).
        """
        hashes = sorted({a.sha256 if isinstance(a, ArtifactRef) else a for a in artifacts})
        if not hashes:
            raise TorporError(f"run {self.run_id!r}: approval {name!r} binds no content")
        aid = f"{name}@{serde.sha256_hex(','.join(hashes))[:12]}"
        wid = f"approval:{aid}"
        self._ex.boundary()
        comp = self._completion(wid, Policy.DECISION)
        if comp is None:
            self._ex.sync_inbox(force=True)
            if aid not in self.state.approvals:
                deadline = (
                    self._ex.now_ms() + int(timeout.total_seconds() * 1000) if timeout else None
                )
                payloads: list[Payload] = [
                    StepStarted(step_id=wid, policy=Policy.DECISION, purpose=summary or name),
                    ApprovalRequested(
                        approval_id=aid, name=name, hashes=hashes, step_id=wid, summary=summary
                    ),
                    WaitStarted(
                        wait_id=wid,
                        kind="approval",
                        name=aid,
                        deadline_ms=deadline,
                        reason=summary or f"approval {name}",
                    ),
                ]
                auto = self._ex.runtime.auto_approve
                if auto:
                    payloads.append(
                        self._ex.runtime.decide(
                            self.run_id, aid, "approve", auto, hashes, "auto-approved"
                        )
                    )
                self._append(*payloads, wake_at_ms=deadline)
            info = self.state.approvals[aid]
            w = self.state.wait
            if info.status == "requested":
                if (
                    w is not None
                    and w.deadline_ms is not None
                    and self._ex.now_ms() >= w.deadline_ms
                ):
                    self._append(
                        WaitCompleted(wait_id=wid, via="deadline"),
                        StepCompleted(
                            step_id=wid, policy=Policy.DECISION, result={"decision": "timeout"}
                        ),
                    )
                    faults.point("wait.completed")
                    raise ApprovalDeniedError(f"approval {aid!r} timed out without a decision")
                raise Suspended(f"waiting for approval {aid!r} of {len(hashes)} content hash(es)")
            decision = "deny" if info.status == "denied" else "approve"
            self._append(
                WaitCompleted(wait_id=wid, via="decision"),
                StepCompleted(
                    step_id=wid,
                    policy=Policy.DECISION,
                    result={"decision": decision, "approver": info.approver},
                ),
            )
            faults.point("wait.completed")
            comp = self._ex.completion(wid)
            assert comp is not None
        res = comp.result or {}
        if res.get("decision") == "timeout":
            raise ApprovalDeniedError(f"approval {aid!r} timed out without a decision")
        if res.get("decision") != "approve":
            denied = self.state.approvals.get(aid)
            raise ApprovalDeniedError(
                f"approval {aid!r} denied by {res.get('approver')}"
                + (f": {denied.comment}" if denied and denied.comment else "")
            )
        return Approval(aid, name, tuple(hashes), res.get("approver") or "")

    # ------------------------------------------------------------- artifacts

    def artifact(
        self, name: str, data: bytes | str, *, media_type: str = "application/octet-stream"
    ) -> ArtifactRef:
        """Store ``data`` content-addressed (sha256) and record it as artifact ``name``.

        Returns an :class:`ArtifactRef` (hash, version, size) — the only thing checkpoints hold.
        On replay with the same content the recorded reference is returned; new content makes a
        new version.
        """
        raw = data.encode() if isinstance(data, str) else bytes(data)
        sid = self._next_id(f"artifact:{name}")
        self._ex.boundary()
        digest = serde.sha256_hex(raw)
        comp = self._completion(sid, Policy.COMPUTE)
        if comp is not None and comp.input_hash == digest:
            if not self._ex.runtime.artifacts.exists(digest):
                self._ex.runtime.artifacts.put(raw)
            return ArtifactRef(**comp.result)
        self._ex.runtime.artifacts.put(raw)
        faults.point("artifact.stored")
        prev = self.state.artifacts.get(name)
        ref = ArtifactRef(
            name=name,
            sha256=digest,
            version=(prev.version + 1) if prev else 1,
            size=len(raw),
            media_type=media_type,
            step_id=sid,
        )
        self._append(
            StepStarted(
                step_id=sid,
                policy=Policy.COMPUTE,
                input_hash=digest,
                purpose=f"store artifact {name}",
            ),
            ArtifactCreated(**ref.model_dump()),
            StepCompleted(
                step_id=sid,
                result=ref.model_dump(mode="json"),
                policy=Policy.COMPUTE,
                input_hash=digest,
            ),
        )
        return ref

    def read_artifact(self, ref: ArtifactRef | str) -> bytes:
        """The bytes of an artifact (by reference or sha256), hash-verified."""
        digest = ref.sha256 if isinstance(ref, ArtifactRef) else ref
        return self._ex.runtime.artifacts.get(digest)

    # ------------------------------------------------------------- waits

    def wait_for(self, signal: str, *, timeout: timedelta | None = None) -> Any:
        """Wait durably for a signal named ``signal``; return its payload.

        The deadline (``timeout`` from when the wait *began*) is recorded and survives
        restarts. The run holds no lease and no process while it waits. A signal sent before
        the wait began is kept and consumed here. Raises WaitTimeout at the deadline.
        """
        wid = self._next_id(f"wait:{signal}")
        self._ex.boundary()
        comp = self._completion(wid, Policy.READ)
        if comp is None:
            self._ex.sync_inbox(force=True)
            if self.state.wait is None:
                deadline = (
                    self._ex.now_ms() + int(timeout.total_seconds() * 1000) if timeout else None
                )
                self._begin_wait(wid, "signal", signal, deadline, f"signal {signal!r}")
            comp = self._settle_wait(wid)
        res = comp.result or {}
        if res.get("timeout"):
            raise WaitTimeout(f"run {self.run_id!r}: wait {wid!r} reached its deadline")
        return res.get("payload")

    def sleep(
        self, duration: timedelta | float | None = None, *, until: datetime | None = None
    ) -> None:
        """Sleep durably: ``duration`` (timedelta or seconds) or ``until`` (aware datetime).

        The deadline is fixed when the sleep begins; after a restart the run wakes at that
        original deadline, once.
        """
        wid = self._next_id("sleep")
        self._ex.boundary()
        comp = self._completion(wid, Policy.READ)
        if comp is not None:
            return
        if self.state.wait is None:
            if until is not None:
                deadline = int(until.timestamp() * 1000)
            elif duration is not None:
                secs = duration.total_seconds() if isinstance(duration, timedelta) else duration
                deadline = self._ex.now_ms() + int(secs * 1000)
            else:
                raise TorporError("run.sleep needs a duration or until=")
            self._begin_wait(wid, "timer", "sleep", deadline, "timer")
        self._settle_wait(wid)

    def _begin_wait(
        self, wid: str, kind: str, name: str, deadline: int | None, reason: str
    ) -> None:
        self._append(
            StepStarted(step_id=wid, policy=Policy.READ, purpose=f"wait for {reason}"),
            WaitStarted(
                wait_id=wid,
                kind=kind,
                name=name,
                deadline_ms=deadline,
                reason=reason,
            ),
            wake_at_ms=deadline,
        )
        faults.point("wait.started")

    def _settle_wait(self, wid: str) -> Completion:
        w = self.state.wait
        if w is None or w.wait_id != wid:
            raise NonDeterminismError(
                f"run {self.run_id!r} waits on {w.wait_id if w else None!r}, but the code "
                f"reached wait {wid!r}"
            )
        if w.kind == "signal":
            pending = self.state.signals.get(w.name) or []
            if pending:
                sig = pending[0]
                self._append(
                    WaitCompleted(
                        wait_id=wid, via="signal", signal_id=sig.signal_id, payload=sig.payload
                    ),
                    StepCompleted(
                        step_id=wid,
                        policy=Policy.READ,
                        result={"payload": sig.payload, "signal_id": sig.signal_id},
                    ),
                )
                faults.point("wait.completed")
                return self._ex.completion(wid)  # type: ignore[return-value]
        if w.deadline_ms is not None and self._ex.now_ms() >= w.deadline_ms:
            self._append(
                WaitCompleted(wait_id=wid, via="timer" if w.kind == "timer" else "deadline"),
                StepCompleted(
                    step_id=wid, policy=Policy.READ, result={"timeout": w.kind != "timer"}
                ),
            )
            faults.point("wait.completed")
            return self._ex.completion(wid)  # type: ignore[return-value]
        raise Suspended(f"waiting for {w.reason or w.kind}")

    # ------------------------------------------------------------- checkpoints & evidence

    def restore(self, default: Any) -> Any:
        """The state saved by the latest :meth:`checkpoint`, or ``default`` if none.

        Also restores the step-id counters saved with it, so the code after ``restore``
        continues exactly where the checkpoint was taken instead of replaying from the start.
        """
        if self.state.user_checkpoint_seq == 0:
            return default
        self._counters = dict(self.state.counters)
        return copy.deepcopy(self.state.user_state)

    def checkpoint(self, state: Any) -> None:
        """Mark a boundary: resume restarts from ``state`` (read back with :meth:`restore`)."""
        n = self._counters.get("checkpoint", 0) + 1
        self._counters["checkpoint"] = n
        self._ex.boundary()
        if n <= self.state.counters.get("checkpoint", 0):
            return  # recorded by an earlier execution; replay passes over it
        data = self._jsonable(f"checkpoint#{n}", state, "checkpoint state")
        self._append(CheckpointSaved(state=data, counters=dict(self._counters)))
        faults.point("checkpoint.saved")

    def verify(self, name: str, check: bool | Callable[[], Any], detail: Any = None) -> bool:
        """Record a verification (evidence for completion criterion ``name``); return passed.

        ``check`` is a bool or a callable returning a bool or ``(bool, detail)``. A check that
        raises is recorded as failed with the error as detail.
        """
        sid = self._next_id(f"verify:{name}")
        self._ex.boundary()
        comp = self._completion(sid, Policy.READ)
        if comp is not None:
            return bool((comp.result or {}).get("passed"))
        passed: bool
        if callable(check):
            try:
                out = check()
            except Exception as exc:
                out = (False, f"{type(exc).__name__}: {exc}")
            if isinstance(out, tuple):
                passed, detail = bool(out[0]), out[1]
            else:
                passed = bool(out)
        else:
            passed = bool(check)
        detail = self._jsonable(sid, detail, "verification detail")
        self._append(
            StepStarted(step_id=sid, policy=Policy.READ, purpose=f"verify {name}"),
            VerificationRecorded(name=name, passed=passed, detail=detail),
            StepCompleted(step_id=sid, policy=Policy.READ, result={"passed": passed}),
        )
        return passed

    def warn(self, message: str) -> None:
        """Record a warning: a run with warnings ends ``succeeded_with_warnings`` at best."""
        sid = self._next_id("warn")
        self._ex.boundary()
        if self._completion(sid, Policy.READ) is not None:
            return
        self._append(
            StepStarted(step_id=sid, policy=Policy.READ, purpose="warning"),
            WarningRecorded(message=message, step_id=sid),
            StepCompleted(step_id=sid, policy=Policy.READ),
        )

    def stop_safe(self, reason: str) -> None:
        """End the run ``stopped_safe``: stopped before any effect (refused if one happened)."""
        raise RunStopped(Outcome.STOPPED_SAFE, reason)

    def block(self, reason: str) -> None:
        """End the run ``blocked`` (missing authority, budget); a person may reopen it."""
        raise RunStopped(Outcome.BLOCKED, reason)

    def now(self) -> float:
        """The store clock, in epoch seconds (use instead of time.time() in workflows)."""
        return self._ex.now_ms() / 1000
