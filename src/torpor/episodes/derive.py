"""Episodes derived from a run's record: pure, no I/O (the history is the only input).

:func:`derive` walks a run's events once and yields an episode at every boundary: the run's
outcome (``ended``), each wait it began (``slept``), and each milestone — a tool call that
succeeds after earlier failed ones, or, in a plain workflow, a step that completes after it or
others failed (the fix that followed). Every episode is a function of the events up to its
boundary, so deriving it again after a crash yields the same row (same id, same text, same
``created_at_ms``: the boundary event's time).

The lesson is the record read back: the calls (or steps) that failed with their errors and the
reason the planner gave for trying them, the fix that followed, the verifications that passed or
failed. The claims (``{tool: "failed" | "succeeded"}``, the latest of each) are what a later
episode may contradict (:mod:`torpor.episodes.store` supersedes on that).

The decisions a run's plans recorded, with their reasons, and the approaches its planner said
failed are in the lesson too (``decided under plan vN: …``, ``ruled out under plan vN: …``):
the typed records :mod:`torpor.memory.facts` extracts from each plan's text (its reason — a
model planner's reply — and each step's ``why``), the ``decision`` and ``failure`` ones, at most
:data:`MAX_DECISIONS` (the latest). The same extraction as the working memory's, so what the
run's own summary kept as a decision is what its episodes carry.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..history import (
    ArtifactCreated,
    Event,
    PlanRecorded,
    RunFinished,
    RunStarted,
    StepCompleted,
    StepFailed,
    ToolCallSettled,
    VerificationRecorded,
    WaitStarted,
)
from ..memory.facts import candidates, content_words, shape, text_segments
from ..serde import hash_value
from .model import Episode, episode_id_for

#: Characters kept of an error, an argument list or a reason in a lesson line.
DETAIL_CHARS = 200

#: Most decisions (and ruled-out approaches) a lesson carries: the latest.
MAX_DECISIONS = 8

#: The step id under which an agent records its lesson as a model phrased it, and the prefix
#: of the model call's step (:mod:`torpor.agents.lessons`).
PHRASED_STEP = "episode-lesson"
PHRASING_PREFIX = "episode-lesson"


def _clip(text: str, limit: int = DETAIL_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _brief(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


def _error_of(observation: Any) -> str:
    if isinstance(observation, dict) and "error" in observation:
        return _brief(observation["error"])
    return _brief(observation)


@dataclass
class _Failure:
    name: str
    args: str
    why: str
    error: str
    seq: int
    plan_version: int = 0


@dataclass
class _Walk:
    """What the walk has read so far."""

    goal: str = ""
    input_fingerprint: str = ""
    agentic: bool = False
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    tools: list[str] = field(default_factory=list)
    failures: list[_Failure] = field(default_factory=list)
    unfixed: list[_Failure] = field(default_factory=list)
    fixes: list[tuple[str, str, int, list[str]]] = field(default_factory=list)
    verifications: dict[str, tuple[bool, str, int]] = field(default_factory=dict)
    artifacts: list[str] = field(default_factory=list)
    claims: dict[str, str] = field(default_factory=dict)
    succeeded: list[str] = field(default_factory=list)
    #: The lesson as a model phrased it (a recorded ``lesson`` step), when there is one.
    phrased: str = ""
    #: ``(kind, plan version, text)`` of the plans' decisions and ruled-out approaches.
    decisions: list[tuple[str, int, str]] = field(default_factory=list)

    def plan_facts(self, p: PlanRecorded) -> None:
        """The decisions and failed approaches the plan's text records (:mod:`..memory.facts`)."""
        segs = text_segments(p.reason, "model") if p.reason else []
        for st in p.steps:
            if st.why:
                segs += text_segments(st.why, "model")
        if not segs:
            return
        shapes = Counter(shape(x.text) for x in segs)
        goal = frozenset(content_words(self.goal))
        seen = {t for _k, _v, t in self.decisions}
        for f in candidates(segs, goal, shapes, p.version, f"plan@v{p.version}"):
            if f.kind in ("decision", "failure") and f.text not in seen:
                seen.add(f.text)
                self.decisions.append((f.kind, p.version, _clip(f.text)))
        del self.decisions[:-MAX_DECISIONS]

    def fail(self, f: _Failure) -> None:
        self.failures.append(f)
        self.unfixed.append(f)
        self.claims[f.name] = "failed"

    def fix(self, name: str, args: str, seq: int) -> bool:
        """A success; True when it followed unfixed failures (a milestone)."""
        self.claims[name] = "succeeded"
        if name not in self.succeeded:
            self.succeeded.append(name)
        if not self.unfixed:
            return False
        self.fixes.append((name, args, seq, [f.name for f in self.unfixed]))
        self.unfixed = []
        return True


@dataclass(frozen=True)
class RunFiling:
    """Where a run's episodes are filed: its scope, agent and task type."""

    run_id: str
    scope: str
    agent: str
    task_type: str


def derive(events: Iterable[Event], filing: RunFiling, *, after_seq: int = 0) -> list[Episode]:
    """The episodes at the boundaries of ``events`` (a run's history from seq 1) after
    ``after_seq``, in history order."""
    w = _Walk()
    return [
        _episode(w, filing, ev, *boundary)
        for ev, boundary in _walk(w, events)
        if boundary is not None and ev.seq > after_seq
    ]


def derive_into(w: _Walk, events: Iterable[Event]) -> None:
    """Read ``events`` into ``w``."""
    for _ in _walk(w, events):
        pass


def _walk(w: _Walk, events: Iterable[Event]) -> Iterator[tuple[Event, tuple[str, str, str] | None]]:
    """Read each event into ``w``; yield it with the boundary it makes, if any."""
    for ev in events:
        p = ev.payload
        boundary: tuple[str, str, str] | None = None  # (kind, outcome, headline)
        if isinstance(p, RunStarted):
            w.goal = p.goal
            w.input_fingerprint = hash_value(p.input)[:16]
        elif isinstance(p, PlanRecorded):
            w.agentic = True
            w.plan_facts(p)
            for st in p.steps:
                w.calls[st.call_id] = {
                    "tool": st.tool,
                    "args": _clip(_brief(st.args), 120),
                    "why": st.why,
                    "version": p.version,
                }
        elif isinstance(p, ToolCallSettled):
            call = w.calls.get(p.call_id, {"tool": p.call_id, "args": "", "why": "", "version": 0})
            tool = call["tool"]
            if p.outcome in ("succeeded", "failed") and tool not in w.tools:
                w.tools.append(tool)
            if p.outcome in ("failed", "invalid"):
                w.fail(
                    _Failure(
                        tool,
                        call["args"],
                        call["why"],
                        _clip(_error_of(p.observation)),
                        ev.seq,
                        call["version"],
                    )
                )
            elif p.outcome == "succeeded" and w.fix(tool, call["args"], ev.seq):
                boundary = ("milestone", "progress", f"{tool} succeeded after failures")
        elif isinstance(p, StepFailed) and not w.agentic:
            w.fail(_Failure(p.step_id, "", "", _clip(p.error), ev.seq))
        elif isinstance(p, StepCompleted) and not w.agentic and p.step_id in w.claims:
            if w.fix(p.step_id, "", ev.seq):
                boundary = ("milestone", "progress", f"{p.step_id} completed after failures")
        elif isinstance(p, StepCompleted) and p.step_id == PHRASED_STEP:
            if isinstance(p.result, dict) and isinstance(p.result.get("lesson"), str):
                w.phrased = p.result["lesson"]
        elif isinstance(p, VerificationRecorded):
            w.verifications[p.name] = (p.passed, _clip(_brief(p.detail), 120), ev.seq)
        elif isinstance(p, ArtifactCreated):
            if p.sha256 not in w.artifacts:
                w.artifacts.append(p.sha256)
        elif isinstance(p, WaitStarted):
            what = f"{p.kind} {p.name!r}" + (f": {_clip(p.reason)}" if p.reason else "")
            boundary = ("slept", "waiting", f"went to sleep waiting for {what}")
        elif isinstance(p, RunFinished):
            why = f": {_clip(p.reason)}" if p.reason else ""
            boundary = ("ended", str(p.outcome), f"ended {p.outcome}{why}")
        yield ev, boundary


def _lesson_lines(w: _Walk) -> list[str]:
    """The lesson read back from the record: failures with their errors and reasons, the
    fixes that followed, the verifications."""
    lines: list[str] = []
    for kind, version, text in w.decisions:
        verb = "decided" if kind == "decision" else "ruled out"
        lines.append(f"{verb} under plan v{version}: {text}")
    for x in w.failures:
        what = f"{x.name}({x.args})" if x.args else x.name
        plan = f" under plan v{x.plan_version}" if x.plan_version else ""
        why = f", tried because: {_clip(x.why, 120)}" if x.why else ""
        lines.append(f"{what} failed{plan}{why}; error: {x.error or 'none recorded'}")
    for name, args, _seq, after in w.fixes:
        what = f"{name}({args})" if args else name
        lines.append(f"then {what} succeeded (the fix after {', '.join(dict.fromkeys(after))})")
    for name, (passed, detail, _seq) in w.verifications.items():
        lines.append(
            f"verification {name} {'passed' if passed else 'failed'}"
            + (f": {detail}" if detail else "")
        )
    if not w.failures and w.succeeded:
        lines.append("succeeded without failures: " + ", ".join(w.succeeded))
    return lines


def lesson_of(events: Iterable[Event], filing: RunFiling) -> str:
    """The lesson the record holds so far — up to the agent's own phrasing step, so the text is
    the same when a resumed run asks again — or ``""`` when there is nothing to learn (no call
    or step failed)."""
    w = _Walk()
    cut = []
    for ev in events:
        sid = getattr(ev.payload, "step_id", None)
        if isinstance(sid, str) and sid.startswith(PHRASING_PREFIX):
            break
        cut.append(ev)
    derive_into(w, cut)
    if not w.failures:
        return ""
    return f"Agent {filing.agent}, task type {filing.task_type}. Goal: {w.goal}\n" + "\n".join(
        f"- {ln}" for ln in _lesson_lines(w)
    )


def _episode(w: _Walk, f: RunFiling, ev: Event, kind: str, outcome: str, head: str) -> Episode:
    boundary = f"{kind}@{ev.seq}"
    subject = "agent" if w.agentic else "workflow"
    summary = f"{subject} {f.agent} (task type {f.task_type}) {head}."
    if w.goal:
        summary += f" Goal: {_clip(w.goal)}."
    if w.tools:
        summary += " Tools used: " + ", ".join(w.tools) + "."
    lines = _lesson_lines(w)
    if w.phrased:
        lines.insert(0, f"in short: {_clip(w.phrased, 600)}")
    refs_events = sorted(
        {x.seq for x in w.failures}
        | {s for _n, _a, s, _f in w.fixes}
        | {s for _p, _d, s in w.verifications.values()}
        | {ev.seq}
    )
    return Episode(
        episode_id=episode_id_for(f.run_id, boundary),
        run_id=f.run_id,
        boundary=boundary,
        scope=f.scope,
        agent=f.agent,
        task_type=f.task_type,
        kind=kind,
        outcome=outcome,
        summary=summary,
        lesson="\n".join(f"- {ln}" for ln in lines),
        at_seq=ev.seq,
        created_at_ms=ev.at_ms,
        conditions={
            "agent": f.agent,
            "task_type": f.task_type,
            "tools": list(w.tools),
            "input_fingerprint": w.input_fingerprint,
        },
        refs={"events": refs_events, "artifacts": list(w.artifacts)},
        claims=dict(w.claims),
    )


__all__ = [
    "DETAIL_CHARS",
    "MAX_DECISIONS",
    "PHRASED_STEP",
    "PHRASING_PREFIX",
    "RunFiling",
    "derive",
    "lesson_of",
]
