"""Canonical JSON, hashing, and the typed encoding of recorded values: the one way torpor turns
values into bytes and back.

Two forms:

- :func:`encode` / :func:`decode` — a *recorded value* (a step's or an effect's result, a user
  checkpoint's state, a draw) in a self-describing typed encoding, so it comes back as it went
  in, type included, on every replay and every backend. Plain JSON values (``None``, ``bool``,
  ``int``, finite ``float``, ``str``, lists and string-keyed dicts of them) are stored as
  themselves, exactly as before the encoding existed; every other supported value is a *tagged*
  object ``{"$torpor": TAG, "v": ...}``:

  ========================  ===============================================================
  value                     stored as
  ========================  ===============================================================
  tz-aware ``datetime``     ``{"$torpor": "datetime", "v": ISO 8601}`` (+ ``"tz"``: a zoneinfo key)
  ``date``                  ``{"$torpor": "date", "v": "2026-12-01"}``
  ``Decimal``, ``UUID``     ``{"$torpor": "decimal" | "uuid", "v": str(value)}``
  ``bytes``                 ``{"$torpor": "bytes", "v": base64}``
  ``tuple``, ``set``,       ``{"$torpor": "tuple" | "set" | "frozenset", "v": [...]}`` (a set's
  ``frozenset``             items in a canonical order)
  a dataclass, a pydantic   ``{"$torpor": "module:QualName" | a registered name, "v": fields /
  model, an ``Enum``        model JSON / the member's value / the items}``
  member, a NamedTuple
  a dict with a             ``{"$torpor": "dict", "v": {...}}`` (so it is never read as a tag)
  ``"$torpor"`` key
  ========================  ===============================================================

  Classes are found again by their import path (the module must be imported in the resuming
  process) or by a name given with :func:`register_type` (which also takes the old names of a
  class that moved). Anything else — a naive ``datetime``, a class defined inside a function,
  an arbitrary object — is refused *when it is recorded* (G10), naming the path and the type.
- :func:`to_jsonable` — the plain JSON form of an event payload's fields (pydantic models as
  their JSON); no tags.

:func:`hash_value` (a compute step's input hash) hashes the typed form, except that the values
torpor accepted before the typed encoding (tuples, dataclasses, pydantic models, int and str
enums) hash as they did then: recorded compute steps are still reused after an upgrade.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import hashlib
import json
import math
import os
import sys
import uuid
from collections.abc import Callable, Iterable
from datetime import date, datetime
from decimal import Decimal
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from .errors import NotDecodable, NotSerializable, TorporError

#: The hard maximum, in bytes of canonical JSON, of one recorded value or event payload
#: (``TORPOR_MAX_PAYLOAD_BYTES``, default 16 MiB): a step result larger than this ends the run
#: ``failed`` naming the step, the size and this limit. Larger values belong in an artifact.
MAX_PAYLOAD_BYTES = int(os.environ.get("TORPOR_MAX_PAYLOAD_BYTES") or 16 << 20)

#: A step result, effect result or signal payload larger than this (bytes of canonical JSON;
#: ``TORPOR_INLINE_VALUE_BYTES``, default 256 KiB) is stored in the artifact store by its
#: sha256 and the history records the reference (:mod:`torpor.blobs`); replay reads it back,
#: hash-checked.
INLINE_VALUE_BYTES = int(os.environ.get("TORPOR_INLINE_VALUE_BYTES") or 256 << 10)

#: A user checkpoint state larger than this (bytes of canonical JSON;
#: ``TORPOR_STATE_WARN_BYTES``, default 8 MiB) is recorded with a warning, once per run: the
#: run then ends ``succeeded_with_warnings``, and ``torpor show`` says why.
STATE_WARN_BYTES = int(os.environ.get("TORPOR_STATE_WARN_BYTES") or 8 << 20)


#: Deepest nesting of lists/dicts accepted in a recorded value (a self-referencing value hits it).
MAX_DEPTH = 200


def _is_model(value: Any) -> bool:
    """Whether ``value`` is a pydantic model, without importing pydantic: when nothing has
    imported it, no value can be one (a read command stays light, issue 48)."""
    pyd = sys.modules.get("pydantic")
    return pyd is not None and isinstance(value, pyd.BaseModel)


def _is_model_class(c: type) -> bool:
    """Whether the class ``c`` is a pydantic model (see :func:`_is_model`)."""
    pyd = sys.modules.get("pydantic")
    return pyd is not None and issubclass(c, pyd.BaseModel)


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
    if _is_model(value):
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
    """sha256 of the canonical JSON of ``value``'s typed form: the input hash of a compute
    step (see the module docstring: values accepted before the typed encoding hash as they did
    then). NotSerializable naming the path when ``value`` cannot be recorded."""
    return sha256_hex(dumps(_enc(value, "$", 0, True)))


# ------------------------------------------------------------------ the typed encoding

#: The key of a tagged object (see the module docstring).
TAG = "$torpor"
#: Tags of the built-in kinds; a class is tagged with its import path or registered name.
BUILTIN_TAGS = frozenset(
    {"datetime", "date", "decimal", "uuid", "bytes", "tuple", "set", "frozenset", "dict"}
)
_TAG_KEYS = frozenset({TAG, "v", "tz"})

#: Registered names -> class, and class -> the name it is recorded under.
_BY_NAME: dict[str, type] = {}
_NAME_OF: dict[type, str] = {}
#: Classes whose import path was checked to find them again: class -> "module:QualName".
_PATHS: dict[type, str] = {}

C = TypeVar("C", bound=type)


def register_type(
    cls: C | None = None, *, name: str | None = None, aliases: Iterable[str] = ()
) -> Any:
    """Record instances of ``cls`` (a dataclass, pydantic model, Enum or NamedTuple class)
    under ``name`` instead of its import path ``module:QualName``, and read records made under
    ``name`` or any of ``aliases`` back as ``cls``. Usable as a decorator
    (``@torpor.register_type(name="billing.Invoice")``) or a call. A class that moved or was
    renamed is found again by registering it with its old recorded name as an alias::

        torpor.register_type(Bill, aliases=["billing.models:Invoice"])

    Raises TorporError for a reserved name (a built-in tag), a name taken by another class, or
    a class of another kind."""

    def deco(c: C) -> C:
        if not isinstance(c, type) or not _recordable_class(c):
            raise TorporError(
                f"register_type: {c!r} is not a dataclass, pydantic model, Enum or NamedTuple"
            )
        primary = name or f"{c.__module__}:{c.__qualname__}"
        for n in (primary, *aliases):
            if not isinstance(n, str) or not n or n in BUILTIN_TAGS:
                raise TorporError(f"register_type: {n!r} is reserved or empty; choose another")
            other = _BY_NAME.get(n)
            if other is not None and other is not c:
                raise TorporError(f"register_type: {n!r} is already registered for {other!r}")
        for n in (primary, *aliases):
            _BY_NAME[n] = c
        _NAME_OF[c] = primary
        return c

    return deco(cls) if cls is not None else deco


def _recordable_class(c: type) -> bool:
    return (
        issubclass(c, enum.Enum)
        or _is_model_class(c)
        or dataclasses.is_dataclass(c)
        or (issubclass(c, tuple) and hasattr(c, "_fields"))
    )


def encode(value: Any, path: str = "$") -> Any:
    """``value`` as JSON data in the typed encoding (see the module docstring): plain JSON as
    itself, other supported values tagged. NotSerializable naming the path and the type of
    the first part that cannot be recorded."""
    return _enc(value, path, 0, False)


def _enc(v: Any, path: str, depth: int, compat: bool) -> Any:
    """The typed form of ``v``; ``compat``: the form of :func:`hash_value` (see there)."""
    if depth > MAX_DEPTH:
        raise NotSerializable(
            f"{path}: nested deeper than {MAX_DEPTH} levels (or refers to itself)"
        )
    t = v.__class__
    if v is None or t is bool or t is int:
        return v
    if t is str:
        _check_text(v, path)
        return v
    if t is float:
        if not math.isfinite(v):
            raise NotSerializable(f"{path}: non-finite float {v!r} is not JSON")
        return v
    if t is list:
        return [_enc(x, f"{path}[{i}]", depth + 1, compat) for i, x in enumerate(v)]
    if t is dict:
        return _enc_dict(v, path, depth, compat)
    return _enc_other(v, path, depth, compat)


def _enc_dict(v: dict[Any, Any], path: str, depth: int, compat: bool) -> Any:
    out: dict[str, Any] = {}
    for k, x in v.items():
        if not isinstance(k, str):
            raise NotSerializable(f"{path}: dict key {k!r} is not a string")
        _check_text(k, f"{path} key")
        out[k] = _enc(x, f"{path}.{k}", depth + 1, compat)
    if TAG in out and not compat:
        return {TAG: "dict", "v": out}  # a user's own "$torpor" key: never read as a tag
    return out


def _tagged(tag: str, v: Any) -> dict[str, Any]:
    return {TAG: tag, "v": v}


def _enc_other(v: Any, path: str, depth: int, compat: bool) -> Any:
    t = v.__class__
    d = depth + 1
    if isinstance(v, enum.Enum):
        if compat and isinstance(v, int | str):
            return _enc_plain_subclass(v, path)  # as hashed before: its int/str value
        return _tagged(_class_name(t, path), _enc(v.value, f"{path}.value", d, compat))
    if isinstance(v, bool | int | str | float):
        return _enc_plain_subclass(v, path)  # (an int/str subclass: stored as before)
    if t is datetime:
        if v.utcoffset() is None:
            raise NotSerializable(
                f"{path}: naive datetime {v.isoformat()} (no tzinfo) cannot be recorded: it means "
                "a different instant on another machine; attach a timezone (e.g. tzinfo=UTC)"
            )
        out = _tagged("datetime", v.isoformat())
        if isinstance(v.tzinfo, ZoneInfo) and v.tzinfo.key:
            out["tz"] = v.tzinfo.key
        return out
    if t is date:
        return _tagged("date", v.isoformat())
    if t is Decimal:
        return _tagged("decimal", str(v))
    if t is uuid.UUID:
        return _tagged("uuid", str(v))
    if t is bytes:
        return _tagged("bytes", base64.b64encode(v).decode("ascii"))
    if _is_model(v):
        try:
            data = v.model_dump(mode="json")
        except Exception as exc:
            raise NotSerializable(f"{path}: {t.__qualname__} cannot be dumped: {exc}") from None
        return data if compat else _tagged(_class_name(t, path), data)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        if compat:  # as hashed before: dataclasses.asdict, then plain JSON
            return _enc(dataclasses.asdict(v), path, d, compat)
        fields = {
            f.name: _enc(getattr(v, f.name), f"{path}.{f.name}", d, compat)
            for f in dataclasses.fields(v)
            if f.init
        }
        return _tagged(_class_name(t, path), fields)
    if isinstance(v, tuple):
        items = [_enc(x, f"{path}[{i}]", d, compat) for i, x in enumerate(v)]
        if compat:
            return items  # as hashed before: a list
        if t is tuple:
            return _tagged("tuple", items)
        if hasattr(t, "_fields"):
            return _tagged(_class_name(t, path), items)
    if t is set or t is frozenset:
        items = [_enc(x, f"{path}[*]", d, compat) for x in v]
        items.sort(key=dumps)  # canonical: a set's iteration order varies between processes
        return _tagged("set" if t is set else "frozenset", items)
    if isinstance(v, list):
        return [_enc(x, f"{path}[{i}]", d, compat) for i, x in enumerate(v)]
    if isinstance(v, dict):
        return _enc_dict(v, path, depth, compat)
    raise NotSerializable(
        f"{path}: a value of type {t.__module__}.{t.__qualname__} cannot be recorded (JSON data, "
        "tz-aware datetime, date, Decimal, UUID, bytes, tuple, set, frozenset, dataclasses, "
        "pydantic models, Enum members and NamedTuples can; store large or opaque data with "
        "run.artifact())"
    )


def _enc_plain_subclass(v: Any, path: str) -> Any:
    """An int/str/float subclass (not an enum member): its plain value, as before."""
    if isinstance(v, str):
        _check_text(v, path)
    elif isinstance(v, float) and not math.isfinite(v):
        raise NotSerializable(f"{path}: non-finite float {v!r} is not JSON")
    return v


def _class_name(cls: type, path: str) -> str:
    """The name instances of ``cls`` are recorded under: its registered name, else its import
    path, checked to find the class again (NotSerializable otherwise)."""
    name = _NAME_OF.get(cls) or _PATHS.get(cls)
    if name is not None:
        return name
    qual = cls.__qualname__
    if "<locals>" in qual:
        raise NotSerializable(
            f"{path}: class {qual} is defined inside a function: it could not be found again "
            "when the run resumes; define it at module level, or name it with "
            "torpor.register_type"
        )
    name = f"{cls.__module__}:{qual}"
    if _find(name) is not cls:
        raise NotSerializable(
            f"{path}: class {qual} cannot be found again by its import path {name!r}; name it "
            "with torpor.register_type"
        )
    _PATHS[cls] = name
    return name


def _find(name: str) -> Any:
    """The class recorded as ``name``: registered, or ``module:QualName`` in an imported
    module (a record never imports a module by itself). None when not found."""
    cls = _BY_NAME.get(name)
    if cls is not None:
        return cls
    module, _, qual = name.partition(":")
    obj: Any = sys.modules.get(module)
    if obj is None or not qual:
        return None
    for part in qual.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def decode(data: Any, path: str = "$") -> Any:
    """The value ``data`` (the typed encoding, parsed JSON) stands for; plain JSON as itself.
    NotDecodable naming the path when a recorded class cannot be found or refuses its
    recorded fields."""
    t = data.__class__
    if t is list:
        return [decode(x, f"{path}[{i}]") for i, x in enumerate(data)]
    if t is dict:
        tag = data.get(TAG)
        if tag.__class__ is str and "v" in data and data.keys() <= _TAG_KEYS:
            return _dec_tagged(tag, data, path)
        return {k: decode(x, f"{path}.{k}") for k, x in data.items()}
    return data


_BUILTIN_DECODERS: dict[str, Callable[[Any, dict[str, Any], str], Any]] = {
    "datetime": lambda v, d, p: _dec_datetime(v, d.get("tz")),
    "date": lambda v, d, p: date.fromisoformat(v),
    "decimal": lambda v, d, p: Decimal(v),
    "uuid": lambda v, d, p: uuid.UUID(v),
    "bytes": lambda v, d, p: base64.b64decode(v, validate=True),
    "tuple": lambda v, d, p: tuple(decode(x, f"{p}[{i}]") for i, x in enumerate(v)),
    "set": lambda v, d, p: {decode(x, f"{p}[*]") for x in v},
    "frozenset": lambda v, d, p: frozenset(decode(x, f"{p}[*]") for x in v),
    "dict": lambda v, d, p: {k: decode(x, f"{p}.{k}") for k, x in v.items()},
}


def _dec_datetime(text: str, tz: str | None) -> datetime:
    dt = datetime.fromisoformat(text)
    return dt.astimezone(ZoneInfo(tz)) if tz else dt


def _dec_tagged(tag: str, data: dict[str, Any], path: str) -> Any:
    v = data["v"]
    builtin = _BUILTIN_DECODERS.get(tag)
    try:
        if builtin is not None:
            return builtin(v, data, path)
        return _dec_class(tag, v, path)
    except NotDecodable:
        raise
    except (ValueError, TypeError, AttributeError, KeyError) as exc:  # pydantic's is a ValueError
        raise NotDecodable(
            f"{path}: the recorded {tag!r} value cannot be read back ({type(exc).__name__}: "
            f"{exc}); if its class changed, keep it able to take the recorded fields"
        ) from None


def _dec_class(tag: str, v: Any, path: str) -> Any:
    cls = _find(tag)
    if not isinstance(cls, type) or not _recordable_class(cls):
        module = tag.partition(":")[0]
        hint = (
            f"module {module!r} is not imported in this process (import it, e.g. with "
            "--import), or "
            if ":" in tag and module not in sys.modules
            else ""
        )
        raise NotDecodable(
            f"{path}: recorded class {tag!r} cannot be found (moved or renamed?): {hint}"
            f"register the class under its recorded name: "
            f"torpor.register_type(TheClass, aliases=[{tag!r}])"
        )
    if issubclass(cls, enum.Enum):
        return cls(decode(v, f"{path}.value"))
    if _is_model_class(cls):
        return cls.model_validate(v)  # type: ignore[attr-defined]  # a BaseModel subclass
    if issubclass(cls, tuple):
        return cls(*(decode(x, f"{path}[{i}]") for i, x in enumerate(v)))
    return cls(**{k: decode(x, f"{path}.{k}") for k, x in v.items()})
