"""Rows <-> records: how events, checkpoints, completions and inbox bodies are stored.

Every payload field is checked by :func:`torpor.serde.to_jsonable`, which refuses anything that
is not JSON data (bytes, sets, non-string keys, NaN or lone surrogates, with their path) instead
of converting it silently; the values a workflow records (results, checkpoint states) arrive
already in the typed encoding of :func:`torpor.serde.encode` (JSON data with tags), made by the
journal. Decoding never repairs anything: a row that cannot be read is a
:class:`~torpor.errors.CorruptRecordError` naming the run and the seq.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .. import scrub, serde
from ..errors import CorruptRecordError, NotSerializable, PayloadError
from ..history import EVENT_SCHEMA_VERSION, Verdict

if TYPE_CHECKING:
    from ..history import (
        Event,
        Payload,
        RunState,
    )

from . import chunks
from .base import INBOX_HEADROOM_BYTES, Completion
from .chunks import Fetch, Sink

#: A value offloaded to the artifact store (see :mod:`torpor.engine.journal`), as its canonical
#: JSON shows it: the sha256 it is stored under.
_BLOB_RE = re.compile(r'\{"\$torpor":"blob","sha256":"([0-9a-f]{64})","size":(\d+)\}')

#: Every JSON text this codec stores — event payloads, checkpoints, inbox messages, on both
#: backends — has the secrets this process knows scrubbed in all their encodings (G12).
JOURNAL = scrub.sink(
    "journal", "event payloads, checkpoints and inbox messages as stored: torpor.store.codec"
)


def _scrubbed(text: str) -> str:
    """``text`` (JSON) with the process's known secrets replaced (:data:`JOURNAL`); if a raw
    replacement would break the JSON, the parsed value is scrubbed and dumped again."""
    clean = JOURNAL.text(text)
    if clean is text or clean == text:
        return text
    try:
        serde.loads(clean)
    except ValueError:
        return serde.dumps(JOURNAL(serde.loads(text)))
    return clean


#: Stands for "no default": a required field is always written.
_REQUIRED = object()
_FIELD_PLANS: dict[type, tuple[tuple[str, Any], ...]] = {}


def _field_plan(model: type[Payload]) -> tuple[tuple[str, Any], ...]:
    """``(field name, default)`` of a payload model, in declaration order (cached)."""
    plan = _FIELD_PLANS.get(model)
    if plan is None:
        out = []
        for name, f in model.model_fields.items():
            if f.is_required():
                default: Any = _REQUIRED
            elif f.default_factory is not None:
                default = f.default_factory()  # type: ignore[call-arg]
            else:
                default = f.default
            out.append((name, default))
        plan = _FIELD_PLANS[model] = tuple(out)
    return plan


def performed_key(payload: Payload) -> str | None:
    """The idempotency key an event records as performed (an observation, or a verdict that
    the effect was applied), else None. Stored in the indexed ``effect_key`` column: a key
    found there is never intended again (G2), whatever the run state still holds."""
    from ..history import EffectObserved, EffectReconciled

    if isinstance(payload, EffectObserved):
        return payload.key
    if isinstance(payload, EffectReconciled) and payload.verdict is Verdict.APPLIED:
        return payload.key
    return None


def encode(event: Event, sink: Sink | None = None) -> dict[str, Any]:
    """The row of one event: ``run_id, seq, type, step_id, epoch, at_ms, v, payload,
    effect_key``. Raises PayloadError when the payload is too large or not JSON data. With a
    ``sink``, a large payload is stored split (:func:`.chunks.split_text`): the chunks it
    refers to are added to ``sink``, to be written before the row.

    Fields equal to their default are left out of the stored JSON (decoding fills them back in
    from the same model), which keeps the history compact: a trivial step's one event carries
    ``{"attempt":1,"policy":"read","result":1,"step_id":"s1"}``.
    """
    p = event.payload
    values = p.__dict__
    try:
        data = {}
        for name, default in _field_plan(type(p)):
            v = values[name]
            if v is default or (type(v) is type(default) and v == default):
                continue
            kind = type(v)
            if kind is int or kind is bool or (kind is str and v.isascii()):
                data[name] = v  # already JSON data (what to_jsonable would return)
            else:
                data[name] = serde.to_jsonable(v, f"{event.type}.{name}")
        text = _scrubbed(serde.dumps(data))
    except (NotSerializable, ValueError, TypeError) as exc:
        raise PayloadError(
            event.run_id, event.step_id, f"{event.type} payload is not serializable: {exc}"
        ) from None
    size = len(text) if text.isascii() else len(text.encode())
    if size > serde.MAX_PAYLOAD_BYTES:
        raise PayloadError(
            event.run_id,
            event.step_id,
            f"{event.type} payload is {size} bytes, over the "
            f"{serde.MAX_PAYLOAD_BYTES}-byte limit; store large values as an artifact",
        )
    if sink is not None and size >= chunks.CHUNK_MIN_BYTES:
        text = chunks.split_text(text, sink)
    return {
        "run_id": event.run_id,
        "seq": event.seq,
        "type": event.type,
        "step_id": values.get("step_id"),
        "epoch": event.epoch,
        "at_ms": event.at_ms,
        "v": EVENT_SCHEMA_VERSION,
        "payload": text,
        "effect_key": performed_key(p),
    }


def artifact_refs(texts: Iterable[str], events: Iterable[Event] = ()) -> dict[str, int]:
    """``{sha256: size}`` of every artifact that stored ``texts`` (payloads, chunks, inbox
    bodies) refer to as an offloaded value, and that ``events`` record as created."""
    from ..history import ArtifactCreated

    found = {h: int(n) for t in texts if '"blob"' in t for h, n in _BLOB_RE.findall(t)}
    for e in events:
        if isinstance(e.payload, ArtifactCreated):
            found[e.payload.sha256] = e.payload.size
    return found


def _load(text: Any, fetch: Fetch | None) -> Any:
    """A stored JSON text, parsed, its chunks joined through ``fetch`` (ValueError when it
    refers to chunks and there is no ``fetch``)."""
    if chunks.is_split(text):
        if fetch is None:
            raise ValueError("a split text read without its chunks")
        return chunks.join(text, fetch)
    return serde.loads(text)


def decode(run_id: str, row: tuple[Any, ...], fetch: Fetch | None = None) -> Event:
    """An event from ``(seq, type, epoch, at_ms, v, payload)``; CorruptRecordError if bad.
    ``fetch`` reads the chunks of a split payload.

    Whatever is wrong with the row (an unknown or newer schema version, an unknown type, a
    payload that is not JSON or does not match its type, bad column types), the error names
    the run and the seq; nothing is repaired or rewritten.
    """
    from pydantic import ValidationError

    from ..history import EVENT_TYPES, Event

    seq, etype, epoch, at_ms, v, payload = row

    def corrupt(problem: str) -> CorruptRecordError:
        return CorruptRecordError(f"run {run_id!r} seq {seq}: {problem}", run_id=run_id, seq=seq)

    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise corrupt(f"unknown event schema version {v!r}")
    if v > EVENT_SCHEMA_VERSION:
        raise corrupt(
            f"event schema version {v} is newer than this torpor understands "
            f"({EVENT_SCHEMA_VERSION}); upgrade torpor (nothing was changed)"
        )
    model = EVENT_TYPES.get(etype) if isinstance(etype, str) else None
    if model is None:
        raise corrupt(f"unknown event type {etype!r}")
    try:
        data = _load(payload, fetch)
    except (ValueError, TypeError) as exc:
        raise corrupt(f"corrupt {etype} payload: not JSON ({exc})") from exc
    try:
        body = model.model_validate(data)
        return Event(run_id=run_id, seq=seq, type=etype, payload=body, at_ms=at_ms, epoch=epoch)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "payload"
        raise corrupt(f"corrupt {etype} row: {loc}: {err['msg']}") from exc


#: Separates a checkpoint's text from its digest (a newline cannot occur in compact JSON, nor
#: in the root of a split checkpoint).
DIGEST_MARK = "\n#sha256/128:"


def _digest(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def checkpoint_text(state: RunState, sink: Sink | None = None) -> str:
    """The engine checkpoint as stored: the state's JSON without the fields that hold their
    defaults (loading validates it back to the same state), then :data:`DIGEST_MARK` and the
    first 128 bits of its sha256 — a checkpoint edited by hand, or damaged, no longer matches
    and is not trusted (the state is folded from the history instead). A run's checkpoint is
    rewritten at its boundaries, so its size is paid per boundary: a running trivial run's is
    ~250 bytes instead of ~750. The user checkpoint's state is not copied into it: it is the
    state of the ``checkpoint_saved`` event at ``user_checkpoint_seq``, which loading reads back
    (one row by its key). With a ``sink``, a large checkpoint is split into content-addressed
    chunks (:mod:`.chunks`) and the digest covers the root, which names every chunk by hash."""
    if state.user_checkpoint_seq:
        body = state.model_dump_json(exclude_defaults=True, exclude={"user_state"})
    else:
        body = state.model_dump_json(exclude_defaults=True)
    body = _scrubbed(body)
    if sink is not None and len(body) >= chunks.CHUNK_MIN_BYTES:
        body = chunks.split_text(body, sink)
    return body + DIGEST_MARK + _digest(body)


def checkpoint_problem(
    run_id: str,
    ckpt_seq: Any,
    text: Any,
    last_seq: int,
    fetch: Fetch | None = None,
    user_state: Callable[[int], Any] | None = None,
) -> str | None:
    """Why the stored checkpoint cannot be trusted, or None when it can (or there is none)."""
    if not text:
        return None
    return _checkpoint(run_id, ckpt_seq, text, last_seq, fetch, user_state)[1]


def checkpoint_state(
    run_id: str,
    ckpt_seq: Any,
    text: Any,
    last_seq: int,
    fetch: Fetch | None = None,
    user_state: Callable[[int], Any] | None = None,
) -> RunState | None:
    """The engine checkpoint, or None when there is none or it cannot be trusted (not JSON,
    its digest does not match, not a state of this run, a seq beyond the history or other than
    the run row's, a chunk missing or altered, the user checkpoint it refers to unreadable; see
    :func:`checkpoint_problem`). ``user_state(seq)``: the state recorded by the
    ``checkpoint_saved`` event at ``seq`` (see :func:`checkpoint_text`). Checkpoints written
    before digests were (any without :data:`DIGEST_MARK`) are trusted as they were.

    Checkpoints written before performed effects left the state (store schema 1) still list
    them as ``observed``/``applied``: they are dropped here, which is exactly what today's fold
    would have kept (their keys stay known through the ``effect_key`` index)."""
    if not text:
        return None
    return _checkpoint(run_id, ckpt_seq, text, last_seq, fetch, user_state)[0]


def _checkpoint(
    run_id: str,
    ckpt_seq: Any,
    text: Any,
    last_seq: int,
    fetch: Fetch | None,
    user_state: Callable[[int], Any] | None,
) -> tuple[RunState | None, str | None]:
    from ..history import RunState

    if not isinstance(ckpt_seq, int) or not 0 < ckpt_seq <= last_seq:
        return None, f"the run row's checkpoint seq {ckpt_seq!r} is not within its history"
    body, mark, digest = str(text).partition(DIGEST_MARK)
    if mark and digest != _digest(body):
        return None, "the checkpoint does not match its digest (edited by hand, or damaged)"
    try:
        if chunks.is_split(body):
            state = RunState.model_validate(_load(body, fetch))
        else:
            state = RunState.model_validate_json(body)
    except (ValueError, TypeError, CorruptRecordError):  # pydantic's is a ValueError
        return None, "the checkpoint is not a run state (or a chunk of it is missing or altered)"
    if state.user_state is None and state.user_checkpoint_seq and user_state is not None:
        try:
            state.user_state = user_state(state.user_checkpoint_seq)
        except (ValueError, TypeError, CorruptRecordError):  # pydantic's is a ValueError
            return None, f"the user checkpoint at seq {state.user_checkpoint_seq} cannot be read"
    if state.run_id != run_id or state.seq != ckpt_seq:
        return None, (
            f"the checkpoint is of run {state.run_id!r} at seq {state.seq}, the run row says "
            f"{run_id!r} at seq {ckpt_seq}"
        )
    if any(e.status in ("observed", "applied") for e in state.effects.values()):
        state.effects = {
            k: e for k, e in state.effects.items() if e.status not in ("observed", "applied")
        }
    return state, None


def completion(
    run_id: str, step_id: str, payload: str, seq: int, fetch: Fetch | None = None
) -> Completion:
    """A step's completion from its ``step_completed`` payload; CorruptRecordError if bad.
    ``fetch`` reads the chunks of a split payload."""
    try:
        data = _load(payload, fetch)
        return Completion(
            step_id, data.get("result"), data.get("policy"), data.get("input_hash"), seq
        )
    except (ValueError, AttributeError, TypeError) as exc:
        raise CorruptRecordError(
            f"run {run_id!r} seq {seq}: corrupt step_completed payload of step {step_id!r}",
            run_id=run_id,
            seq=seq,
        ) from exc


def message_text(run_id: str, kind: str, body: dict[str, Any]) -> str:
    """An inbox message body as stored. PayloadError when it is not JSON data or too large
    to be recorded later (the event that records it adds its own fields:
    :data:`~torpor.store.base.INBOX_HEADROOM_BYTES` are left for them)."""
    try:
        text = _scrubbed(serde.dumps(serde.to_jsonable(body)))
    except NotSerializable as exc:
        raise PayloadError(run_id, None, f"{kind} message is not serializable: {exc}") from None
    size = len(text.encode())
    limit = serde.MAX_PAYLOAD_BYTES - INBOX_HEADROOM_BYTES
    if size > limit:
        raise PayloadError(
            run_id,
            None,
            f"{kind} message is {size} bytes, over the {limit}-byte limit for messages; "
            "send a reference (an artifact hash)",
        )
    return text


def message_body(text: str) -> dict[str, Any]:
    """An inbox body as stored. One that is not a JSON object reads as ``{}``: the executor
    records it as a warning naming the message, so one bad message never blocks the run."""
    try:
        data = serde.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
