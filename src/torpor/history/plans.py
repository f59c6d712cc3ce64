"""The agent's transition rules: plan versions, tool-call outcomes, model calls and budgets
(registered into :data:`torpor.history.fold.RULES` like every other rule).

:func:`plan_problem` is the rule a plan version must satisfy — finished steps stay finished,
dependencies point back, no step twice — shared by the fold (which refuses such an event) and
the agent loop (which refuses the planner's proposal before recording anything).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from .events import (
    SHA256_RE,
    BudgetSet,
    ContextBuilt,
    ContextCompacted,
    Event,
    ModelCalled,
    PlannedStep,
    PlanRecorded,
    Policy,
    ToolCallSettled,
)
from .fold import Refuse, open_step, rule
from .state import Budget, PlanStepInfo, RunState


class KnownStep(Protocol):
    """A step of an earlier plan version, as :func:`plan_problem` needs it."""

    @property
    def tool(self) -> str: ...

    @property
    def args_hash(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def version(self) -> int: ...


def plan_problem(
    known: Mapping[str, KnownStep], steps: Sequence[PlannedStep], version: int
) -> str | None:
    """Why plan version ``version`` of ``steps`` cannot follow the plan ``known`` (call id ->
    step of an earlier version), or None when it can."""
    seen: set[str] = set()
    for st in steps:
        if st.call_id in seen:
            return f"plan v{version} lists step {st.call_id!r} twice"
        cur = known.get(st.call_id)
        if (
            cur is not None
            and cur.status == "succeeded"
            and (cur.tool, cur.args_hash) != (st.tool, st.args_hash)
        ):
            return (
                f"step {st.call_id!r} succeeded under plan v{cur.version}; a revised plan "
                "cannot change it (finished steps stay finished)"
            )
        for dep in st.depends_on:
            done = known.get(dep)
            if dep not in seen and (done is None or done.status != "succeeded"):
                return (
                    f"step {st.call_id!r} depends on {dep!r}, which is neither an earlier step "
                    f"of plan v{version} nor a succeeded one"
                )
        seen.add(st.call_id)
    return None


@rule(PlanRecorded)
def _plan_recorded(s: RunState, p: PlanRecorded, e: Event, refuse: Refuse) -> None:
    if p.version != s.plan_version + 1:
        raise refuse(f"plan version must be {s.plan_version + 1}, not {p.version}")
    problem = plan_problem(s.plan, p.steps, p.version)
    if problem:
        raise refuse(problem)
    for info in s.plan.values():  # what the new version does not keep is superseded
        if info.status == "pending":
            info.status = "superseded"
    for st in p.steps:
        cur = s.plan.get(st.call_id)
        if cur is not None and cur.status == "succeeded":
            cur.version = p.version
            continue
        s.plan[st.call_id] = PlanStepInfo(
            tool=st.tool,
            args_hash=st.args_hash,
            depends_on=list(st.depends_on),
            status="pending",
            version=p.version,
        )
    s.plan_version = p.version


@rule(ToolCallSettled)
def _tool_call_settled(s: RunState, p: ToolCallSettled, e: Event, refuse: Refuse) -> None:
    cur = s.plan.get(p.call_id)
    if cur is None:
        raise refuse(f"tool call {p.call_id!r} is in no plan")
    if cur.status != "pending":
        raise refuse(f"tool call {p.call_id!r} is {cur.status}, not pending")
    if p.outcome == "succeeded":
        unmet = [d for d in cur.depends_on if s.plan[d].status != "succeeded"]
        if unmet:
            raise refuse(f"tool call {p.call_id!r} succeeded before its dependencies {unmet}")
    if p.outcome in ("succeeded", "failed"):
        if p.executed_by is None:
            raise refuse(f"tool call {p.call_id!r} {p.outcome} without naming the step that ran")
        s.usage.tool_calls += 1
    cur.status = p.outcome


@rule(ModelCalled)
def _model_called(s: RunState, p: ModelCalled, e: Event, refuse: Refuse) -> None:
    step = open_step(s, p.step_id, refuse)
    if step.policy is not Policy.READ:
        raise refuse(f"a model call is a read step, not {step.policy}")
    if not SHA256_RE.fullmatch(p.prompt_hash):
        raise refuse("prompt_hash must be 64 lowercase hex digits")
    u = s.usage
    u.model_calls += 1
    u.input_tokens += p.input_tokens
    u.output_tokens += p.output_tokens
    if p.cost_usd is None:
        u.cost_unknown += 1
    else:
        u.cost_usd += p.cost_usd


@rule(BudgetSet)
def _budget_set(s: RunState, p: BudgetSet, e: Event, refuse: Refuse) -> None:
    limits = {k: getattr(p, k) for k in Budget.model_fields if getattr(p, k) is not None}
    if not limits:
        raise refuse("a budget_set names no limit")
    for k, v in limits.items():
        setattr(s.budget, k, v)


@rule(ContextCompacted)
def _context_compacted(s: RunState, p: ContextCompacted, e: Event, refuse: Refuse) -> None:
    open_step(s, p.step_id, refuse)
    if p.number != s.context_compactions + 1:
        raise refuse(f"compaction number must be {s.context_compactions + 1}")
    if not SHA256_RE.fullmatch(p.summary_hash):
        raise refuse("summary_hash must be 64 lowercase hex digits")
    s.context_compactions = p.number


@rule(ContextBuilt)
def _context_built(s: RunState, p: ContextBuilt, e: Event, refuse: Refuse) -> None:
    open_step(s, p.step_id, refuse)
    if not SHA256_RE.fullmatch(p.context_hash):
        raise refuse("context_hash must be 64 lowercase hex digits")
    s.context_tokens = p.total_tokens
