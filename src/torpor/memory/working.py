"""What an agent's checkpoint holds (:class:`AgentSnapshot`) and the one function that builds
the next model call's context from it (:func:`next_context`) — used by the agent before each
model call, by ``torpor context RUN`` and by the console's run page alike, so what they show is
what the agent would send.

The snapshot is plain JSON data saved with ``run.checkpoint`` at the agent loop's boundaries:
the plan (calls, order, version), the working buffer, the running summary, the counters, the
calibration and the latest checkpoint's four answers (taken when it was saved, so a resumed
run builds byte-for-byte the context an uninterrupted one would).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from ..messages import Message, ToolSpec
from .buffer import Buffer
from .compaction import Summary
from .config import Memory
from .context import PRIORITIES, BuiltContext, ContextSection, build_context
from .tokens import Calibration, estimate_tools

#: The version of the snapshot's shape (a checkpoint of another version is not restored: the
#: agent then replays from the start as before).
SNAPSHOT_VERSION = 1

DURABLE_TEXT = (
    "You are a durable agent. Use the tools to reach the goal; answer without a tool call when "
    "you are done."
)


class CallState(BaseModel):
    """A planned call as the checkpoint keeps it (see :class:`torpor.agents.calls.PlannedCall`)."""

    call_id: str
    tool: str
    args: Any = None
    args_hash: str = ""
    depends_on: list[str] = Field(default_factory=list)
    why: str = ""
    version: int = 0
    status: str = "pending"
    observation: Any = None
    #: The observation was too large to keep in the checkpoint
    #: (:data:`OBSERVATION_INLINE_CHARS`): it is read back from the call's recorded outcome.
    in_history: bool = False


#: Largest observation (JSON characters) a checkpoint holds; a larger one is read back from the
#: history (``settle:<call>@v<version>``) on resume, so the checkpoint stays far below the
#: payload limit whatever the tools return.
OBSERVATION_INLINE_CHARS = 8192


class AgentSnapshot(BaseModel):
    """An agent's loop state at a boundary: enough to continue without replaying its turns,
    and to build its next context (:func:`next_context`)."""

    v: int = SNAPSHOT_VERSION
    goal_text: str
    system_text: str
    tool_tokens: int = 0
    budget_tokens: int
    summary_tokens: int
    version: int = 0
    calls: list[CallState] = Field(default_factory=list)
    order: list[str] = Field(default_factory=list)
    retired: list[str] = Field(default_factory=list)
    need_plan: bool = True
    final: str = ""
    turn: int = 0
    buffer: Buffer = Field(default_factory=Buffer)
    summary: Summary = Field(default_factory=Summary)
    compactions: int = 0
    failed_summaries: int = 0
    #: Buffer units when the latest summary failed (compaction waits for one more).
    failed_at: int = 0
    calibration: Calibration = Field(default_factory=Calibration)
    answers: dict[str, Any] = Field(default_factory=dict)
    artifacts: dict[str, str] = Field(default_factory=dict)
    #: The planner's instructions and the provider sections (name, priority, text) of the
    #: latest context built: what ``torpor context RUN`` shows for them.
    instructions: str = ""
    extra: list[tuple[str, int, str]] = Field(default_factory=list)
    #: The context's budget after a provider refused one as too long (0: none; the lower of
    #: it and ``budget_tokens`` holds).
    limit_tokens: int = 0
    #: The limits in force when it was saved (budget parts, result clip, plan-version cap):
    #: what ``torpor context RUN`` shows.
    limits: dict[str, int] = Field(default_factory=dict)

    def extra_sections(self) -> list[ContextSection]:
        return [ContextSection(n, p, t) for n, p, t in self.extra]


def goal_text(goal: str, criteria: Sequence[str], input: Any) -> str:
    """The first user message: the goal, the completion criteria and the input (JSON)."""
    crit = ", ".join(criteria) or "none declared"
    return f"Goal: {goal}\nCompletion criteria: {crit}\nInput (JSON): " + json.dumps(
        input, sort_keys=True
    )


def system_text(*parts: str) -> str:
    return "\n\n".join(x for x in (*parts, DURABLE_TEXT) if x)


def tool_tokens(specs: Sequence[ToolSpec]) -> int:
    return estimate_tools(specs)


def plan_text(snap: AgentSnapshot) -> str:
    """The current plan version with each step's status, and a count of earlier calls."""
    if not snap.order and not snap.calls:
        return ""
    by_id = {c.call_id: c for c in snap.calls}
    lines = [f"plan v{snap.version}:"]
    for cid in snap.order:
        c = by_id.get(cid)
        if c is None:
            continue
        after = f" after {', '.join(c.depends_on)}" if c.depends_on else ""
        why = f" — {c.why}" if c.why else ""
        args = json.dumps(c.args, sort_keys=True, default=str)
        if len(args) > 160:
            args = args[:157] + "..."
        lines.append(f"- {cid}: {c.tool}({args}){after} [{c.status}]{why}")
    earlier: dict[str, int] = {}
    for c in snap.calls:
        if c.call_id not in snap.order:
            earlier[c.status] = earlier.get(c.status, 0) + 1
    if snap.retired:
        earlier["summarized"] = len(snap.retired)
    if earlier:
        lines.append("earlier calls: " + ", ".join(f"{n} {k}" for k, n in sorted(earlier.items())))
    return "\n".join(lines)


#: The order the four answers are shown in (DESIGN.md §1); other keys follow, sorted.
_ANSWER_ORDER = ("establishing", "evidence", "effects", "effects_performed", "next")


def answers_text(answers: dict[str, Any]) -> str:
    """The checkpoint's answers as context text, in a fixed order: a recorded value read back
    from the store has its keys sorted (canonical JSON), so the text must not depend on the
    dict's order, or a resumed run's prompt would differ from the one it recorded."""
    if not answers:
        return ""
    keys = [k for k in _ANSWER_ORDER if k in answers]
    keys += sorted(k for k in answers if k not in _ANSWER_ORDER)
    return "\n".join(
        f"{k}: {json.dumps(v, sort_keys=True, default=str) if not isinstance(v, str) else v}"
        for k, v in ((k, answers[k]) for k in keys)
    )


def sections_of(
    snap: AgentSnapshot, *, instructions: str = "", extra: Sequence[ContextSection] = ()
) -> list[ContextSection]:
    """The agent's sections, in the order they are placed, and the ``extra`` ones."""
    scale = snap.calibration.scale
    units = snap.buffer.units
    buf = ContextSection(
        "buffer",
        PRIORITIES["buffer"],
        units=tuple(tuple(u.messages()) for u in units),
        pinned=frozenset(snap.buffer.pinned()),
        unit_tokens=tuple(scale(u.tokens()) for u in units),
        placement="conversation",
    )
    artifacts = "\n\n".join(f"sha256:{h}\n{text}" for h, text in sorted(snap.artifacts.items()))
    status = f"(Model turns so far: {model_turns(snap)}.)"
    system = "\n\n".join(x for x in (status, snap.system_text, instructions) if x)
    return [
        ContextSection("system", PRIORITIES["goal"], system, placement="system"),
        ContextSection(
            "summary",
            PRIORITIES["summary"],
            snap.summary.header(),
            ranked=snap.summary.ranked(),
            cap=scale(snap.summary_tokens),
        ),
        ContextSection("plan", PRIORITIES["plan"], plan_text(snap)),
        ContextSection("checkpoint", PRIORITIES["checkpoint"], answers_text(snap.answers)),
        *extra,
        ContextSection("artifacts", PRIORITIES["artifacts"], artifacts),
        ContextSection("goal", PRIORITIES["goal"], snap.goal_text, placement="goal"),
        buf,
    ]


def model_turns(snap: AgentSnapshot) -> int:
    """How many model turns the agent has taken: those folded into the summary and those in
    the buffer (the context says so, whatever the budget left out)."""
    return snap.summary.model_turns_folded + sum(1 for u in snap.buffer.units if u.kind == "model")


def next_context(
    snap: AgentSnapshot, *, instructions: str = "", extra: Sequence[ContextSection] = ()
) -> BuiltContext:
    """The context the agent's next model call gets from ``snap`` (see :mod:`.context`).

    The budget is ``snap.budget_tokens`` divided by the calibration ratio (so a provider that
    counts more than the estimate is given less by the estimate); the tool definitions are
    charged first."""
    budget = snap.budget_tokens
    if snap.limit_tokens:
        budget = min(budget, snap.limit_tokens)
    budget = int(budget / max(snap.calibration.ratio, 1.0))
    return build_context(
        budget,
        sections_of(snap, instructions=instructions, extra=extra),
        fixed_tokens=snap.calibration.scale(snap.tool_tokens),
    )


def config_of(memory: Memory) -> dict[str, int]:
    return {"budget_tokens": memory.budget_tokens, "summary_tokens": memory.summary_tokens}


def transcript_tokens(messages: Sequence[Message]) -> int:
    """Tokens of a whole transcript by the same estimate (what replaying it would cost)."""
    from .tokens import estimate_request

    return estimate_request(messages)
