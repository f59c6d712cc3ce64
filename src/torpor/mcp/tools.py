"""An MCP server's tool as a torpor tool: its JSON schema, its recovery policy, its reconcile.

The recovery policy (issue 41; the MCP specification, "Tool annotations": clients must treat
annotations as untrusted unless they come from a trusted server):

- a **trusted** server's ``readOnlyHint`` tool is a ``read`` (repeated freely after a crash);
  its ``idempotentHint`` tool whose input schema takes an ``idempotency_key`` gets the
  engine's key there (retried under the same key: the server deduplicates);
- every other tool is an ``effect``: intent recorded before the call, the observation
  after; a call whose answer was lost (a crash, a broken connection) is **reconciled** by the
  tool's ``reconcile`` — the user's, or a :class:`Lookup` of a tool the server offers — and
  without one the run is ``unresolved``: never called twice blindly;
- :class:`Override` changes any of it per tool, in code (policy, reconcile, lookup, timeout,
  retry, approval, secrets filled from providers).

A call's answer is the tool's ``structuredContent`` when it has one, else its text (parsed
when it is JSON). An answer with ``isError`` is an answer: the call happened once and was
observed, and what the planner sees is ``{"is_error": true, "error": <text>}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ..agents.models.base import ToolSpec
from ..agents.tools import ENGINE_PARAMS, Tool
from ..engine.attempts import Retry, Timeout
from ..engine.effects import Absent, Applied, EffectCall, Reconciliation, Unknown
from ..errors import (
    McpConnectionError,
    McpError,
    McpSessionLostError,
    ToolArgsError,
    TorporError,
    TransientError,
)
from ..history import Policy
from .connection import Connection, text_of

#: The servers whose session the current execution's run lost, its state not re-creatable
#: (set by :meth:`torpor.mcp.Toolset.prepare`; copied into an attempt's thread).
LOST: ContextVar[frozenset[str]] = ContextVar("torpor_mcp_lost", default=frozenset())

#: Retried on their own (a read), or after reconcile found them absent (an effect).
DEFAULT_RETRY = Retry(attempts=3, on=(McpConnectionError, TransientError))


@dataclass(frozen=True)
class Lookup:
    """Reconcile by asking the server: call its tool ``tool`` with ``args(call)`` (default
    ``{"idempotency_key": <the call's key>}``, the planner's when the tool takes one as an
    argument); ``found(answer)`` says whether the effect happened (default: the answer is
    not empty, not ``{"found": false}`` and not an error). Found: ``applied`` with the
    answer as the call's result; not found: ``absent``; the lookup itself failing:
    ``unknown`` (the run is ``unresolved``)."""

    tool: str
    args: Callable[[EffectCall], dict[str, Any]] | None = None
    found: Callable[[Any], bool] | None = None


_UNSET: Any = object()


@dataclass(frozen=True)
class Override:
    """Per-tool settings that win over what the server's listing implies: ``policy``
    (``"read"``, ``"compute"``, ``"effect"``), ``reconcile`` (a function of
    :class:`~torpor.engine.effects.EffectCall`) or ``lookup`` (a :class:`Lookup`, or a tool
    name), ``timeout`` (seconds or a :class:`~torpor.Timeout`), ``retry``
    (a :class:`~torpor.Retry` or None), ``requires_approval``, ``secrets`` (parameter ->
    provider: filled at call time, never shown to a model), ``idempotent`` (True: the server
    deduplicates by its ``idempotency_key`` argument, which the engine then fills; the
    default believes ``idempotentHint`` of a trusted server only)."""

    policy: str | None = None
    idempotent: bool | None = None
    reconcile: Callable[[EffectCall], Reconciliation] | None = None
    lookup: Lookup | str | None = None
    timeout: float | Timeout | None = None
    retry: Retry | None = _UNSET
    requires_approval: bool | Callable[[dict[str, Any]], bool] = False
    secrets: Mapping[str, Callable[[], str]] = field(default_factory=dict)


def answer(result: Mapping[str, Any]) -> Any:
    """What a ``CallToolResult`` (JSON data) means to the planner (see the module docstring)."""
    if result.get("isError"):
        return {"is_error": True, "error": text_of(result)[:4000]}
    if "structuredContent" in result:
        return result["structuredContent"]
    text = text_of(result)
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class McpCall:
    """The function of an MCP tool: send ``tools/call`` on the connection, return the answer."""

    connection: Connection
    tool: str

    def __call__(self, **kwargs: Any) -> Any:
        name = self.connection.server.name
        if name in LOST.get():
            raise McpSessionLostError(
                f"MCP server {name!r} keeps state per session, and the session this run began "
                "on is gone (a restart); that state cannot be re-created (no setup calls "
                "declared): the run cannot continue on this server (nothing was sent)"
            )
        return answer(self.connection.call(self.tool, kwargs))


@dataclass
class McpTool(Tool):
    """A tool listed by an MCP server (``listing``: its entry as the protocol spells it;
    ``keyed``: the engine fills its ``idempotency_key`` argument). Validation is by the
    tool's own JSON schema (jsonschema), not by type hints."""

    listing: dict[str, Any] = field(default_factory=dict)
    keyed: bool = False
    schema: dict[str, Any] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.check_policy()
        schema = dict(self.listing.get("inputSchema") or {"type": "object"})
        props = dict(schema.get("properties") or {})
        unknown = set(self.secrets) - set(props)
        if unknown:
            raise TorporError(f"tool {self.name!r}: secrets for unknown parameters {unknown}")
        hidden = set(self.secrets) | ({"idempotency_key"} if self.keyed else set())
        for p in hidden:
            props.pop(p, None)
        schema["properties"] = props
        if "required" in schema:
            schema["required"] = [r for r in schema["required"] if r not in hidden]
        schema.pop("title", None)
        self.schema = schema
        self.secret_fields = frozenset(
            p
            for p, s in props.items()
            if isinstance(s, dict) and (s.get("writeOnly") or s.get("x-secret"))
        )
        self.artifact_fields = frozenset(
            p for p, s in props.items() if isinstance(s, dict) and s.get("x-artifact")
        )
        self.engine_params = frozenset({"idempotency_key"} if self.keyed else ())
        if not self.description:
            self.description = str(self.listing.get("description") or "")

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.schema)

    def validate(self, args: Any) -> dict[str, Any]:
        """``args`` checked against the tool's input schema; ToolArgsError naming each
        problem (a planner's observation)."""
        import jsonschema  # (a dependency of the mcp SDK)

        if not isinstance(args, dict):
            raise ToolArgsError(self.name, f"arguments must be a JSON object, not {args!r}"[:300])
        v = jsonschema.validators.validator_for(self.schema)(self.schema)
        errors = sorted(v.iter_errors(args), key=lambda e: list(e.absolute_path))
        if errors:
            details = [
                {
                    "loc": ".".join(str(x) for x in e.absolute_path) or "(arguments)",
                    "msg": e.message[:300],
                    "type": str(e.validator),
                }
                for e in errors
            ]
            raise ToolArgsError(self.name, f"{len(details)} validation error(s)", details)
        extra = set(args) & (set(self.secrets) | set(self.engine_params) | set(ENGINE_PARAMS))
        if extra:
            raise ToolArgsError(self.name, f"arguments {sorted(extra)} are filled by torpor")
        return dict(args)

    def canonical(self, validated: dict[str, Any]) -> dict[str, Any]:
        return dict(validated)


def lookup_reconcile(
    connection: Connection, lookup: Lookup
) -> Callable[[EffectCall], Reconciliation]:
    """A reconcile that asks the server's ``lookup.tool`` (see :class:`Lookup`)."""

    def reconcile(call: EffectCall) -> Reconciliation:
        if lookup.args is not None:
            args = lookup.args(call)
        else:
            args = {"idempotency_key": call.kwargs.get("idempotency_key", call.idempotency_key)}
        try:
            res = connection.call(lookup.tool, args)
        except McpError as exc:
            return Unknown(f"lookup {lookup.tool} failed: {exc}")
        if res.get("isError"):
            return Unknown(f"lookup {lookup.tool} answered an error: {text_of(res)[:300]}")
        found = answer(res)
        hit = lookup.found(found) if lookup.found is not None else _found(found)
        return Applied(found) if hit else Absent()

    return reconcile


def _found(value: Any) -> bool:
    if isinstance(value, dict) and value.get("found") is False:
        return False
    if isinstance(value, dict) and set(value) == {"result"}:
        return _found(value["result"])
    return value not in (None, "", [], {}, False)


def build(
    connection: Connection, listing: dict[str, Any], name: str, override: Override | None
) -> McpTool:
    """The torpor tool for one listed tool of ``connection``'s server (see the module
    docstring for the policy), registered as ``name``."""
    o = override or Override()
    ann = listing.get("annotations") or {}
    trusted = connection.server.trusted
    props = (listing.get("inputSchema") or {}).get("properties") or {}
    if o.policy is not None:
        policy = Policy(o.policy)
    elif trusted and ann.get("readOnlyHint"):
        policy = Policy.READ
    else:
        policy = Policy.EFFECT
    keyed = (
        policy is Policy.EFFECT
        and "idempotency_key" in props
        and (
            o.idempotent
            if o.idempotent is not None
            else trusted and bool(ann.get("idempotentHint"))
        )
    )
    reconcile = o.reconcile
    if reconcile is None and o.lookup is not None and policy is Policy.EFFECT:
        lk = Lookup(o.lookup) if isinstance(o.lookup, str) else o.lookup
        reconcile = lookup_reconcile(connection, lk)
    return McpTool(
        name=name,
        fn=McpCall(connection, str(listing["name"])),
        policy=policy,
        timeout=o.timeout,
        retry=DEFAULT_RETRY if o.retry is _UNSET else o.retry,
        reconcile=reconcile,
        requires_approval=o.requires_approval,
        secrets=dict(o.secrets),
        listing=listing,
        keyed=keyed,
    )
