"""What ``torpor show`` adds for looking back (issue 45): with ``--at SEQ``, the line that says
the state shown is a past one and the context the latest model call up to then was sent; for
a fork, the run it was forked from; for a run that was forked, its forks."""

from __future__ import annotations

from typing import Any

from ..report.run import RunReport
from .render import add_row, fields, heading, new_table


def past_line(report: RunReport) -> list[tuple[str, Any]]:
    """``[("as of", "seq N of M ...")]`` for a past state, else ``[]``."""
    if report.as_of is None:
        return []
    seq, last = report.as_of
    note = "the latest state" if seq == last else f"a past state; {last - seq} event(s) came after"
    return [("as of", f"seq {seq} of {last} ({note}; updated is when seq {seq} was appended)")]


def origin_line(report: RunReport) -> list[tuple[str, Any]]:
    """``[("forked from", "RUN at seq N ...")]`` for a fork, else ``[]``."""
    f = report.state.fork
    if f is None:
        return []
    redo = "; redoes the origin's effects" if f.redo_effects else ""
    return [("forked from", f"{f.origin} at seq {f.at_seq} (its events 1..{f.at_seq}{redo})")]


def forks_table(out: Any, report: RunReport) -> None:
    """``show``'s table of the forks made of a run (none: nothing printed)."""
    if not report.forks:
        return
    table = new_table("RUN", "WORKFLOW", "STATUS", "OUTCOME", title="Forks")
    for r in report.forks:
        add_row(table, r.run_id, r.workflow, r.status, r.outcome)
    out.print()
    out.print(table)


def context_fields(out: Any, report: RunReport) -> None:
    """A past state's ``Context`` section: the ``context_built`` of the latest model call up
    to then (its hash, tokens per section, budget, what was cut); nothing without one."""
    c = report.context
    if report.as_of is None or c is None:
        return
    heading(out, "Context (latest model call up to then)")
    sections = ", ".join(f"{k} {v}" for k, v in c.sections.items()) or "none"
    fields(
        out,
        [
            ("step", c.step_id),
            ("sha256", c.context_hash),
            ("tokens", f"{c.total_tokens} of {c.budget_tokens} ({sections})"),
            ("cut", ", ".join(c.cut) or "nothing"),
            ("compactions", report.state.context_compactions),
        ],
    )


__all__ = ["context_fields", "forks_table", "origin_line", "past_line"]
