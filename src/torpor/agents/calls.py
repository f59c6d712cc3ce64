"""One planned tool call, executed under its tool's recovery policy (see :mod:`.loop`):
arguments validated first (a refusal becomes an observation; nothing runs), an approval bound
to the hash of the exact arguments when the tool requires one, then a ``read``/``compute`` step
or an ``effect`` — its outcome recorded by the loop (``tool_call_settled``)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from .. import serde
from ..engine.approvals import Approval
from ..engine.effects import EffectCall, Unknown
from ..errors import (
    ApprovalDeniedError,
    EffectNotApplied,
    StepError,
    ToolArgsError,
    ToolFailedError,
    ToolTimeoutError,
)
from ..history import Policy
from .context import Context
from .proposals import clip
from .tools import is_secret_marker


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


def execute_call(ctx: Context, c: PlannedCall) -> str:
    """Run one planned call under its tool's policy and record its outcome (succeeded,
    failed, invalid, denied); returns that outcome."""
    run = ctx.run
    base = f"{c.call_id}@v{c.version}"
    comp = run.journal.recorded(f"settle:{base}", Policy.READ)
    if comp is not None:  # replay: the outcome is recorded
        ctx.settle(c, comp.result["outcome"], comp.result["observation"], None)
        return c.status
    tool = ctx.agent.tools.get(c.tool)
    if tool is None:
        ctx.settle(
            c,
            "invalid",
            {"error": f"unknown tool {c.tool!r}", "tools": ctx.agent.tools.names()},
            None,
        )
        return c.status
    if isinstance(c.args, dict) and "$raw" in c.args and len(c.args) == 1:
        ctx.settle(c, "invalid", {"error": "arguments are not a JSON object", "raw": c.args}, None)
        return c.status
    args, missing = _reveal(ctx, c.args)
    if missing:
        ctx.settle(
            c,
            "invalid",
            {
                "error": f"secret argument(s) {missing} are not known to this process "
                "(only their hash was recorded); provide them again"
            },
            None,
        )
        return c.status
    try:
        validated = tool.validate(args)
    except ToolArgsError as exc:
        ctx.settle(c, "invalid", exc.observation(), None)
        return c.status
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
            ctx.settle(c, "invalid", {"error": f"unknown artifact(s) {unknown} in arguments"}, None)
            return c.status
        doc = serde.dumps({"tool": tool.name, "args": c.args})
        ref = run.artifact(f"tool-args/{base}", doc, media_type="application/json")
        hashes = sorted({ref.sha256, *tool.artifact_hashes(validated)})
        try:
            approval = run.approval(
                f"tool:{base}",
                hashes,
                summary=clip(f"{tool.name}({json.dumps(c.args, sort_keys=True)})", 300),
            )
        except ApprovalDeniedError as exc:
            ctx.settle(c, "denied", {"error": str(exc)}, None)
            if ctx.agent.on_denied == "block":
                raise
            return c.status
    sid = f"tool:{base}"
    provided = tool.provided_secrets()
    for value in provided.values():
        ctx.vault.add(value)  # scrubbed from whatever the call returns or raises
    canonical = ctx.vault.scrub(serde.to_jsonable(c.args))
    try:
        if tool.policy is Policy.EFFECT:
            result = _effect(ctx, sid, tool, validated, provided, approval, hashes)
        else:
            scrub = ctx.vault.scrub

            def body(_recorded_args: Any) -> Any:
                try:
                    return scrub(serde.to_jsonable(tool.invoke(validated, secrets=provided)))
                except Exception as exc:
                    raise ToolFailedError(scrub(f"{type(exc).__name__}: {exc}")) from None

            result = run.step(
                sid, body, canonical, policy=tool.policy, purpose=f"{tool.name} ({c.call_id})"
            )
    except StepError as exc:
        ctx.settle(c, "failed", {"error": ctx.vault.scrub(exc.error)}, sid)
        return c.status
    ctx.settle(c, "succeeded", result, sid)
    return c.status


def _effect(
    ctx: Context,
    sid: str,
    tool: Any,
    validated: dict[str, Any],
    provided: dict[str, str],
    approval: Approval | None,
    hashes: list[str],
) -> Any:
    scrub = ctx.vault.scrub
    timed_out: list[ToolTimeoutError] = []

    def body(**kw: Any) -> Any:
        engine = {k: kw[k] for k in ("idempotency_key", "fencing_token") if k in kw}
        try:
            return scrub(serde.to_jsonable(tool.invoke(validated, secrets=provided, **engine)))
        except EffectNotApplied as exc:
            raise EffectNotApplied(scrub(str(exc))) from None
        except ToolTimeoutError as exc:
            timed_out.append(exc)
            raise ToolFailedError(scrub(str(exc))) from None
        except Exception as exc:
            raise ToolFailedError(scrub(f"{type(exc).__name__}: {exc}")) from None

    def reconcile(call: EffectCall) -> Any:
        fut = timed_out[-1].future if timed_out else None
        if fut is not None and not fut.done():
            return Unknown("the call timed out and may still complete")
        if tool.reconcile is None:
            return Unknown("the tool has no reconcile: whether it happened cannot be checked")
        return tool.reconcile(dataclasses.replace(call, kwargs={**validated, **call.kwargs}))

    return ctx.run.effect(
        sid,
        body,
        reconcile=reconcile,
        approval=approval,
        artifacts=hashes,
        operation=tool.name,
        purpose=f"{tool.name} (effect)",
    )
