"""Tools: plain Python functions (sync or async) an agent's planner may call.

A tool is registered with a recovery policy (``read``, ``compute``, ``effect``), a timeout, a
retry policy for transient errors (:class:`~torpor.Retry`: exponential backoff with jitter), and
for effects a ``reconcile``. Timeouts and retries are the engine's one mechanism
(:mod:`torpor.engine.attempts`): a read or compute tool is retried freely; an effect tool's
attempts are the run's (``run.effect(..., timeout=, retry=)``): never two in flight at once.
Its argument schema is derived from the function's type hints by pydantic::

    tools = Tools()

    @tools.tool(policy="effect", reconcile=find_deploy, requires_approval=True, timeout=30)
    def deploy(service: str, version: str, token: Secret, idempotency_key: str) -> dict: ...

- Arguments from a planner are validated before anything runs; a validation failure becomes an
  observation for the planner (:class:`ToolArgsError`), never a crash.
- Parameters typed :data:`Secret` are marked in the schema (``writeOnly``, ``x-secret``) and
  never written to the history: the agent records a keyed hash in their place (a
  :class:`Vault` matches it back to the value). ``secrets={"token": provider}`` fills a
  parameter from a provider at call time instead; the model never sees it.
- Parameters typed :data:`ArtifactHash` name a run artifact by sha256; an approval of the call
  binds those artifacts as well as the exact arguments.
- ``idempotency_key`` and ``fencing_token`` parameters are filled by the engine (effects).
- ``spawns="workflow"`` (issue 38): the call is delegated to a **child run** of that workflow
  (an :class:`~torpor.Agent`'s name, say) — the function maps the validated arguments to the
  child's input; the call succeeds with the child's result when the child succeeds, fails
  with its outcome otherwise (:mod:`torpor.engine.children`, G14). The agent's run waits for
  the child durably; ready delegations of one plan start together and are waited on as one
  fan-in (:mod:`.parallel`).
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import time
import typing
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from .. import scrub
from ..engine.attempts import Retry, Running, Timeout, call, timeout_of
from ..engine.effects import EffectCall, Reconciliation
from ..errors import (
    EffectNotApplied,
    ToolArgsError,
    ToolTimeoutError,
    TorporError,
)
from ..history import Policy
from ..scrub import Scrubber
from .models.base import ToolSpec


class _SecretMarker:
    def __repr__(self) -> str:
        return "Secret"


class _ArtifactMarker:
    def __repr__(self) -> str:
        return "ArtifactHash"


_SECRET = _SecretMarker()
_ARTIFACT = _ArtifactMarker()

#: A string argument that is never written to the history (a keyed hash is, for matching).
Secret = Annotated[
    str,
    Field(json_schema_extra={"writeOnly": True, "format": "password", "x-secret": True}),
    _SECRET,
]
#: The sha256 of an artifact of the run; approvals of the call bind that content too.
ArtifactHash = Annotated[
    str,
    Field(pattern=r"^[0-9a-f]{64}$", json_schema_extra={"x-artifact": True}),
    _ARTIFACT,
]

#: Parameters the engine fills; never part of the schema.
ENGINE_PARAMS = ("idempotency_key", "fencing_token")


def _marker(annotation: Any, marker: object) -> bool:
    """Whether ``marker`` annotates the type, or a member of it (``X | None``, ``list[X]``)."""
    if typing.get_origin(annotation) is Annotated:
        args = typing.get_args(annotation)
        return any(m is marker for m in args[1:]) or _marker(args[0], marker)
    return any(_marker(a, marker) for a in typing.get_args(annotation))


@dataclass
class Tool:
    """A registered tool; see the module docstring."""

    name: str
    fn: Callable[..., Any]
    policy: Policy = Policy.READ
    description: str = ""
    timeout: float | Timeout | None = None
    retry: Retry | None = None
    reconcile: Callable[[EffectCall], Reconciliation] | None = None
    requires_approval: bool | Callable[[dict[str, Any]], bool] = False
    secrets: Mapping[str, Callable[[], str]] = field(default_factory=dict)
    #: The workflow a call of this tool is delegated to, as a child run (None: none).
    spawns: str | None = None
    args_model: type[BaseModel] = field(init=False)
    secret_fields: frozenset[str] = field(init=False)
    artifact_fields: frozenset[str] = field(init=False)
    engine_params: frozenset[str] = field(init=False)

    def check_policy(self) -> None:
        """The policy as a :class:`Policy`; TorporError unless read, compute or effect (only
        an effect with a reconcile)."""
        self.policy = Policy(self.policy)
        if self.policy not in (Policy.READ, Policy.COMPUTE, Policy.EFFECT):
            raise TorporError(f"tool {self.name!r}: policy must be read, compute or effect")
        if self.policy is not Policy.EFFECT and self.reconcile is not None:
            raise TorporError(f"tool {self.name!r}: only an effect has a reconcile")
        if self.spawns is not None and self.policy is not Policy.READ:
            raise TorporError(f"tool {self.name!r}: a tool that spawns a child run is a read tool")

    def __post_init__(self) -> None:
        self.check_policy()
        sig = inspect.signature(self.fn)
        hints = typing.get_type_hints(self.fn, include_extras=True)
        fields: dict[str, Any] = {}
        secret, artifact, engine = set(), set(), set()
        for pname, param in sig.parameters.items():
            if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                continue
            if pname in ENGINE_PARAMS:
                engine.add(pname)
                continue
            ann = hints.get(pname, Any)
            if pname in self.secrets:
                if not _marker(ann, _SECRET):
                    raise TorporError(f"tool {self.name!r}: secret {pname!r} must be typed Secret")
                continue
            if _marker(ann, _SECRET):
                secret.add(pname)
            if _marker(ann, _ARTIFACT):
                artifact.add(pname)
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[pname] = (ann, default)
        unknown = set(self.secrets) - set(sig.parameters)
        if unknown:
            raise TorporError(f"tool {self.name!r}: secrets for unknown parameters {unknown}")
        self.args_model = create_model(
            f"{self.name}_args", __config__=ConfigDict(extra="forbid"), **fields
        )
        self.secret_fields = frozenset(secret)
        self.artifact_fields = frozenset(artifact)
        self.engine_params = frozenset(engine)
        if not self.description:
            self.description = inspect.cleandoc(self.fn.__doc__ or "").split("\n\n")[0]

    # ------------------------------------------------------------ schema & validation

    def spec(self) -> ToolSpec:
        """The tool as a model sees it (JSON schema from the type hints)."""
        schema = self.args_model.model_json_schema()
        schema.pop("title", None)
        return ToolSpec(name=self.name, description=self.description, parameters=schema)

    def validate(self, args: Any) -> dict[str, Any]:
        """The validated arguments (Python values), or :class:`ToolArgsError`."""
        if not isinstance(args, dict):
            raise ToolArgsError(self.name, f"arguments must be a JSON object, not {args!r}"[:300])
        try:
            model = self.args_model.model_validate(args)
        except ValidationError as exc:
            details = [
                {"loc": ".".join(str(x) for x in e["loc"]), "msg": e["msg"], "type": e["type"]}
                for e in exc.errors(include_url=False, include_input=False)
            ]
            raise ToolArgsError(self.name, f"{len(details)} validation error(s)", details) from None
        return {k: getattr(model, k) for k in type(model).model_fields}

    def canonical(self, validated: dict[str, Any]) -> dict[str, Any]:
        """The validated arguments as JSON data (what is hashed, after secrets are redacted)."""
        return self.args_model.model_validate(validated).model_dump(mode="json")

    def artifact_hashes(self, validated: dict[str, Any]) -> list[str]:
        """The artifact sha256s the arguments reference (fields typed ArtifactHash)."""
        out: set[str] = set()
        for f in self.artifact_fields:
            v = validated.get(f)
            for h in v if isinstance(v, list | tuple) else [v]:
                if isinstance(h, str):
                    out.add(h)
        return sorted(out)

    def needs_approval(self, validated: dict[str, Any]) -> bool:
        ra = self.requires_approval
        return bool(ra(validated)) if callable(ra) else bool(ra)

    # ------------------------------------------------------------ calling

    def provided_secrets(self) -> dict[str, str]:
        """The values of the secrets filled from providers (never shown to a model)."""
        return {pname: provider() for pname, provider in self.secrets.items()}

    def arguments(
        self, args: dict[str, Any], secrets: dict[str, str] | None, engine: dict[str, Any]
    ) -> dict[str, Any]:
        """The keyword arguments of a call: validated ``args``, the provided secrets, and the
        engine parameters the function takes."""
        kwargs = dict(args)
        kwargs.update(self.provided_secrets() if secrets is None else secrets)
        for pname in self.engine_params:
            if pname in engine:
                kwargs[pname] = engine[pname]
        return kwargs

    def transient(self, exc: BaseException) -> bool:
        """Whether a failed attempt may be retried on its own (outside a run): a read or
        compute tool on the retry policy's exception types; an effect only when that cannot
        duplicate it (EffectNotApplied, or a tool that takes the idempotency key)."""
        r = self.retry
        if r is None:
            return False
        if self.policy is not Policy.EFFECT:
            return isinstance(exc, r.on)
        if isinstance(exc, EffectNotApplied):
            return True  # it knows nothing happened
        return "idempotency_key" in self.engine_params and isinstance(exc, r.on)

    def invoke(
        self, args: dict[str, Any], *, secrets: dict[str, str] | None = None, **engine: Any
    ) -> Any:
        """Call the function with validated ``args`` (plus provided secrets and the engine
        parameters it takes), under its timeout and retry policy. A timed-out attempt raises
        ToolTimeoutError (``future``: the attempt, still running if it could not be stopped);
        it is retried like a transient error, except an effect's attempt that may still be
        running: that is never overlapped by another. (In a run, an effect tool's attempts
        are the engine's: :func:`torpor.engine.effects.perform`.)"""
        kwargs = self.arguments(args, secrets, engine)
        timeout = timeout_of(self.timeout)
        r = self.retry
        tries = 0
        while True:
            tries += 1
            out = call(self.fn, (), kwargs, timeout)
            if isinstance(out, Running):
                assert timeout is not None
                if out.stoppable:
                    out.cancel()
                    out.join(timeout.grace_s)
                exc: BaseException = ToolTimeoutError(self.name, timeout.seconds, out)
                alive = not out.done()
            elif out.error is None:
                return out.value
            else:
                exc, alive = out.error, False
            effect_alive = alive and self.policy is Policy.EFFECT
            if r is None or tries >= r.attempts or effect_alive or not self.transient(exc):
                raise exc
            time.sleep(r.delay_s(tries))


class Tools:
    """A registry of tools by name."""

    def __init__(self, *tools: Tool):
        self._tools: dict[str, Tool] = {}
        #: ``fn(run)`` -> a context manager an Agent enters around each durable wait it makes
        #: for a call of these tools (an approval), in order: e.g. the sandbox's
        #: :func:`~torpor.sandbox.sleep_on_wait`, so a run waiting for a person holds its
        #: workspace on disk, not a VM.
        self.around_waits: list[Callable[[Any], AbstractContextManager[object]]] = []
        for t in tools:
            self.add(t)

    def add(self, tool: Tool) -> Tool:
        if tool.name in self._tools:
            raise TorporError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        policy: Policy | str = Policy.READ,
        description: str = "",
        timeout: float | Timeout | None = None,
        retry: Retry | None = Retry(),
        reconcile: Callable[[EffectCall], Reconciliation] | None = None,
        requires_approval: bool | Callable[[dict[str, Any]], bool] = False,
        secrets: Mapping[str, Callable[[], str]] | None = None,
        spawns: str | None = None,
    ) -> Any:
        """Register ``fn`` (decorator, with or without arguments). Returns ``fn`` unchanged.
        ``spawns``: delegate each call to a child run of that workflow (module docstring)."""

        def deco(f: Callable[..., Any]) -> Callable[..., Any]:
            self.add(
                Tool(
                    name=name or f.__name__,
                    fn=f,
                    policy=Policy(policy),
                    description=description,
                    timeout=timeout,
                    retry=retry,
                    reconcile=reconcile,
                    requires_approval=requires_approval,
                    secrets=dict(secrets or {}),
                    spawns=spawns,
                )
            )
            return f

        return deco(fn) if fn is not None else deco

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [t.spec() for t in self._tools.values()]

    def prepare(self, run: Any) -> None:
        """Called by an agent at the start of each execution of its run (``run``: the
        :class:`~torpor.Run`), before anything else is replayed: a registry whose tools come
        from outside (:class:`torpor.mcp.Toolset`) records or checks them here. Nothing to
        do for tools registered in code."""


# ------------------------------------------------------------------ secrets


class Vault:
    """Secret values known to this process, by keyed hash (HMAC-SHA256 with the signing key,
    so the history cannot be brute-forced offline without the key).

    :meth:`redact` swaps a secret for ``{"$secret": "<hash>"}``; :meth:`reveal` swaps it back
    when the value is known here (seen this execution, or given to the agent as a known
    secret); :meth:`scrub` removes every known secret value, in each of its encodings
    (:func:`torpor.scrub.encodings`: URL-encoded, JSON-escaped, ``repr``'d, base64), from any
    JSON data before it is recorded (a result or an error message that echoes a secret).
    Each value is also :func:`torpor.scrub.remember`-ed, so every registered sink of the
    process scrubs it.
    """

    MIN_LEN = 4

    def __init__(self, key: bytes, known: Iterator[str] | list[str] | tuple[str, ...] = ()):
        self._key = key
        self._values: dict[str, str] = {}
        for v in known:
            self.add(v)

    def digest(self, value: str) -> str:
        return hmac.new(self._key, value.encode(), hashlib.sha256).hexdigest()

    def add(self, value: str) -> str:
        h = self.digest(value)
        if len(value) >= self.MIN_LEN:
            self._values[h] = value
            scrub.remember(value, secret_marker(h))  # every sink of the process scrubs it too
        return h

    def redact(self, value: str) -> dict[str, str]:
        return {"$secret": self.add(value)}

    def reveal(self, marker: Any) -> str | None:
        if isinstance(marker, dict) and set(marker) == {"$secret"}:
            return self._values.get(str(marker["$secret"]))
        return None

    def scrub(self, data: Any) -> Any:
        return self.scrubber()(data) if self._values else data

    def scrubber(self) -> Scrubber:
        """A picklable :class:`Scrubber` of the secrets known now (for an attempt that runs in
        a child process)."""
        return Scrubber(tuple((v, secret_marker(h)) for h, v in self._values.items()))


def secret_marker(digest: str) -> str:
    """What stands for a secret in scrubbed text: ``[secret:`` + 12 hex digits of its keyed
    hash + ``]``."""
    return f"[secret:{digest[:12]}]"


def is_secret_marker(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"$secret"}
