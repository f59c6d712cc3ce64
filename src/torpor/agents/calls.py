"""One planned tool call, executed under its tool's recovery policy (see :mod:`.loop`):
arguments validated first (a refusal becomes an observation; nothing runs), an approval bound
to the hash of the exact arguments when the tool requires one, then a ``read``/``compute`` step
or an ``effect`` — its outcome recorded by the loop (``tool_call_settled``)."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import serde
from ..engine.approvals import Approval
from ..engine.calls import resolve
from ..engine.children import ChildResult
from ..engine.effects import Applied, EffectCall, Unknown
from ..errors import (
    ApprovalDeniedError,
    ApprovalRespondedError,
    AttemptTimeoutError,
    EffectNotApplied,
    StepError,
    ToolArgsError,
    ToolFailedError,
    TransientError,
)
from ..history import Policy
from .context import Context
from .proposals import clip
from .tools import Scrubber, Tool, is_secret_marker


@dataclass
class PlannedCall:
    """A call of a recorded plan version, as this execution sees it."""

    call_id: str
    tool: str
    args: Any
    args_hash: str
    depends_on: list[str]
    why: str
    version: int
    status: str = "pending"
    observation: Any = None


def executed_by(recorded: dict[str, Any], base: str) -> str | None:
    """The step that ran a call whose outcome ``recorded`` (a ``settle:<base>`` result) was
    read back: the one it names, or, for an outcome recorded before it named one, the call's
    ``tool:<base>`` step when it succeeded or failed (the fold requires a step for those and
    :func:`execute_call` ran them only there) — so a replayed outcome is the outcome this
    execution saw, step included (G9: the working memory refers to that step)."""
    if "executed_by" in recorded:
        return recorded["executed_by"]
    return f"tool:{base}" if recorded.get("outcome") in ("succeeded", "failed") else None


def _reveal(ctx: Context, args: Any) -> tuple[Any, list[str]]:
    """Secret markers swapped back for their values (those this process knows)."""
    missing: list[str] = []
    if not isinstance(args, dict):
        return args, missing
    out = {}
    for k, v in args.items():
        if is_secret_marker(v):
            value = ctx.vault.reveal(v)
            if value is None:
                missing.append(k)
            out[k] = value
        else:
            out[k] = v
    return out, missing


@dataclass(frozen=True)
class Decided:
    """A call's outcome as it is to be recorded (``tool_call_settled``): ``outcome``,
    ``observation`` and the step that ran it (``executed_by``, None when nothing ran)."""

    outcome: str
    observation: Any
    executed_by: str | None


@dataclass
class Prepared:
    """A call that passed its checks (arguments, secrets, budget, approval) and is ready to
    run as step ``sid`` under its tool's policy."""

    call: PlannedCall
    tool: Tool
    validated: dict[str, Any]
    provided: dict[str, str]
    approval: Approval | None
    hashes: list[str]
    sid: str
    canonical: Any

    @property
    def base(self) -> str:
        """``<call id>@v<version>``: the name of the call's steps."""
        return self.sid.removeprefix("tool:")


def execute_call(ctx: Context, c: PlannedCall) -> str:
    """Run one planned call under its tool's policy and record its outcome (succeeded,
    failed, invalid, denied); returns that outcome."""
    d = prepare(ctx, c)
    if isinstance(d, Prepared):
        d = run_prepared(ctx, d)
    ctx.settle(c, d.outcome, d.observation, d.executed_by)
    return c.status


def prepare(ctx: Context, c: PlannedCall) -> Prepared | Decided:
    """Everything before a call runs, in the executing thread: its recorded outcome on replay;
    else the tool, its arguments and secrets checked (a refusal is the outcome), the budget
    checked (BudgetExhausted: the run blocks), an approval bound to the exact arguments when
    the tool requires one (a denial is the outcome, or raised when the agent blocks on it)."""
    run = ctx.run
    base = f"{c.call_id}@v{c.version}"
    comp = run.journal.recorded(f"settle:{base}", Policy.READ)
    if comp is not None:  # replay: the outcome is recorded
        rec = run.journal.value(f"settle:{base}", comp.result)
        return Decided(rec["outcome"], rec["observation"], executed_by(rec, base))
    tool = ctx.agent.tools.get(c.tool)
    if tool is None:
        return Decided(
            "invalid",
            {"error": f"unknown tool {c.tool!r}", "tools": ctx.agent.tools.names()},
            None,
        )
    if isinstance(c.args, dict) and "$raw" in c.args and len(c.args) == 1:
        return Decided("invalid", {"error": "arguments are not a JSON object", "raw": c.args}, None)
    args, missing = _reveal(ctx, c.args)
    if missing:
        return Decided(
            "invalid",
            {
                "error": f"secret argument(s) {missing} are not known to this process "
                "(only their hash was recorded); provide them again"
            },
            None,
        )
    try:
        validated = tool.validate(args)
    except ToolArgsError as exc:
        return Decided("invalid", exc.observation(), None)
    ctx.check_budget()
    hashes: list[str] = []
    approval: Approval | None = None
    if tool.needs_approval(validated):
        unknown = [
            h
            for h in tool.artifact_hashes(validated)
            if h not in {a.sha256 for a in run.state.artifacts.values()}
        ]
        if unknown:
            return Decided(
                "invalid", {"error": f"unknown artifact(s) {unknown} in arguments"}, None
            )
        doc = serde.dumps({"tool": tool.name, "args": c.args})
        ref = run.artifact(f"tool-args/{base}", doc, media_type="application/json")
        hashes = sorted({ref.sha256, *tool.artifact_hashes(validated)})
        try:
            with contextlib.ExitStack() as around:
                for enter in ctx.agent.tools.around_waits:  # e.g. a sandbox's VM sleeps
                    around.enter_context(enter(run))
                approval = run.approval(
                    f"tool:{base}",
                    hashes,
                    summary=clip(f"{tool.name}({json.dumps(c.args, sort_keys=True)})", 300),
                    escalate=getattr(ctx.agent, "escalate", ()),
                )
        except ApprovalRespondedError as exc:
            # A reply instead of a decision (issue 39): nothing runs; the model reads it.
            return Decided("responded", {"reply": exc.reply, "replied_by": exc.by}, None)
        except ApprovalDeniedError as exc:
            if ctx.agent.on_denied == "block":
                ctx.settle(c, "denied", {"error": str(exc)}, None)
                raise
            return Decided("denied", {"error": str(exc)}, None)
        if approval.edited:  # approved with an edit (issue 39): exactly the edited bytes run
            edit = edited_args(tool, approval)
            if isinstance(edit, str):
                return Decided("invalid", {"error": edit}, None)
            validated = edit
    provided = tool.provided_secrets()
    for value in provided.values():
        ctx.vault.add(value)  # scrubbed from whatever the call returns or raises
    # (an approved edit is the call that runs: its arguments are the step's input)
    edited = approval is not None and approval.edited
    canonical = ctx.vault.scrub(serde.to_jsonable(validated if edited else c.args))
    return Prepared(c, tool, validated, provided, approval, hashes, f"tool:{base}", canonical)


def edited_args(tool: Tool, approval: Approval) -> Any:
    """The validated arguments of an approval with an edit (issue 39): exactly the edited
    bytes the decision signed — checked again against the signed sha256 — parsed as the
    ``{"tool": …, "args": …}`` document that was proposed (or a bare arguments object); a
    string saying why when they are not valid arguments of this tool (nothing runs)."""
    if serde.sha256_hex(approval.edited_content) != approval.edited:
        return "the edited arguments do not match the sha256 the approver signed"
    try:
        doc = json.loads(approval.edited_content)
    except ValueError as exc:
        return f"the edited arguments are not JSON: {exc}"
    if isinstance(doc, dict) and set(doc) == {"tool", "args"}:
        if doc["tool"] != tool.name:
            return f"the edit names tool {doc['tool']!r}, not {tool.name!r}"
        doc = doc["args"]
    if not isinstance(doc, dict):
        return "the edited arguments are not a JSON object"
    try:
        return tool.validate(doc)
    except ToolArgsError as exc:
        return f"the edited arguments are refused: {exc}"


def child_input(ctx: Context, p: Prepared) -> Any:
    """The input of the child run a delegating tool starts: its function's value for the
    validated arguments (JSON data, secrets scrubbed: it is recorded in the child)."""
    value = resolve(p.tool.fn(**p.tool.arguments(p.validated, p.provided, {})))
    return ctx.vault.scrub(serde.to_jsonable(value))


def delegated(p: Prepared, r: ChildResult) -> Decided:
    """A delegated call's outcome from its child's: succeeded with the child's result when the
    child succeeded, failed with its outcome and reason otherwise (run by the spawn step)."""
    obs = {"run_id": r.run_id, "outcome": r.outcome, "result": r.result}
    if not r.ok:
        obs["reason"] = r.reason
    return Decided("succeeded" if r.ok else "failed", obs, f"child:{p.base}")


def _body(ctx: Context, p: Prepared) -> Callable[[Any], Any]:
    """A read/compute tool's step body: the tool called, its result or error scrubbed."""
    scrub, tool, validated, provided = ctx.vault.scrub, p.tool, p.validated, p.provided

    def body(_recorded_args: Any) -> Any:
        try:
            return scrub(serde.to_jsonable(tool.invoke(validated, secrets=provided)))
        except Exception as exc:
            raise ToolFailedError(scrub(f"{type(exc).__name__}: {exc}")) from None

    return body


def _step_options(p: Prepared) -> dict[str, Any]:
    return {"policy": p.tool.policy, "purpose": f"{p.tool.name} ({p.call.call_id})"}


def run_prepared(ctx: Context, p: Prepared) -> Decided:
    """Run a prepared call in the executing thread: a ``read``/``compute`` step, an effect, or
    a child run it delegates to (waited on: the run suspends until the child ends)."""
    if p.tool.spawns is not None:
        return delegated(p, ctx.run.child(p.tool.spawns, child_input(ctx, p), name=p.base))
    try:
        if p.tool.policy is Policy.EFFECT:
            result = ctx.run.effect(p.sid, _attempt(ctx, p), **_effect_options(ctx, p))
        else:
            result = ctx.run.step(p.sid, _body(ctx, p), p.canonical, **_step_options(p))
    except StepError as exc:
        return Decided("failed", {"error": ctx.vault.scrub(exc.error)}, p.sid)
    return Decided("succeeded", result, p.sid)


async def arun_prepared(ctx: Context, p: Prepared) -> Decided:
    """:func:`run_prepared` as a task of a batch (:mod:`.parallel`): the same step or effect,
    recorded from the executing thread's loop, the tool's own work in a worker thread (an
    effect with a timeout: the engine's attempt thread or child), so calls overlap."""
    import asyncio  # (only a batch of calls comes here)

    try:
        if p.tool.policy is Policy.EFFECT:
            attempt = _attempt(ctx, p)
            fn: Callable[..., Any] = attempt if p.tool.timeout is not None else _Threaded(attempt)
            result = await ctx.run.aeffect(p.sid, fn, **_effect_options(ctx, p))
        else:
            body = _body(ctx, p)

            async def threaded(recorded_args: Any) -> Any:
                return await asyncio.to_thread(body, recorded_args)

            result = await ctx.run.astep(p.sid, threaded, p.canonical, **_step_options(p))
    except StepError as exc:
        return Decided("failed", {"error": ctx.vault.scrub(exc.error)}, p.sid)
    return Decided("succeeded", result, p.sid)


@dataclass(frozen=True)
class ToolAttempt:
    """One attempt of an effect tool, as the engine calls it (``run.effect``): the tool's
    function with the validated arguments and provided secrets, its result scrubbed of secrets
    and made JSON data; its error scrubbed and mapped — EffectNotApplied kept (nothing
    happened), the tool's transient types (its retry policy's ``on``) to TransientError, any
    other to ToolFailedError. Picklable when the function and arguments are (a tool with
    ``Timeout(kill=True)`` runs it in a child process). Its signature names only the engine
    parameters the tool takes, so the engine passes just those (and retries under the same
    idempotency key only for a tool that takes one)."""

    fn: Callable[..., Any]
    kwargs: dict[str, Any]
    scrub: Scrubber
    transient: tuple[type[BaseException], ...]
    engine_params: frozenset[str]

    @property
    def __signature__(self) -> inspect.Signature:
        kw = inspect.Parameter.KEYWORD_ONLY
        return inspect.Signature([inspect.Parameter(p, kw) for p in sorted(self.engine_params)])

    def __call__(self, **engine: Any) -> Any:
        scrub = self.scrub
        try:
            # (An async tool runs to its end in this thread's own loop: in a sync agent loop
            # that is the workflow's thread, or the attempt's thread under a timeout.)
            return scrub(serde.to_jsonable(resolve(self.fn(**self.kwargs, **engine))))
        except EffectNotApplied as exc:
            raise EffectNotApplied(scrub(str(exc))) from None
        except self.transient as exc:
            raise TransientError(scrub(f"{type(exc).__name__}: {exc}")) from None
        except Exception as exc:
            raise ToolFailedError(scrub(f"{type(exc).__name__}: {exc}")) from None


@dataclass(frozen=True)
class _Threaded:
    """An effect attempt run in a worker thread from async code (no timeout: the engine would
    call a sync attempt inline, holding up the rest of the batch). Same engine parameters."""

    attempt: ToolAttempt

    @property
    def __signature__(self) -> inspect.Signature:
        return self.attempt.__signature__

    async def __call__(self, **engine: Any) -> Any:
        import asyncio

        return await asyncio.to_thread(self.attempt, **engine)


def _attempt(ctx: Context, p: Prepared) -> ToolAttempt:
    r = p.tool.retry
    return ToolAttempt(
        p.tool.fn,
        {**p.validated, **p.provided},
        ctx.vault.scrubber(),
        r.on if r is not None else (),
        p.tool.engine_params,
    )


def _effect_options(ctx: Context, p: Prepared) -> dict[str, Any]:
    """``run.effect``'s options for a prepared effect call: reconcile, approval, retry …"""
    tool, validated = p.tool, p.validated
    r = tool.retry
    retry = None
    if r is not None and r.attempts > 1:
        # The attempt maps the tool's transient errors to TransientError; an attempt stopped
        # at its timeout is transient when the tool's policy retries timeouts.
        on: tuple[type[BaseException], ...] = (TransientError,)
        if issubclass(AttemptTimeoutError, r.on):
            on += (AttemptTimeoutError,)
        retry = dataclasses.replace(r, on=on)

    def reconcile(call: EffectCall) -> Any:
        if tool.reconcile is None:
            return Unknown("the tool has no reconcile: whether it happened cannot be checked")
        verdict = tool.reconcile(dataclasses.replace(call, kwargs={**validated, **call.kwargs}))
        scrub = ctx.vault.scrub  # what it found is recorded: no secret in it (G12)
        if isinstance(verdict, Applied):
            return Applied(scrub(serde.to_jsonable(verdict.result)))
        if isinstance(verdict, Unknown):
            return Unknown(scrub(verdict.reason))
        return verdict

    return {
        "reconcile": reconcile,
        "approval": p.approval,
        "artifacts": p.hashes,
        "operation": tool.name,
        "purpose": f"{tool.name} (effect)",
        "timeout": tool.timeout,
        "retry": retry,
    }
