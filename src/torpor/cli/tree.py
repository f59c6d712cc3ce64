"""Trees of runs (issue 37): ``torpor ls --tree`` orders runs under the run that started them,
and ``torpor show`` lists a run's children."""

from __future__ import annotations

from rich.console import Console

from ..client import Client
from ..engine.budgets import TreeAccount, account
from ..store.base import RunRecord
from .render import add_row, new_table, short

#: Deepest level ``ls --tree`` walks down to, and most rows it prints under one listed run.
MAX_DEPTH = 12
MAX_DESCENDANTS = 1000


def tree_order(client: Client, runs: list[RunRecord]) -> list[tuple[int, RunRecord, str | None]]:
    """``(depth, run, parent)`` for the listed ``runs`` and their descendants, each child
    right under its parent (oldest first). A listed run whose parent is listed too appears
    under it, once; one whose parent is not listed is a root of its own."""
    listed = {r.run_id for r in runs}
    parents = {r.run_id: client.store.run_parent(r.run_id) for r in runs}
    out: list[tuple[int, RunRecord, str | None]] = []
    seen: set[str] = set()

    def walk(rec: RunRecord, depth: int, parent: str | None, budget: list[int]) -> None:
        if rec.run_id in seen:
            return
        seen.add(rec.run_id)
        out.append((depth, rec, parent))
        if depth >= MAX_DEPTH:
            return
        for child in client.store.child_runs(rec.run_id, limit=MAX_DESCENDANTS):
            if budget[0] <= 0:
                return
            budget[0] -= 1
            walk(child, depth + 1, rec.run_id, budget)

    for r in runs:
        if parents[r.run_id] not in listed:
            walk(r, 0, parents[r.run_id], [MAX_DESCENDANTS])
    return out


def tree_label(depth: int, run_id: str) -> str:
    """A run id indented under its parent."""
    return ("  " * (depth - 1) + "└ " + run_id) if depth else run_id


def children_table(out: Console, children: list[RunRecord]) -> None:
    """``show``'s table of a run's children: status, outcome, what needs attention."""
    if not children:
        return
    table = new_table("RUN", "WORKFLOW", "STATUS", "OUTCOME", "NEEDS ATTENTION", title="Children")
    for c in children:
        add_row(table, c.run_id, c.workflow, c.status, c.outcome, short(c.attention or "", 80))
    out.print()
    out.print(table)


def tree_account(client: Client, run_id: str, children: list[RunRecord]) -> TreeAccount | None:
    """The accounting of a run's tree against its limits (issue 38), for a run with children
    (None otherwise)."""
    if not children:
        return None
    return account(client.store, run_id, client.store.now_ms())


def tree_budget_table(out: Console, acc: TreeAccount | None) -> None:
    """``show``'s "Tree budget": what the run and every run below it used, against the run's
    limits (shared down the tree), and the runs below that a budget blocked."""
    if acc is None:
        return
    b = acc.budget

    def of(used: object, limit: object) -> str:
        return f"{used} of {limit}" if limit is not None else f"{used} (no limit)"

    table = new_table("LIMIT", "USED BY THE TREE", title=f"Tree budget ({acc.runs} runs)")
    add_row(table, "tokens", of(acc.tokens, b.tokens))
    add_row(table, "cost", of(f"${acc.cost_usd:.4f}", b.cost_usd))
    add_row(table, "steps", of(acc.steps, b.steps))
    add_row(table, "wall-clock", of(f"{acc.elapsed_s:.1f} s", b.wall_clock_s))
    for rid, why in acc.blocked.items():
        add_row(table, "blocked", f"{rid}: {short(why, 160)}")
    out.print()
    out.print(table)


__all__ = ["children_table", "tree_account", "tree_budget_table", "tree_label", "tree_order"]
