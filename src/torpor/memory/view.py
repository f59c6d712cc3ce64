"""The next model call's context of an agent's run, read from its latest checkpoint: what
``torpor context RUN`` and the console's run page show (the same function the agent builds
its context with, :func:`~torpor.memory.working.next_context`)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from pydantic import ValidationError

from .. import serde
from ..history import RunState, RunStatus
from ..messages import Message
from .context import BuiltContext
from .working import SNAPSHOT_VERSION, AgentSnapshot, model_turns, next_context, sections_of

#: What each of the agent's sections holds (``torpor context RUN`` shows it; docs/context.md).
SECTION_HOLDS: dict[str, str] = {
    "system": "model turns so far, the agent's and planner's instructions",
    "goal": "the goal, the completion criteria, the input",
    "summary": "facts of the folded turns, most relevant kept; operator instructions pinned",
    "plan": "the current plan version, each step's status",
    "checkpoint": "the latest checkpoint's four answers",
    "episodes": "lessons of earlier runs (recorded at the start)",
    "recall": "ledger records and earlier turns relevant to the current step (--ledger)",
    "artifacts": "excerpts of the artifacts the plan names",
    "buffer": "the recent turns, whole (tool results clipped head and tail)",
}


@dataclass(frozen=True)
class SectionView:
    """One section as shown: its name, priority, tokens sent, whether it was cut, its text
    (the messages of the buffer, one per line, for ``buffer``)."""

    name: str
    priority: int
    tokens: int
    cut: bool
    text: str


@dataclass(frozen=True)
class ContextView:
    """The next context of a run: its sections in placement order, the total and budget
    (tokens), the context's hash, the agent's model turns, its compactions and the seq of the
    checkpoint it was read from."""

    run_id: str
    sections: list[SectionView]
    total_tokens: int
    budget_tokens: int
    context_hash: str
    model_turns: int
    compactions: int
    checkpoint_seq: int
    built: BuiltContext
    #: The limits in force (budget parts, the tool-result clip, the plan-version cap, the
    #: lowered budget after a provider's "context too long"), as the checkpoint recorded them.
    limits: dict[str, int] = field(default_factory=dict)


def snapshot_of(state: RunState) -> AgentSnapshot | None:
    """The agent snapshot saved by the run's latest checkpoint, or None (not an agent, or no
    checkpoint yet, or one of another shape)."""
    raw = state.user_state
    if raw is None:
        return None
    try:
        raw = serde.decode(raw)
    except Exception:
        return None
    if not isinstance(raw, dict) or raw.get("v") != SNAPSHOT_VERSION or "goal_text" not in raw:
        return None
    try:
        return AgentSnapshot.model_validate(raw)
    except ValidationError:
        return None


def context_view(state: RunState) -> ContextView | None:
    """The context the run's next model call would get (None when the run has no agent
    checkpoint). Provider sections (``Memory(sections=...)``) are shown as they were last
    built."""
    snap = snapshot_of(state)
    if snap is None:
        return None
    built = next_context(snap, instructions=snap.instructions, extra=snap.extra_sections())
    limits = dict(snap.limits)
    if snap.limit_tokens:
        limits["limit_tokens"] = snap.limit_tokens
    out: list[SectionView] = []
    for s in sections_of(snap, instructions=snap.instructions, extra=snap.extra_sections()):
        if s.units:
            start = int(bool(built.messages) and built.messages[0].role == "system")
            start += int("goal" in built.texts)
            text = "\n".join(_line(m) for m in built.messages[start:])
        else:
            text = built.texts.get(s.name, "")
        out.append(
            SectionView(
                name=s.name,
                priority=s.priority,
                tokens=built.sections.get(s.name, 0),
                cut=s.name in built.cut,
                text=text,
            )
        )
    return ContextView(
        run_id=state.run_id,
        sections=out,
        total_tokens=built.total_tokens,
        budget_tokens=built.budget_tokens,
        context_hash=built.context_hash,
        model_turns=model_turns(snap),
        compactions=snap.compactions,
        checkpoint_seq=state.user_checkpoint_seq,
        built=built,
        limits={
            **snap.limits,
            **({"limit_tokens": snap.limit_tokens} if snap.limit_tokens else {}),
        },
    )


def _line(m: Message) -> str:
    calls = "".join(f" -> {c.name}({serde.dumps(c.arguments)})" for c in m.tool_calls)
    text = m.content if len(m.content) <= 200 else m.content[:197] + "..."
    return f"{m.role}: {text}{calls}".replace("\n", " ")


def no_context_reason(state: RunState) -> str:
    """Why :func:`context_view` has no context for the run (it returned None), in one line
    naming the run: no checkpoint yet (an agent saves its first at the boundary after its
    first plan's calls — a run waiting for an approval of a first-plan call has none), a
    checkpoint that is not an agent's working memory, or one of another snapshot version."""
    rid = state.run_id
    where = f"it is {state.status.value}"
    if state.wait is not None:
        where += f" ({state.wait.kind} {state.wait.name!r})"
    if state.user_state is None:
        agent = bool(state.plan) or state.usage.model_calls > 0
        if not agent and state.status is RunStatus.FINISHED:
            return (
                f"run {rid!r} is not an agent run: it finished with no agent checkpoint, so it "
                "has no context or fact ledger to show"
            )
        if not agent:
            return (
                f"run {rid!r} has no checkpoint: not an agent run, or it has not reached its "
                f"first boundary ({where})"
            )
        return (
            f"run {rid!r} has no agent checkpoint yet: an agent saves its first at the boundary "
            f"after its first plan's calls, so its next context cannot be shown before then "
            f"({where}; `torpor show {rid}` shows what it waits for)"
        )
    raw = state.user_state
    with contextlib.suppress(Exception):  # (shown as it is recorded when it does not decode)
        raw = serde.decode(raw)
    if isinstance(raw, dict) and "goal_text" in raw and raw.get("v") != SNAPSHOT_VERSION:
        return (
            f"run {rid!r}: its checkpoint (seq {state.user_checkpoint_seq}) is an agent snapshot "
            f"of version {raw.get('v')!r}, not {SNAPSHOT_VERSION}: this torpor cannot show it"
        )
    return (
        f"run {rid!r} is not an agent run: its checkpoint (seq {state.user_checkpoint_seq}) is "
        f"the workflow's own state, not an agent's working memory (`torpor show {rid}` shows it)"
    )


def holds(name: str) -> str:
    """What section ``name`` holds (``""`` for a provider's own section)."""
    return SECTION_HOLDS.get(name, "")


def limits_line(limits: dict[str, int]) -> str:
    """The limits as ``torpor context RUN`` prints them, in one line (docs/context.md)."""
    parts = []
    if "budget_tokens" in limits:
        parts.append(f"budget {limits['budget_tokens']} tokens")
    if "limit_tokens" in limits:
        parts.append(f"lowered to {limits['limit_tokens']} after a 'context too long'")
    if "buffer_tokens" in limits:
        parts.append(f"buffer part {limits['buffer_tokens']}")
    if "summary_tokens" in limits:
        parts.append(f"summary first takes {limits['summary_tokens']}, then what is left")
    if limits.get("recall_tokens"):
        parts.append(f"recall up to {limits['recall_tokens']}")
    if "result_chars" in limits:
        parts.append(f"tool results clipped at {limits['result_chars']} chars (head and tail)")
    if "max_plan_versions" in limits:
        v = limits.get("plan_version", 0)
        parts.append(f"plan version {v} of at most {limits['max_plan_versions']}")
    return "limits: " + "; ".join(parts)
