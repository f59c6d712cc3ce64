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

from typing import Any

from . import serde
from .artifacts import ArtifactStore
from .store.base import INBOX_HEADROOM_BYTES

_KEYS = frozenset({serde.TAG, "sha256", "size"})


def is_ref(data: Any) -> bool:
    """Whether ``data`` (recorded JSON) is a reference to an offloaded value."""
    return (
        data.__class__ is dict
        and data.get(serde.TAG) == "blob"
        and data.keys() == _KEYS
        and isinstance(data["sha256"], str)
    )


def offload(data: Any, text: str, size: int, artifacts: ArtifactStore) -> Any:
    """``data`` itself when its canonical JSON ``text`` (``size`` UTF-8 bytes) fits inline,
    else the reference to it, written to ``artifacts`` first."""
    if size <= serde.INLINE_VALUE_BYTES:
        return data
    digest = artifacts.put(text.encode())
    return {serde.TAG: "blob", "sha256": digest, "size": size}


def offload_jsonable(data: Any, artifacts_url: str) -> Any:
    """:func:`offload` for JSON data not yet measured (a signal payload sent by a client). A
    payload over the hard maximum for messages is left as it is, for the store to refuse it
    (:func:`torpor.store.codec.message_text`)."""
    if data is None or isinstance(data, bool | int | float):
        return data
    text = serde.dumps(data)
    size = len(text) if text.isascii() else len(text.encode())
    if size <= serde.INLINE_VALUE_BYTES or size > serde.MAX_PAYLOAD_BYTES - INBOX_HEADROOM_BYTES:
        return data
    return offload(data, text, size, ArtifactStore(artifacts_url))


def load(data: Any, artifacts: ArtifactStore) -> Any:
    """The JSON data a reference stands for (hash-checked: TorporError when the blob is
    missing, CorruptRecordError when it was altered); anything else as itself."""
    if not is_ref(data):
        return data
    return serde.loads(artifacts.get(data["sha256"]))


__all__ = ["is_ref", "load", "offload", "offload_jsonable"]
