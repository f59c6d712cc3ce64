"""Values too large to record inline: stored in the artifact store by hash, recorded as a
reference, read back hash-checked.

A step result, an effect result or a signal payload whose canonical JSON is larger than
:data:`torpor.serde.INLINE_VALUE_BYTES` is written to the artifact store (content-addressed, so
the same value is stored once) and the history records ``{"$torpor": "blob", "sha256": hex,
"size": bytes}`` in its place. Replay reads the blob back and checks its hash: a blob that is
missing or altered is an error naming the run and the step, never a different value. A user's
own dict with a ``"$torpor"`` key is recorded escaped (:func:`torpor.serde.encode`), so it is
never read as a reference. Garbage collection keeps every blob a retained run refers to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import serde
from .artifacts import ArtifactStore
from .errors import TorporError
from .store.base import INBOX_HEADROOM_BYTES, Store

if TYPE_CHECKING:
    from .history import Event

_KEYS = frozenset({serde.TAG, "sha256", "size"})

#: ``pin(sha256, size)``: reference a blob before it is written (see :func:`offload`).
Pin = Callable[[str, int], None]


def is_ref(data: Any) -> bool:
    """Whether ``data`` (recorded JSON) is a reference to an offloaded value."""
    return (
        data.__class__ is dict
        and data.get(serde.TAG) == "blob"
        and data.keys() == _KEYS
        and isinstance(data["sha256"], str)
    )


def offload(
    data: Any, text: str, size: int, artifacts: ArtifactStore, pin: Pin | None = None
) -> Any:
    """``data`` itself when its canonical JSON ``text`` (``size`` UTF-8 bytes) fits inline,
    else the reference to it, written to ``artifacts`` first. ``pin(sha256, size)`` is called
    before the blob is written (the run's reference recorded first:
    :meth:`~torpor.store.maintenance.MaintenanceStore.pin_blob`), so garbage collection never
    deletes it between the write and the history that records it."""
    if size <= serde.INLINE_VALUE_BYTES:
        return data
    raw = text.encode()
    if pin is not None:
        pin(serde.sha256_hex(raw), size)
    digest = artifacts.put(raw)
    return {serde.TAG: "blob", "sha256": digest, "size": size}


def offload_jsonable(data: Any, artifacts_url: str, pin: Pin | None = None) -> Any:
    """:func:`offload` for JSON data not yet measured (a signal payload sent by a client). A
    payload over the hard maximum for messages is left as it is, for the store to refuse it
    (:func:`torpor.store.codec.message_text`)."""
    if data is None or isinstance(data, bool | int | float):
        return data
    text = serde.dumps(data)
    size = len(text) if text.isascii() else len(text.encode())
    if size <= serde.INLINE_VALUE_BYTES or size > serde.MAX_PAYLOAD_BYTES - INBOX_HEADROOM_BYTES:
        return data
    return offload(data, text, size, ArtifactStore(artifacts_url), pin)


def load(data: Any, artifacts: ArtifactStore) -> Any:
    """The JSON data a reference stands for (hash-checked: TorporError when the blob is
    missing, CorruptRecordError when it was altered); anything else as itself."""
    if not is_ref(data):
        return data
    return serde.loads(artifacts.get(data["sha256"]))


@dataclass(frozen=True)
class OffloadedValue:
    """A value a run recorded by reference (too large to keep inline): ``sha256`` and ``size``
    (bytes of its JSON) in the artifact store, the event ``seq`` and ``type`` that records it,
    ``field`` of that event (``result``, ``payload``, ``input`` …) and the ``step_id`` that
    produced it (None for a signal or the run's input)."""

    sha256: str
    size: int
    seq: int
    type: str
    field: str
    step_id: str | None


def offloaded(events: Iterable[Event]) -> list[OffloadedValue]:
    """Every offloaded value ``events`` record (a step's or an effect's result, a signal's
    payload …), in history order; ``torpor artifacts`` and ``torpor show`` list them."""
    out = []
    for ev in events:
        for name, value in ev.payload:
            if is_ref(value):
                out.append(
                    OffloadedValue(
                        value["sha256"], int(value["size"]), ev.seq, ev.type, name, ev.step_id
                    )
                )
    return out


def check_references(
    store: Store, artifacts: ArtifactStore, *, deep: bool = False
) -> list[tuple[bool, str, str]]:
    """``(ok, what, detail)`` for every reference of every run in ``store`` (its chunks in
    the database, its artifacts and offloaded values in ``artifacts``) that is missing —
    or, with ``deep``, whose bytes do not hash to its name — then one line counting them
    (``torpor doctor``, ``--deep``). A run archived and deleted has no references left."""
    refs = store.run_references()
    bad: list[tuple[bool, str, str]] = []
    present: set[str] | None = None
    if not deep:
        present = _stored(artifacts)
    for run_id, kind, sha, _size, in_db in refs:
        what = f"run {run_id}"
        if kind == "chunk":
            why = None if in_db else "missing"
            if why is None and deep:
                why = store.chunk_problem(sha)
            if why:
                bad.append((False, what, f"chunk sha256:{sha} {why} (in the database)"))
            continue
        if present is not None:
            if sha not in present:
                bad.append((False, what, f"artifact sha256:{sha} is missing from {artifacts.url}"))
            continue
        try:
            artifacts.get(sha)
        except TorporError as exc:
            bad.append((False, what, str(exc)))
    how = "hash-checked" if deep else "present (--deep: hash-check them)"
    summary = f"{len(refs)} references of runs, {len(bad)} with problems; {how}"
    return [*bad, (not bad, "stored values", summary)]


def _stored(artifacts: ArtifactStore) -> set[str]:
    """The sha256 of every blob in ``artifacts`` (one listing, not one look-up per blob)."""
    fs, base = artifacts.fs, f"{artifacts.root}/sha256"
    if not fs.exists(base):
        return set()
    return {p.rsplit("/", 1)[-1] for p in fs.find(base) if not p.endswith(".tmp")}


__all__ = [
    "OffloadedValue",
    "check_references",
    "is_ref",
    "load",
    "offload",
    "offload_jsonable",
    "offloaded",
]
