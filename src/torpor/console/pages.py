"""What each console page shows, gathered through :class:`~torpor.Client` (never the store's
internals): the runs list with its filters and counts, a run, an approval under review, an
artifact. Returns plain data for the templates; no web framework here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..client import Client
from ..errors import ArtifactNotFoundError, TorporError
from ..history import (
    REOPENABLE,
    ApprovalRequested,
    ArtifactRef,
    Event,
    Outcome,
    RunState,
    RunStatus,
)
from ..keys import Trust
from ..memory.view import context_view
from ..queues import why_not_running
from ..report.approvals import decision_line
from ..report.hidden import hidden_chars
from ..report.run import RunSummary, gather, lease_text, summarize
from . import views
from .views import short, when

#: Wait kinds that only a person ends.
PERSON_WAITS = ("approval", "resolution")
#: At most this many waiting runs are folded to find those waiting for a person.
PERSON_SCAN = 500
#: Text shown on a page is cut here (the raw bytes are a download away).
MAX_TEXT_BYTES = 1 << 20
#: The run page shows this many latest events (the events page pages through all of them).
TIMELINE_ROWS = 200
#: A run page's table (steps, artifacts, the history) with more rows than this starts
#: collapsed, its row count in its summary: a long run's page stays a screen or two tall.
FOLD_ROWS = 25
STATUSES = [s.value for s in RunStatus]
OUTCOMES = [o.value for o in Outcome]
SHOWS = {"person": "waiting for a person", "attention": "needs attention"}


# ------------------------------------------------------------------------------ runs list


@dataclass(frozen=True)
class Filters:
    """The runs list's filters (query parameters), each checked against what exists."""

    status: str | None = None
    outcome: str | None = None
    workflow: str | None = None
    show: str | None = None  # person | attention
    limit: int = 100

    @classmethod
    def parse(cls, q: Any) -> Filters:
        def pick(name: str, allowed: Any) -> str | None:
            v = (q.get(name) or "").strip()
            return v if v and (allowed is None or v in allowed) else None

        try:
            limit = max(1, min(int(q.get("limit") or 100), 1000))
        except ValueError:
            limit = 100
        return cls(
            status=pick("status", STATUSES),
            outcome=pick("outcome", OUTCOMES),
            workflow=pick("workflow", None),
            show=pick("show", SHOWS),
            limit=limit,
        )

    def query(self) -> dict[str, str]:
        """The non-empty filters, as query parameters."""
        d = {"status": self.status, "outcome": self.outcome, "workflow": self.workflow}
        d["show"] = self.show
        return {k: v for k, v in d.items() if v}


@dataclass
class RunRow:
    run_id: str
    workflow: str
    version: str
    status: str
    waiting_for: str
    outcome: str
    updated: str
    events: int
    attention: str


def _person_waiting(states: dict[str, RunState]) -> set[str]:
    return {
        rid for rid, st in states.items() if st.wait is not None and st.wait.kind in PERSON_WAITS
    }


def runs_page(client: Client, f: Filters) -> dict[str, Any]:
    """The runs list: rows for the filters, counts per status and outcome, and how many runs
    wait for a person or need attention."""
    counted = client.counts(workflow=f.workflow)
    by_status: Counter[str] = Counter()
    by_outcome: Counter[str] = Counter()
    attention = 0
    for c in counted:
        by_status[c.status] += c.count
        if c.outcome:
            by_outcome[c.outcome] += c.count
        attention += c.count if c.attention else 0
    waiting = client.runs(status="waiting", workflow=f.workflow, limit=PERSON_SCAN)
    states = {r.run_id: _state(client, r.run_id) for r in waiting}
    person = _person_waiting({k: v for k, v in states.items() if v is not None})
    if f.show == "person":
        recs = [r for r in waiting if r.run_id in person][: f.limit]
    else:
        recs = client.runs(
            status=f.status,
            outcome=f.outcome,
            workflow=f.workflow,
            attention=True if f.show == "attention" else None,
            limit=f.limit,
        )
    now = client.store.now_ms()
    rows = []
    for r in recs:
        st = states.get(r.run_id) if r.status == "waiting" else None
        if st is None and r.status == "waiting":
            st = _state(client, r.run_id)
        w = st.wait if st is not None else None
        rows.append(
            RunRow(
                r.run_id,
                r.workflow,
                r.version,
                lease_text(r, now),
                f"{w.kind} {w.name}"
                if w is not None
                else (why_not_running(client.store, r.run_id) or "")
                if r.status == "pending"
                else "",
                r.outcome or "",
                when(r.updated_at_ms),
                r.last_seq,
                short((r.attention or "").split(": ", 1)[0], 80),
            )
        )
    return {
        "rows": rows,
        "filters": f,
        "total": sum(by_status.values()),
        "by_status": [(s, by_status.get(s, 0)) for s in STATUSES],
        "by_outcome": [(o, by_outcome.get(o, 0)) for o in OUTCOMES],
        "person": len(person),
        "person_capped": len(waiting) >= PERSON_SCAN,
        "attention": attention,
        "statuses": STATUSES,
        "outcomes": OUTCOMES,
        "shows": SHOWS,
    }


def _state(client: Client, run_id: str) -> RunState | None:
    try:
        return client.state(run_id)
    except TorporError:
        return None  # a run that cannot be folded is listed without its wait


# ------------------------------------------------------------------------------ a run


@dataclass
class StepRow:
    step_id: str
    policy: str
    status: str
    attempts: int
    purpose: str
    tries: list[views.Attempt]


@dataclass
class EffectRow:
    key: str
    step_id: str
    operation: str
    status: str
    attempt: int
    reason: str
    history: list[views.EffectEntry]
    resolvable: bool


@dataclass
class ApprovalRow:
    approval_id: str
    name: str
    status: str
    summary: str
    hashes: list[str]
    approvers: list[str]
    required: int
    lines: list[tuple[str, str]]
    refusals: list[str]
    pending: bool
    decision_in_inbox: bool
    revocable: bool


@dataclass
class Storage:
    events: int
    history_bytes: int
    checkpoint_bytes: int
    inbox_messages: int
    inbox_bytes: int
    artifacts: int
    artifact_bytes: int
    total_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.total_bytes = (
            self.history_bytes + self.checkpoint_bytes + self.inbox_bytes + self.artifact_bytes
        )


def summary(client: Client, run_id: str) -> dict[str, Any]:
    """The live part of a run page (polled): status, outcome, the four answers, lease."""
    return _summary(summarize(client, run_id))


def _summary(live: RunSummary) -> dict[str, Any]:
    rec, state = live.rec, live.state
    return {
        "run_id": rec.run_id,
        "status": state.status.value,
        "status_text": live.status_text,
        "wait": state.wait,
        "outcome": state.outcome.value if state.outcome else "",
        "reason": state.outcome_reason,
        "result": short(state.result, 600) if state.result is not None else "",
        "attention": state.attention,
        "not_running": live.not_running if state.status is RunStatus.PENDING else None,
        "cancel_requested": state.cancel_requested,
        "last_seq": rec.last_seq,
        "checkpoint_seq": rec.checkpoint_seq,
        "updated": when(rec.updated_at_ms),
        "lease": live.lease,
        "infra": live.infra,
        "establishing": live.establishing or "",
        "verifications": live.verifications,
        "evidence_artifacts": live.evidence_artifacts,
        # Each artifact's latest version, one per line (name, version, hash prefix, link).
        "evidence_refs": sorted(state.artifacts.values(), key=lambda a: a.name),
        "in_doubt": live.in_doubt,
        "effects_performed": live.effects_performed,
        "next": live.next,
    }


def run_page(client: Client, run_id: str, trust: Trust | None) -> dict[str, Any]:
    """Everything the run page shows (see the module docstring of :mod:`torpor.console`),
    from the run's report (:func:`torpor.report.run.gather`, with its events)."""
    report = gather(client, run_id, events=True)
    rec, state, inbox = report.rec, report.state, report.inbox
    events = report.events or []
    finished = state.status is RunStatus.FINISHED
    tries = views.attempts_of(events)
    steps = [
        StepRow(s.step_id, s.policy, s.status, s.attempts, s.purpose, tries.get(s.step_id, []))
        for s in report.steps
    ]
    effect_log = views.effect_history(events)
    reopenable = not finished or state.outcome in REOPENABLE
    effects = [
        EffectRow(
            e.key,
            e.step_id,
            e.operation,
            e.status,
            e.attempt,
            e.reason,
            effect_log.get(e.key, []),
            e.status in ("intended", "unknown") and reopenable,
        )
        for e in report.effects
    ]
    arts = report.artifacts
    unique = {a.sha256: a.size for a in arts}
    st = report.storage
    storage = Storage(
        st.events,
        st.history_bytes,
        st.checkpoint_bytes,
        st.inbox_messages,
        st.inbox_bytes,
        len(unique),
        sum(unique.values()),
    )
    is_agent = report.is_agent
    blocked = finished and state.outcome is Outcome.BLOCKED
    return {
        "rec": rec,
        "state": state,
        "live": _summary(report.summary),
        "created": when(rec.created_at_ms),
        "steps": steps,
        "open_steps": [k for k, v in state.steps.items() if v.status == "started"],
        "effects": effects,
        "waits": views.waits_of(events),
        "approvals": approval_rows(run_id, state, events, inbox, trust),
        "artifacts": arts,
        "parent": report.parent,
        "children": report.children,
        "messages": views.message_rows(report.messages, inbox, state),
        "storage": storage,
        "is_agent": is_agent,
        "context": context_view(state) if is_agent else None,
        "plan": sorted(state.plan.items(), key=lambda kv: (kv[1].version, kv[0])),
        "usage": state.usage,
        "budget": state.budget,
        "timeline": views.timeline(events[-TIMELINE_ROWS:]),
        "timeline_cut": max(0, len(events) - TIMELINE_ROWS),
        "fold_rows": FOLD_ROWS,
        "can_cancel": not finished and not state.cancel_requested,
        "can_signal": not finished,
        "can_budget": not finished or blocked,
        "can_retry": blocked,
        "result_full": state.result,
    }


def approval_rows(
    run_id: str,
    state: RunState,
    events: list[Event],
    inbox: list[Any],
    trust: Trust | None,
) -> list[ApprovalRow]:
    """Each approval with the content hashes it binds, who decided and whether each decision
    verifies against this machine's keyring."""
    summaries = {
        e.payload.approval_id: e.payload.summary
        for e in events
        if isinstance(e.payload, ApprovalRequested)
    }
    decided = {m.body.get("approval_id") for m in inbox if m.kind == "decision"}
    finished = state.status is RunStatus.FINISHED
    open_ = state.open_approvals()
    rows = []
    for aid, info in state.approvals.items():
        lines = [decision_line(run_id, aid, info, d, trust) for d in info.counted()]
        status: str = info.status
        if status == "requested" and aid not in open_:
            status = "timed out without a decision"
        rows.append(
            ApprovalRow(
                aid,
                info.name,
                status,
                summaries.get(aid, ""),
                list(info.hashes),
                list(info.approvers),
                info.required,
                [(text.strip(), style) for text, style in lines],
                list(info.refusals),
                aid in open_ and not finished,
                aid in decided and aid in open_,
                not finished and (info.status == "approved" or aid in decided),
            )
        )
    return rows


# ------------------------------------------------------------------------------ content


@dataclass
class Content:
    """An artifact's bytes as a page shows them."""

    ref: ArtifactRef
    text: str | None  # None: binary
    truncated: bool
    diff: list[views.DiffFile] | None
    #: The invisible or bidi characters in the text and the name (``U+202E``…): the page is
    #: flagged and shows them escaped (:mod:`torpor.report.hidden`).
    hidden: list[str] = field(default_factory=list)
    #: Why the bytes cannot be shown as bound (altered or missing in the artifact store), or
    #: None: the page says so, and offers no decision on it.
    problem: str | None = None


def content(client: Client, ref: ArtifactRef) -> Content:
    """The artifact's content (hash-verified by the artifact store): text, cut at
    :data:`MAX_TEXT_BYTES`, and the unified diff view when it is a patch. Bytes the artifact
    store cannot give as bound — altered (their sha256 differs) or missing — are a Content with
    the ``problem`` named, not an error page."""
    try:
        data = client.artifact_bytes(ref.sha256)
    except ArtifactNotFoundError:
        raise
    except TorporError as exc:
        why = (
            f"the stored bytes of this content cannot be shown as bound: {exc}. They were "
            "altered or removed after the run recorded them; do not decide on them — run "
            "`torpor doctor` and ask for the content again"
        )
        return Content(ref, None, False, None, hidden_chars(ref.name), why)
    cut = data[:MAX_TEXT_BYTES]
    try:
        text = cut.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(cut) - 4:  # not just a character cut in half at the limit
            return Content(ref, None, False, None, hidden_chars(ref.name))
        text = cut[: exc.start].decode("utf-8")
    diff = views.parse_diff(text) if views.looks_like_diff(ref.name, ref.media_type, text) else None
    hidden = sorted(set(hidden_chars(text)) | set(hidden_chars(ref.name)))
    return Content(ref, text, len(data) > len(cut), diff, hidden)


def find_by_hash(client: Client, run_id: str, sha256: str) -> list[ArtifactRef]:
    """The run's artifact versions with exactly this content hash (ArtifactNotFoundError
    when none)."""
    refs = [a for a in client.artifacts(run_id) if a.sha256 == sha256]
    if not refs:
        raise ArtifactNotFoundError(f"run {run_id!r} has no artifact with sha256 {sha256}")
    return refs


def approval_page(client: Client, run_id: str, approval_id: str, trust: Trust | None) -> Any:
    """An approval under review: what it binds, each bound content in full, its decisions."""
    state = client.state(run_id)
    events = client.events(run_id)
    rows = approval_rows(run_id, state, events, client.inbox(run_id), trust)
    row = next((r for r in rows if r.approval_id == approval_id), None)
    if row is None:
        return None
    bound = []
    for h in row.hashes:
        refs = [a for a in client.artifacts(run_id) if a.sha256 == h]
        # Bound content the run did not record as an artifact is still shown by its hash.
        ref = (
            refs[-1] if refs else ArtifactRef(name=f"sha256:{h[:12]}", sha256=h, version=0, size=0)
        )
        bound.append((refs, content(client, ref)))
    hidden = {h for _, shown in bound for h in shown.hidden} | set(hidden_chars(row.summary))
    hidden |= {h for refs, _ in bound for r in refs for h in hidden_chars(r.name)}
    problems = [shown.problem for _, shown in bound if shown.problem]
    return {
        "approval": row,
        "bound": bound,
        "state": state,
        "hidden": sorted(hidden),
        "problems": problems,
    }


__all__ = [
    "Filters",
    "approval_page",
    "content",
    "find_by_hash",
    "run_page",
    "runs_page",
    "summary",
]
