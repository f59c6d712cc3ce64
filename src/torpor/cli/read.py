"""Commands that read runs and change nothing: ``ls``, ``show`` and ``events``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..history import Outcome, RunStatus
from .context import open_client
from .listing import print_runs
from .past import context_fields, forks_table, origin_line, past_line
from .render import (
    add_row,
    console,
    emit_json,
    fields,
    heading,
    new_table,
    plain,
    relative,
    short,
    when,
)
from .root import JsonFlag, RunId, options

if TYPE_CHECKING:
    from ..history import MessageView, WaitInfo
    from ..store.base import InboxMessage

# ``show`` and ``events`` import the report, the models and the storage figures in their
# bodies: ``ls`` imports only what it prints (issue 48).


def list_runs(
    ctx: typer.Context,
    status: Annotated[
        RunStatus | None, typer.Option("--status", help="Only runs with this status.")
    ] = None,
    outcome: Annotated[
        Outcome | None, typer.Option("--outcome", help="Only finished runs with this outcome.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many runs.")] = 50,
    tree: Annotated[
        bool, typer.Option("--tree", help="Each run's child runs under it, indented.")
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """List runs, newest first (--tree: child runs under the run that started them).

    Example: torpor ls --outcome unresolved
    """
    print_runs(
        options(ctx).settings(),
        status.value if status else None,
        outcome.value if outcome else None,
        limit,
        json_out,
        tree=tree,
    )


def show(
    ctx: typer.Context,
    run_id: RunId,
    at: Annotated[
        int | None,
        typer.Option(
            "--at",
            metavar="SEQ",
            help="The run as it was at seq SEQ of its history (1..its last; torpor events).",
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Show a run: checkpoint answers, steps, effects, artifacts, waits, approvals, outcome.

    The four answers of the latest checkpoint (what it is establishing, the evidence, effects
    that may have happened, what permits the next transition); steps with status and attempts;
    effects with status and, when in doubt, why; artifacts with sha256; the open wait; approvals
    with the content hashes they bind; the outcome and its reason. --at SEQ: the same, as it
    was when event SEQ was appended (its history folded to SEQ), with the context the latest
    model call up to then was sent.

    Example: torpor show deploy-42 --at 12
    """
    from ..queues import describe_dispatch
    from ..report.approvals import approval_lines, trust_here
    from ..report.run import gather
    from .artifacts import offloaded_table
    from .storage import storage_text
    from .tree import children_table, tree_account, tree_budget_table

    tree = None
    with open_client(ctx, read_only=True) as client:
        if at is None:
            report = gather(client, run_id)
            tree = tree_account(client, run_id, report.children)
        else:
            from ..report.past import gather_at

            report = gather_at(client, run_id, at)
    if json_out:
        emit_json({**report.as_json(), **({"tree_budget": tree} if tree is not None else {})})
        return
    live, rec, state = report.summary, report.rec, report.state
    now_view = report.as_of is None  # False: a past state (--at), shown without action hints
    stored, dispatch, not_running = report.storage, report.dispatch, live.not_running

    out = console()
    status = state.status.value + (f" ({state.wait.kind})" if state.wait else "")
    pairs: list[tuple[str, Any]] = [
        *past_line(report),
        ("run", run_id),
        ("workflow", f"{rec.workflow} (version {rec.version})"),
        ("status", status),
        ("outcome", state.outcome.value if state.outcome else None),
    ]
    if state.outcome_reason:
        pairs.append(("reason", state.outcome_reason))
    if report.trace_id:
        pairs.append(("trace", report.trace_id))
    if state.result is not None:
        pairs.append(("result", short(state.result, 300)))
    if state.goal:
        pairs.append(("goal", state.goal))
    pairs.append(("created", when(rec.created_at_ms)))
    pairs.append(("updated", when(rec.updated_at_ms)))
    if now_view:
        pairs.append(("events", f"{rec.last_seq} (latest checkpoint at seq {rec.checkpoint_seq})"))
    if dispatch is not None and (dispatch.queue or dispatch.not_before_ms or dispatch.priority):
        pairs.append(("queue", describe_dispatch(dispatch)))
    if not_running:
        pairs.append(("not running", not_running))
    if state.attention:
        pairs.append(("needs attention", state.attention))
    if report.parent is not None:
        pairs.append(("parent", report.parent))
    pairs += origin_line(report)
    if live.infra:
        pairs.append(("infrastructure", live.infra))
    if live.lease:
        pairs.append(("lease", live.lease))
    if state.cancel_requested:
        pairs.append(("cancel", "requested"))
    if state.warnings:
        pairs.append(("warnings", "; ".join(state.warnings)))
    if now_view:  # what it occupies now, not then
        pairs.append(("storage", storage_text(stored)))
    fields(out, pairs)

    heading(out, "Checkpoint")
    verifs = ", ".join(f"{k}: {'passed' if ok else 'FAILED'}" for k, ok in live.verifications)
    arts = ", ".join(f"{k} {v}" for k, v in live.evidence_artifacts)
    evidence = "; ".join(x for x in (verifs, arts) if x) or "none yet"
    effects_now = ", ".join(f"{k}: {v}" for k, v in live.in_doubt)
    if live.effects_performed:
        done = f"{live.effects_performed} performed"
        effects_now = f"{done}; in doubt: {effects_now}" if effects_now else done
    rows: list[tuple[str, Any]] = []
    if live.establishing is not None:  # a finished run establishes nothing any more
        rows.append(("establishing", live.establishing))
    rows += [
        ("evidence", evidence),
        ("effects", effects_now or "none that may have happened"),
        ("next", live.next),
    ]
    fields(out, rows)

    u, b = state.usage, state.budget
    if report.is_agent:
        heading(out, "Agent")  # plan, usage and budget (issue 4)
        counts: dict[str, int] = {}
        for call in state.plan.values():
            counts[call.status] = counts.get(call.status, 0) + 1

        def of(used: Any, limit: Any) -> str:
            return f"{used}" + (f" of {limit}" if limit is not None else "")

        fields(
            out,
            [
                (
                    "plan",
                    f"v{state.plan_version}: "
                    + (", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no steps"),
                ),
                ("tokens", of(u.tokens, b.tokens)),
                (
                    "cost",
                    of(f"${u.cost_usd:.4f}", b.cost_usd)
                    + (f" (+{u.cost_unknown} call(s) of unknown cost)" if u.cost_unknown else ""),
                ),
                ("steps", of(f"{u.steps} ({u.model_calls} model, {u.tool_calls} tool)", b.steps)),
                ("wall-clock limit", f"{b.wall_clock_s:g} s" if b.wall_clock_s else "none"),
            ],
        )

    context_fields(out, report)

    if report.steps:
        table = new_table("STEP", "POLICY", "STATUS", "ATTEMPTS", "PURPOSE", title="Steps")
        for s in report.steps:
            add_row(table, s.step_id, s.policy, s.status, s.attempts, s.purpose)
        out.print()
        out.print(table)

    if report.effects:
        table = new_table(
            "KEY", "STEP", "OPERATION", "STATUS", "ATTEMPT", "REASON", title="Effects"
        )
        for e in report.effects:
            add_row(table, e.key, e.step_id, e.operation, e.status, e.attempt, e.reason)
        out.print()
        out.print(table)
        for e in report.effects if now_view else []:  # a past state gets no hints
            if e.status == "unknown":
                out.print(
                    plain(
                        f"effect {e.key} is in doubt: {e.reason or 'outcome unknown'}. "
                        f"A person settles it: torpor resolve {run_id} {e.key} "
                        "(--applied [--result JSON] | --absent) --as NAME",
                        style="yellow",
                    )
                )
            elif e.status == "intended":
                out.print(
                    plain(
                        f"effect {e.key} was intended but never observed; resuming reconciles "
                        f"it: torpor resume {run_id}",
                        style="yellow",
                    )
                )

    children_table(out, report.children)
    tree_budget_table(out, tree)
    forks_table(out, report)

    if report.artifacts:
        table = new_table("NAME", "VERSION", "SHA256", "SIZE", "MEDIA TYPE", title="Artifacts")
        table.columns[2].overflow = "fold"
        for a in report.artifacts:
            add_row(table, a.name, a.version, a.sha256, a.size, a.media_type)
        out.print()
        out.print(table)
    if report.offloaded:
        out.print()
        out.print(offloaded_table(report.offloaded, title="Offloaded values"))

    if state.wait is not None:
        w = state.wait
        heading(out, "Waiting")
        fields(
            out,
            [
                ("id", w.wait_id),
                ("kind", w.kind),
                ("name", w.name),
                ("reason", w.reason),
                ("deadline", relative(w.deadline_ms) if w.deadline_ms else "none"),
            ],
        )
        if w.kind == "signal" and now_view:
            out.print(
                plain(
                    f"answer it: torpor signal {run_id} --wait-id {w.wait_id} --payload JSON",
                    style="cyan",
                )
            )

    if state.approvals:
        heading(out, "Approvals")
        decided, pending = report.decided_in_inbox, report.pending_approvals
        trust = trust_here(options(ctx).settings())
        for aid, info in state.approvals.items():
            for text, style in approval_lines(
                run_id,
                aid,
                info,
                trust,
                pending_here=now_view and aid in pending and aid not in decided,
            ):
                out.print(plain(text, style=style))
            if aid in decided and info.status == "requested":
                out.print(plain("  a decision is in the inbox; it is checked when the run resumes"))

    _messages(out, report.messages, report.inbox, state.wait)


def _messages(
    out: Any, messages: list[MessageView], inbox: list[InboxMessage], wait: WaitInfo | None
) -> None:
    """The messages the run received that no wait consumed, oldest first: buffered (with their
    age), late, refused (and why), and those still in the inbox (taken when the run resumes).
    Consumed ones are in ``torpor events`` (each ``wait_completed`` names the message)."""
    rows: list[tuple[str, str, str | None, int | None, str]] = []
    for m in messages:
        if m.status == "consumed":
            continue
        status = f"refused: {m.reason}" if m.status == "refused" else f"buffered: {m.reason}"
        if m.status == "buffered":
            answers = f" (answers wait {m.wait_id})" if m.wait_id else ""
            status = f"buffered: no wait for it yet{answers}"
            if m.kind == "steer":  # an operator's message (issue 39)
                status = "pending: the agent takes it before its next model call"
        rows.append((m.message_id, m.kind, m.name, m.arrived_at_ms, status))
    for p in inbox:
        name = p.body.get("name") if p.kind == "signal" else None
        if p.kind != "signal":
            status = f"pending: applied when the run resumes {short(p.body, 60)}"
        elif wait is not None and wait.kind == "signal" and wait.name == name:
            late = wait.deadline_ms is not None and p.at_ms >= wait.deadline_ms
            status = (
                f"pending: arrived after the deadline of wait {wait.wait_id}"
                if late
                else f"pending: wait {wait.wait_id} takes it when the run resumes"
            )
        else:
            status = "buffered: no wait for it yet"
        rows.append((p.message_id, p.kind, name, p.at_ms, status))
    if not rows:
        return
    heading(out, "Messages not consumed by a wait")
    table = new_table("MESSAGE", "KIND", "NAME", "ARRIVED", "STATUS")
    for mid, kind, name, at_ms, status in rows:
        add_row(table, mid, kind, name, relative(at_ms), status)
    out.print(table)


def events(
    ctx: typer.Context,
    run_id: RunId,
    after: Annotated[
        int, typer.Option("--after", metavar="SEQ", min=0, help="Only events after SEQ.")
    ] = 0,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many events.")] = 1000,
    json_out: JsonFlag = False,
) -> None:
    """Print the run's history: its events in order.

    Example: torpor events deploy-42 --after 10 --limit 20
    """
    with open_client(ctx, read_only=True) as client:
        evs = client.events(run_id, after_seq=after, limit=limit)
    if json_out:
        emit_json(
            [
                {
                    "run_id": e.run_id,
                    "seq": e.seq,
                    "type": e.type,
                    "at_ms": e.at_ms,
                    "epoch": e.epoch,
                    "payload": e.payload.model_dump(mode="json"),
                }
                for e in evs
            ]
        )
        return
    out = console()
    if not evs:
        out.print(f"no events after seq {after}")
        return
    table = new_table("SEQ", "AT", "EPOCH", "TYPE", "STEP", "DETAIL")
    for column in table.columns[:-1]:
        column.no_wrap = True  # one line per event: only the detail shrinks, with an ellipsis
    for e in evs:
        detail = e.payload.model_dump(mode="json", exclude={"step_id"})
        table.add_row(
            str(e.seq),
            when(e.at_ms),
            str(e.epoch),
            e.type,
            plain(e.step_id or "-"),
            plain(short(detail, 90), no_wrap=True, overflow="ellipsis"),
        )
    out.print(table)
    if len(evs) == limit:
        out.print(plain(f"more: torpor events {run_id} --after {evs[-1].seq}", style="cyan"))


def register(app: typer.Typer) -> None:
    """Add ``ls``, ``show`` and ``events`` to ``app``."""
    app.command("ls")(list_runs)
    app.command()(show)
    app.command()(events)
