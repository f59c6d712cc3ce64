"""What a planner proposes, what it is shown, and the planners: plain code
(:class:`CodePlanner`, plan-and-execute) and a model (:class:`ReActPlanner`, one turn of tool
calls at a time). A planner's proposal is recorded by the agent loop (:mod:`.loop`) as a plan
version; a planner never records anything itself except through the run (its model calls)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import PlannerError
from .context import Context
from .models.base import Model
from .proposals import PlanView, Proposal, ProposedStep

# ------------------------------------------------------------------ planners


class Planner:
    """Base of planners. ``replan_on_failure``: ask for a new plan as soon as a call fails
    (plan-and-execute); otherwise only when no call is ready (ReAct)."""

    name = "planner"
    replan_on_failure = True

    def propose(self, ctx: Context) -> Proposal:
        raise NotImplementedError


class CodePlanner(Planner):
    """Plain code: ``fn(view: PlanView) -> Proposal`` (or a list of steps; ``None``/``[]`` is
    done). Run as a recorded ``compute`` step: on resume its plan is read back, not recomputed.
    The recorded proposal has its secret arguments (tool parameters typed ``Secret``) replaced
    by their keyed hash and known secret values scrubbed, as the plan itself is (G12): a
    resumed process matches them back from the agent's ``secrets``.
    """

    def __init__(self, fn: Callable[[PlanView], Any], name: str = "code"):
        self.fn = fn
        self.name = name

    def propose(self, ctx: Context) -> Proposal:
        def plan(view: dict[str, Any]) -> dict[str, Any]:
            try:
                out = self.fn(PlanView.model_validate(view))
            except Exception as exc:  # recorded as the step's failure: no secret in it
                raise PlannerError(ctx.vault.scrub(f"{type(exc).__name__}: {exc}")) from None
            if out is None:
                out = Proposal.finish()
            elif isinstance(out, list | tuple):
                out = Proposal(steps=list(out), done=not out)
            data = Proposal.model_validate(out).model_dump(mode="json")
            for step in data["steps"]:
                step["args"] = ctx.redact_args(step["tool"], step["args"])
            return dict(ctx.vault.scrub(data))

        view = ctx.view().model_dump(mode="json")
        if not view.get("episodes"):
            del view["episodes"]  # the input hash of a run without lessons stays as it was
        data = ctx.run.compute("planner", plan, view, purpose=f"{self.name} planner")
        return Proposal.model_validate(data)


class ReActPlanner(Planner):
    """A model that proposes one turn at a time: its tool calls are the next steps (run
    independently), their results go back to it, and a message without tool calls is its
    final answer."""

    replan_on_failure = False

    def __init__(self, model: Model, *, instructions: str = "", name: str = "react"):
        self.model = model
        self.instructions = instructions
        self.name = name

    def propose(self, ctx: Context) -> Proposal:
        resp = ctx.call_model(self.model, ctx.conversation(self.instructions), ctx.tool_specs())
        msg = resp.message
        if not msg.tool_calls:
            return Proposal.finish(final=msg.content, reason="the model answered")
        steps = []
        for tc in msg.tool_calls:
            args: Any = tc.arguments if tc.raw_arguments is None else {"$raw": tc.raw_arguments}
            steps.append(
                ProposedStep(call_id=ctx.call_id_for(tc.id), tool=tc.name, args=args, why="")
            )
        ctx.add_turn(msg, [s.call_id for s in steps])
        return Proposal(steps=steps, reason=msg.content[:500])
