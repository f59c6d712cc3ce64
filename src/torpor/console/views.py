"""What the console shows, derived from a run's history: waits with deadlines, steps with their
attempts, effects with their reconcile verdicts, messages with their dispositions, the
timeline, and unified diffs cut into lines.

Pure: functions of events, states and bytes; no I/O, no web framework. Every value is returned
as plain data; the templates escape it (Jinja2 autoescape), so nothing here builds HTML.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..history import (
    EffectFailed,
    EffectIntended,
    EffectObserved,
    EffectReconciled,
    Event,
    MessageView,
    RunState,
    StepCompleted,
    StepFailed,
    StepStarted,
    WaitCompleted,
    WaitStarted,
    utc_text,
)
from ..store import InboxMessage

#: Longest detail text of one timeline row.
DETAIL_CHARS = 160


def short(value: Any, limit: int = DETAIL_CHARS) -> str:
    """``value`` as one line of text (JSON for data), cut to ``limit`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def when(ms: int | None) -> str:
    """Epoch milliseconds as UTC text, ``-`` for none."""
    return utc_text(ms) if ms else "-"


# ------------------------------------------------------------------------------ waits


@dataclass
class WaitRow:
    wait_id: str
    kind: str
    name: str
    reason: str
    started_at: str
    deadline: str
    deadline_ms: int | None
    status: str  # open | completed by <via>


def waits_of(events: Iterable[Event]) -> list[WaitRow]:
    """Every wait of the history, newest first: when it began, its deadline, how it ended."""
    rows: dict[str, WaitRow] = {}
    for ev in events:
        p = ev.payload
        if isinstance(p, WaitStarted):
            rows[p.wait_id] = WaitRow(
                p.wait_id,
                p.kind,
                p.name,
                p.reason,
                when(ev.at_ms),
                when(p.deadline_ms),
                p.deadline_ms,
                "open",
            )
        elif isinstance(p, WaitCompleted) and p.wait_id in rows:
            rows[p.wait_id].status = f"ended by {p.via} at {when(ev.at_ms)}"
    return list(reversed(rows.values()))


# ------------------------------------------------------------------------------ steps


@dataclass
class Attempt:
    number: int
    started_at: str
    ended: str  # completed | failed: … | no end recorded (crashed, or still running)


def attempts_of(events: Iterable[Event]) -> dict[str, list[Attempt]]:
    """Each step's attempts in order: when each began and how it ended. An attempt with no
    recorded end was cut short by a crash (or is still running, for the latest one)."""
    out: dict[str, list[Attempt]] = {}
    for ev in events:
        p = ev.payload
        if isinstance(p, StepStarted):
            out.setdefault(p.step_id, []).append(
                Attempt(p.attempt, when(ev.at_ms), "no end recorded")
            )
        elif isinstance(p, StepCompleted):
            tries = out.setdefault(p.step_id, [])
            if p.attempt:  # a whole read/compute attempt in one event
                tries.append(Attempt(p.attempt, when(ev.at_ms), "completed"))
            elif tries:
                tries[-1].ended = f"completed at {when(ev.at_ms)}"
        elif isinstance(p, StepFailed):
            tries = out.setdefault(p.step_id, [])
            if tries:
                tries[-1].ended = f"failed at {when(ev.at_ms)}: {short(p.error, 200)}"
    return out


# ------------------------------------------------------------------------------ effects


@dataclass
class EffectEntry:
    at: str
    what: str  # intended (attempt n) | observed | reconciled: verdict | failed
    detail: str = ""


def effect_history(events: Iterable[Event]) -> dict[str, list[EffectEntry]]:
    """Each effect key's record in order: intents, observations, reconcile verdicts (with
    their reason and who gave them: the engine, or a person), failures."""
    out: dict[str, list[EffectEntry]] = {}
    for ev in events:
        p = ev.payload
        at = when(ev.at_ms)
        if isinstance(p, EffectIntended):
            out.setdefault(p.key, []).append(EffectEntry(at, f"intended (attempt {p.attempt})"))
        elif isinstance(p, EffectObserved):
            out.setdefault(p.key, []).append(EffectEntry(at, "observed"))
        elif isinstance(p, EffectReconciled):
            who = "" if p.by == "engine" else f" by {p.by}"
            out.setdefault(p.key, []).append(
                EffectEntry(at, f"reconciled: {p.verdict.value}{who}", p.reason)
            )
        elif isinstance(p, EffectFailed):
            out.setdefault(p.key, []).append(EffectEntry(at, "failed", short(p.error, 300)))
    return out


# ------------------------------------------------------------------------------ messages


@dataclass
class MessageRow:
    message_id: str
    kind: str
    name: str
    arrived: str
    status: str


def message_rows(
    messages: Sequence[MessageView], inbox: Sequence[InboxMessage], state: RunState
) -> list[MessageRow]:
    """Every message the run received with its disposition (G11), then those still in its
    inbox (taken when the run next moves)."""
    rows = []
    for m in messages:
        status = m.status
        if m.status == "consumed":
            status = f"consumed by wait {m.wait_id}"
            if m.kind == "steer":  # an operator's message (issue 39), taken by a boundary
                status = f"taken by the agent at {m.wait_id}"
        elif m.status == "buffered" and m.kind == "steer":
            status = "pending: the agent takes it before its next model call"
        elif m.status in ("refused", "late"):
            status = f"{m.status}: {m.reason}"
        elif m.status == "buffered":
            status = "buffered: no wait for it yet" + (
                f" (answers wait {m.wait_id})" if m.wait_id else ""
            )
        rows.append(MessageRow(m.message_id, m.kind, m.name or "-", when(m.arrived_at_ms), status))
    w = state.wait
    for p in inbox:
        name = str(p.body.get("name") or "-") if p.kind == "signal" else "-"
        if p.kind == "signal" and w is not None and w.kind == "signal" and w.name == name:
            status = f"in the inbox: wait {w.wait_id} takes it when the run moves"
        else:
            status = "in the inbox: applied when the run moves"
        rows.append(MessageRow(p.message_id, p.kind, name, when(p.at_ms), status))
    return rows


# ------------------------------------------------------------------------------ timeline


@dataclass
class EventRow:
    seq: int
    epoch: int
    at: str
    type: str
    step_id: str
    detail: str


def timeline(events: Iterable[Event]) -> list[EventRow]:
    """The history as rows: seq, lease epoch, time, type, step and a one-line detail."""
    rows = []
    for e in events:
        detail = e.payload.model_dump(mode="json", exclude={"step_id"})
        rows.append(
            EventRow(e.seq, e.epoch, when(e.at_ms), e.type, e.step_id or "-", short(detail))
        )
    return rows


# ------------------------------------------------------------------------------ diffs


@dataclass
class DiffLine:
    kind: str  # file | hunk | add | del | ctx | meta
    text: str


@dataclass
class DiffFile:
    old: str
    new: str
    added: int = 0
    removed: int = 0
    lines: list[DiffLine] = field(default_factory=list)


def looks_like_diff(name: str, media_type: str, text: str) -> bool:
    """Whether an artifact is a unified diff (by media type, name, or its first lines)."""
    if media_type in ("text/x-diff", "text/x-patch", "text/x-udiff"):
        return True
    head = text[:4096]
    return ("\n+++ " in head or head.startswith("+++ ")) and (
        head.startswith(("--- ", "diff ")) or "\n--- " in head
    )


def parse_diff(text: str) -> list[DiffFile]:
    """A unified diff cut into files and classified lines (file headers, hunks, added,
    removed, context). Text before the first file header is kept as ``meta`` lines."""
    files: list[DiffFile] = []
    cur = DiffFile("", "")
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            if any(x.kind not in ("file", "meta") for x in cur.lines):  # a new file begins
                files.append(cur)
                cur = DiffFile("", "")
            cur.old, cur.new = line[4:].split("\t")[0], lines[i + 1][4:].split("\t")[0]
            cur.lines += [DiffLine("file", line), DiffLine("file", lines[i + 1])]
            i += 2
            continue
        if line.startswith("diff "):
            if cur.lines:
                files.append(cur)
                cur = DiffFile("", "")
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("index "):
            kind = "file"
        elif line.startswith("+"):
            kind = "add"
            cur.added += 1
        elif line.startswith("-"):
            kind = "del"
            cur.removed += 1
        elif line.startswith(" ") or line == "":
            kind = "ctx"
        else:
            kind = "meta"
        cur.lines.append(DiffLine(kind, line))
        i += 1
    if cur.lines:
        files.append(cur)
    return files


__all__ = [
    "Attempt",
    "DiffFile",
    "DiffLine",
    "EffectEntry",
    "EventRow",
    "MessageRow",
    "WaitRow",
    "attempts_of",
    "effect_history",
    "looks_like_diff",
    "message_rows",
    "parse_diff",
    "short",
    "timeline",
    "waits_of",
    "when",
]
