"""Read and compute steps, and the primitives that are steps of their own: patch markers,
verifications, warnings, user checkpoints and artifacts.

Recovery by policy (DESIGN.md §1, step): a ``read`` step is repeated if it never completed; a
``compute`` step's recorded result is reused while the hash of its input is unchanged. Their
start is written with their result, as one event: nothing a read or compute step does outside
the process is recovered from a record of its start.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

from .. import faults, serde
from ..errors import (
    AsyncMisuseError,
    NotSerializable,
    PayloadError,
    StepError,
    TorporError,
)
from ..history import (
    ArtifactCreated,
    ArtifactRef,
    CheckpointSaved,
    Payload,
    Policy,
    StepCompleted,
    StepFailed,
    StepStarted,
    VerificationRecorded,
    WarningRecorded,
)
from ..store.base import Completion
from .calls import resolve
from .journal import Journal, step_work


def run_step(
    j: Journal,
    step_id: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    policy: Policy | str = Policy.READ,
    purpose: str = "",
    crash_limit: int | None = None,
) -> Any:
    """A read/compute step from sync code (see :meth:`torpor.Run.step`)."""
    sid, cached, ih, pol = _before(j, step_id, policy, args, kwargs, purpose, crash_limit)
    if cached is not None:
        return j.value(sid, cached.result)
    faults.note("step", sid, j.run_id)
    try:
        # (An async ``fn`` inside a running loop: calling it runs none of its body, and
        # resolve() refuses the coroutine, so no check is needed before the call.)
        with step_work(j, sid):
            value = resolve(fn(*args, **kwargs))
    except AsyncMisuseError:
        raise
    except Exception as exc:
        _fail(j, sid, pol, ih, purpose, exc)
    return _after(j, sid, pol, ih, purpose, value)


async def arun_step(
    j: Journal,
    step_id: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    policy: Policy | str = Policy.READ,
    purpose: str = "",
    crash_limit: int | None = None,
) -> Any:
    """Async twin of :func:`run_step` (``fn`` may be sync or async)."""
    sid, cached, ih, pol = _before(j, step_id, policy, args, kwargs, purpose, crash_limit)
    if cached is not None:
        return j.value(sid, cached.result)
    faults.note("step", sid, j.run_id)
    try:
        with step_work():
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
    except Exception as exc:
        _fail(j, sid, pol, ih, purpose, exc)
    return _after(j, sid, pol, ih, purpose, value)


def _before(
    j: Journal,
    step_id: str,
    policy: Policy | str,
    args: Any,
    kwargs: Any,
    purpose: str,
    crash_limit: int | None,
) -> tuple[str, Completion | None, str | None, Policy]:
    pol = policy if policy.__class__ is Policy else Policy(policy)
    if pol is not Policy.READ and pol is not Policy.COMPUTE:
        raise TorporError(
            f"run.step policy must be read or compute, not {pol}; use run.effect() for effects"
        )
    sid = j.next_id(step_id)
    j.boundary()
    ih = None
    if pol is Policy.COMPUTE:
        try:
            ih = serde.hash_value([list(args), kwargs])
        except NotSerializable as exc:
            raise PayloadError(j.run_id, sid, f"compute input is not hashable: {exc}") from None
    comp = j.recorded(sid, pol)
    if comp is not None and (pol is Policy.READ or comp.input_hash == ih):
        return sid, comp, ih, pol
    info = j.state.steps.get(sid)
    if info is not None and info.status == "failed":
        raise StepError(j.run_id, sid, j.failure_of(sid))  # replay raises it again
    if j.careful or (info is not None and info.status == "started"):
        # After a crash: the start is recorded before the body runs, so a step that kills its
        # process leaves a trace each time and is parked at the crash limit (G11).
        j.guard_crashes(sid, crash_limit)
        if j.replay.replaying:
            # Completions recorded after this point lie ahead: steps nested in this one (an
            # artifact stored from inside its body) completed before the crash. Its start is
            # written once the code has replayed them, with its completion; the takeover that
            # led here counts toward the workflow's crash limit.
            return sid, None, ih, pol
        j.append(
            StepStarted(
                step_id=sid,
                policy=pol,
                input_hash=ih,
                purpose=purpose,
                attempt=j.next_attempt(sid),
            )
        )
    return sid, None, ih, pol


def _after(j: Journal, sid: str, pol: Policy, ih: str | None, purpose: str, value: Any) -> Any:
    data = j.jsonable(sid, value)
    info = j.state.steps.get(sid)
    if info is not None and info.status == "started":  # its start is recorded: close it
        j.append(StepCompleted(step_id=sid, result=data, policy=pol, input_hash=ih))
        j.careful = False  # past the first new step after a crash
    else:
        j.append(*j.step_events(sid, pol, data, purpose=purpose, input_hash=ih))
    return j.value(sid, data)  # what a replay gives back: the same value, type included


def _fail(j: Journal, sid: str, pol: Policy, ih: str | None, purpose: str, exc: Exception) -> None:
    err = f"{type(exc).__name__}: {exc}"
    info = j.state.steps.get(sid)
    start: list[Payload] = []
    if info is None or info.status != "started":
        start = [
            StepStarted(
                step_id=sid,
                policy=pol,
                input_hash=ih,
                purpose=purpose,
                attempt=j.next_attempt(sid),
            )
        ]
    j.append(*start, StepFailed(step_id=sid, error=err))
    raise StepError(j.run_id, sid, err) from exc


def patched(j: Journal, change: str) -> bool:
    """Whether this run takes the new path of code change ``change`` (see
    :meth:`torpor.Run.patched`)."""
    sid = j.next_id(f"patch:{change}")
    j.boundary()
    if j.recorded(sid, Policy.READ) is not None:
        return True
    if j.replay.replaying:
        return False  # recorded past this point without the marker: the old path
    j.append(
        StepStarted(step_id=sid, policy=Policy.READ, purpose=f"patch marker {change!r}"),
        StepCompleted(step_id=sid, policy=Policy.READ, result=True),
    )
    return True


def verify(j: Journal, name: str, check: bool | Callable[[], Any], detail: Any = None) -> bool:
    """Record a verification of criterion ``name`` (see :meth:`torpor.Run.verify`)."""

    def work(sid: str) -> tuple[Any, list[Any]]:
        passed, info = _check(check, detail)
        info = j.jsonable(sid, info, "verification detail")
        return {"passed": passed}, [VerificationRecorded(name=name, passed=passed, detail=info)]

    rec = j.record(f"verify:{name}", work, purpose=f"verify {name}")
    return bool((rec.result or {}).get("passed"))


def _check(check: bool | Callable[[], Any], detail: Any) -> tuple[bool, Any]:
    """``(passed, detail)`` of a check: a bool, or a callable returning a bool or ``(bool,
    detail)``; a callable that raises failed, with the error as detail."""
    if not callable(check):
        return bool(check), detail
    try:
        out = check()
    except Exception as exc:
        out = (False, f"{type(exc).__name__}: {exc}")
    if isinstance(out, tuple):
        return bool(out[0]), out[1]
    return bool(out), detail


def warn(j: Journal, message: str) -> None:
    """Record a warning (see :meth:`torpor.Run.warn`)."""

    def work(sid: str) -> tuple[Any, list[Any]]:
        return None, [WarningRecorded(message=message, step_id=sid)]

    j.record("warn", work, purpose="warning")


def checkpoint(j: Journal, state: Any) -> None:
    """A user checkpoint (see :meth:`torpor.Run.checkpoint`)."""
    n = j.counters.get("checkpoint", 0) + 1
    j.counters["checkpoint"] = n
    j.boundary()
    if n <= j.state.counters.get("checkpoint", 0):
        return  # recorded by an earlier execution; replay passes over it
    # Not offloaded: a large state is stored in chunks, so what did not change is not paid for
    # again at the next checkpoint (torpor.store.chunks).
    data = j.jsonable(f"checkpoint#{n}", state, "checkpoint state", offload=False)
    j.append(*_large_state(j), CheckpointSaved(state=data, counters=dict(j.counters)))
    faults.point("checkpoint.saved")


def _large_state(j: Journal) -> list[WarningRecorded]:
    """A warning, once per run, when the checkpoint state just encoded is over
    ``TORPOR_STATE_WARN_BYTES``."""
    size, limit = j.last_size, serde.STATE_WARN_BYTES
    if size <= limit or any(w.startswith(_LARGE_STATE) for w in j.state.warnings):
        return []
    return [
        WarningRecorded(
            message=f"{_LARGE_STATE} {size} bytes, over the {limit}-byte warning threshold "
            "(TORPOR_STATE_WARN_BYTES); keep large data in artifacts and checkpoint references"
        )
    ]


_LARGE_STATE = "checkpoint state is"


def restore(j: Journal, default: Any) -> Any:
    """The latest user checkpoint's state, with the step-id counters saved with it (see
    :meth:`torpor.Run.restore`)."""
    if j.state.user_checkpoint_seq == 0:
        return default
    j.counters = dict(j.state.counters)
    # (Decoding builds new containers: the state's own copy is never handed out.)
    state = j.value(f"checkpoint#{j.counters.get('checkpoint', 0)}", j.state.user_state, "state")
    return copy.deepcopy(state) if state is j.state.user_state else state


def artifact(j: Journal, name: str, data: bytes | str, media_type: str) -> ArtifactRef:
    """Store ``data`` content-addressed and record it as artifact ``name`` (see
    :meth:`torpor.Run.artifact`): a compute step whose input hash is the content's sha256."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    sid = j.next_id(f"artifact:{name}")
    j.boundary()
    digest = serde.sha256_hex(raw)
    blobs = j.host.artifacts
    comp = j.recorded(sid, Policy.COMPUTE)
    if comp is not None and comp.input_hash == digest:
        if not blobs.exists(digest):
            j.store.pin_blob(j.run_id, digest, len(raw))
            blobs.put(raw)
        return ArtifactRef(**comp.result)
    # The run's reference first (an in-flight pin): no collection pass deletes the blob
    # between its write and the event that records it.
    j.store.pin_blob(j.run_id, digest, len(raw))
    blobs.put(raw)
    faults.point("artifact.stored")
    prev = j.state.artifacts.get(name)
    ref = ArtifactRef(
        name=name,
        sha256=digest,
        version=(prev.version + 1) if prev else 1,
        size=len(raw),
        media_type=media_type,
        step_id=sid,
    )
    facts = [ArtifactCreated(**ref.model_dump())]
    result = ref.model_dump(mode="json")
    purpose = f"store artifact {name}"
    j.append(*j.step_events(sid, Policy.COMPUTE, result, facts, purpose, digest))
    return ref
