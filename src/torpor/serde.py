"""Canonical JSON and hashing: the one way torpor turns values into bytes.

Recorded values (step results, effect results, user checkpoints, signal payloads) must be JSON
values: ``None``, ``bool``, ``int``, ``float``, ``str``, lists and string-keyed dicts. Pydantic
models and dataclasses are accepted and stored as their JSON form (they come back as dicts).
Anything else is refused *when it is recorded* (guarantee G10), not discovered at resume.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from typing import Any

from pydantic import BaseModel

from .errors import NotSerializable

#: Largest encoded payload of one event, in bytes (``TORPOR_MAX_PAYLOAD_BYTES``, default 1 MiB).
#: Larger values belong in an artifact.
MAX_PAYLOAD_BYTES = int(os.environ.get("TORPOR_MAX_PAYLOAD_BYTES") or 1 << 20)


#: Deepest nesting of lists/dicts accepted in a recorded value (a self-referencing value hits it).
MAX_DEPTH = 200


def to_jsonable(value: Any, path: str = "$", _depth: int = 0) -> Any:
    """Return ``value`` as plain JSON data, or raise :class:`NotSerializable` naming the path."""
    if _depth > MAX_DEPTH:
        raise NotSerializable(
            f"{path}: nested deeper than {MAX_DEPTH} levels (or refers to itself)"
        )
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        _check_text(value, path)
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotSerializable(f"{path}: non-finite float {value!r} is not JSON")
        return value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value), path, _depth + 1)
    if isinstance(value, list | tuple):
        return [to_jsonable(v, f"{path}[{i}]", _depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise NotSerializable(f"{path}: dict key {k!r} is not a string")
            _check_text(k, f"{path} key")
            out[k] = to_jsonable(v, f"{path}.{k}", _depth + 1)
        return out
    raise NotSerializable(f"{path}: value of type {type(value).__name__} is not JSON-serializable")


def _check_text(text: str, path: str) -> None:
    """Refuse text that has no UTF-8 form (lone surrogates): it could not be stored."""
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError as exc:
            raise NotSerializable(
                f"{path}: string has no UTF-8 form ({exc.reason} at index {exc.start})"
            ) from None


_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def _refuse(o: Any) -> Any:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


# The C encoder that JSONEncoder.encode builds anew on every call, built once (the same
# arguments, so the same text): half the cost of encoding a small event, paid per step. No
# circular-reference markers: what is encoded went through to_jsonable, which refuses cycles.
_C_ENCODE = (
    json.encoder.c_make_encoder(  # type: ignore[attr-defined]
        None, _refuse, json.encoder.encode_basestring, None, ":", ",", True, False, False
    )
    if getattr(json.encoder, "c_make_encoder", None) is not None
    else None
)


def dumps(value: Any) -> str:
    """Canonical JSON text (sorted keys, no whitespace) of an already-jsonable value."""
    if _C_ENCODE is not None:
        return "".join(_C_ENCODE(value, 0))
    return _ENCODER.encode(value)


def loads(text: str | bytes) -> Any:
    """Parse JSON text."""
    return json.loads(text)


def sha256_hex(data: bytes | str) -> str:
    """Hex sha256 of bytes (str is UTF-8 encoded first)."""
    if isinstance(data, str):
        data = data.encode()
    return hashlib.sha256(data).hexdigest()


def hash_value(value: Any) -> str:
    """sha256 of the canonical JSON of ``value``: the input hash of a compute step."""
    return sha256_hex(dumps(to_jsonable(value)))
