"""One budget for a tree of runs (issue 38, item 2; G14: "budgets are shared down the tree").

A run's budget (:class:`~torpor.history.Budget`: tokens, cost, steps, wall-clock) limits the
run **and every run below it**: a child run draws from its parent's remaining budget, and the
parent's from its own parent's, up to the root — a fan-out of agents cannot spend more than
the tree was given (Codewhale #3319: fan-outs blowing through budgets). A child given a slice
of its own (an ``Agent(budget=...)``) is held to that slice too: its usage still counts for
every ancestor, so a slice narrows the tree's budget, never widens it.

- **Accounting** (:func:`account`): the usage of a run's subtree, summed from each run's fold
  (model calls' tokens and cost, model plus tool calls as steps; :class:`~torpor.history.Usage`)
  — finished runs' sums are remembered by their last seq, so a check re-reads only the runs
  still moving. Wall-clock counts from the ancestor's own start. A limit raised with
  ``torpor budget`` and not yet taken by that run (a message in its inbox) counts already.
- **Exhaustion** (:func:`exhausted`): checked before each model or tool call of an agent
  (:meth:`torpor.agents.loop.AgentContext.check_budget`); a limit reached anywhere — its own
  or an ancestor's over the ancestor's tree — ends *that* run ``blocked`` with the tree's
  accounting in its reason (``show``/``tree``, the parent's "needs attention"), durably.
- **Raising** (:func:`reopen_blocked`): raising a run's budget (:meth:`torpor.Client.reopen`)
  also reopens every run below it that a budget blocked, so the tree goes on where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..history import Budget, BudgetSet, Payload, RunState
from ..store.base import Store
from .journal import Journal

#: Deepest level walked up or down a tree, and most runs summed under one run.
MAX_DEPTH = 12
MAX_RUNS = 1000
#: How a budget's block reason begins (what :func:`reopen_blocked` reopens).
EXHAUSTED = "budget exhausted"
#: Finished runs' usage by (store, run id, last seq): it cannot change.
_FINISHED: dict[tuple[int, str, int], tuple[int, float, int, str]] = {}


@dataclass
class TreeAccount:
    """A run's subtree (itself included) against the run's limits: ``runs`` counted, their
    summed ``tokens``, ``cost_usd`` and ``steps``, ``elapsed_s`` since the run started, its
    ``budget`` (raises posted and not yet taken included) and the runs a budget ``blocked``
    (run id -> reason)."""

    run_id: str
    budget: Budget
    runs: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    steps: int = 0
    elapsed_s: float = 0.0
    blocked: dict[str, str] = field(default_factory=dict)

    def hits(self) -> list[str]:
        """The limits reached, phrased ``"tokens: 1200 used of 1000"``."""
        return limits_reached(self.budget, self.tokens, self.cost_usd, self.steps, self.elapsed_s)


def limits_reached(
    b: Budget, tokens: int, cost_usd: float, steps: int, elapsed_s: float | None
) -> list[str]:
    """Each limit of ``b`` that the usage reached (``elapsed_s`` None: not counted)."""
    hits = []
    if b.tokens is not None and tokens >= b.tokens:
        hits.append(f"tokens: {tokens} used of {b.tokens}")
    if b.cost_usd is not None and cost_usd >= b.cost_usd:
        hits.append(f"cost: ${cost_usd:.4f} used of ${b.cost_usd:.4f}")
    if b.steps is not None and steps >= b.steps:
        hits.append(f"steps: {steps} used of {b.steps}")
    if b.wall_clock_s is not None and elapsed_s is not None and elapsed_s >= b.wall_clock_s:
        hits.append(f"wall-clock: {elapsed_s:.1f} s of {b.wall_clock_s:g} s")
    return hits


def effective_budget(store: Store, run_id: str, state: RunState) -> Budget:
    """The run's limits, with a raise posted to its inbox and not yet taken applied."""
    b = state.budget
    for m in store.pending_inbox(run_id):
        if m.kind == "reopen" and isinstance(m.body.get("budget"), dict):
            b = b.model_copy(update=m.body["budget"])
    return b


def _usage(store: Store, run_id: str, last_seq: int | None) -> tuple[int, float, int, str]:
    """``(tokens, cost, steps, blocked reason or "")`` of one run; remembered once finished."""
    key = (id(store), run_id, last_seq if last_seq is not None else -1)
    got = _FINISHED.get(key)
    if got is not None:
        return got
    st = store.load(run_id)
    u = st.usage
    blocked = st.outcome_reason if st.outcome is not None and st.outcome.value == "blocked" else ""
    out = (u.tokens, u.cost_usd, u.steps, blocked)
    if last_seq is not None and st.outcome is not None and st.seq == last_seq:
        if len(_FINISHED) > 10_000:
            _FINISHED.clear()
        _FINISHED[key] = out
    return out


def account(
    store: Store,
    run_id: str,
    now_ms: int,
    state: RunState | None = None,
    *,
    budget: Budget | None = None,
) -> TreeAccount:
    """The accounting of ``run_id``'s subtree against its limits (see the module docstring);
    ``state``: the run's own state when the caller has it (the executing run's, fresher than
    the store's by what it has not written yet); ``budget``: its limits, when known (else
    read, with a raise posted to its inbox and not yet taken)."""
    st = state if state is not None else store.load(run_id)
    acc = TreeAccount(run_id, budget if budget is not None else effective_budget(store, run_id, st))
    acc.elapsed_s = (now_ms - st.started_at_ms) / 1000 if st.started_at_ms else 0.0
    acc.runs, acc.tokens, acc.cost_usd, acc.steps = (
        1,
        st.usage.tokens,
        st.usage.cost_usd,
        st.usage.steps,
    )
    todo = [(run_id, 0)]
    while todo and acc.runs < MAX_RUNS:
        parent, depth = todo.pop()
        if depth >= MAX_DEPTH:
            continue
        for rec in store.child_runs(parent, limit=MAX_RUNS):
            tokens, cost, steps, blocked = _usage(
                store, rec.run_id, rec.last_seq if rec.status == "finished" else None
            )
            acc.runs += 1
            acc.tokens, acc.cost_usd, acc.steps = (
                acc.tokens + tokens,
                acc.cost_usd + cost,
                acc.steps + steps,
            )
            if blocked.startswith(EXHAUSTED):
                acc.blocked[rec.run_id] = blocked
            todo.append((rec.run_id, depth + 1))
    return acc


def ancestors(store: Store, run_id: str) -> list[str]:
    """The run's parent, its parent's parent … up to the root (at most :data:`MAX_DEPTH`)."""
    out: list[str] = []
    cur = store.run_parent(run_id)
    while cur is not None and len(out) < MAX_DEPTH and cur not in out:
        out.append(cur)
        cur = store.run_parent(cur)
    return out


def exhausted(
    store: Store, state: RunState, now_ms: int, parents: list[str], pending_steps: int = 0
) -> str:
    """Why run ``state`` must stop for its budget, or "" (see the module docstring): its own
    limits against its own usage and that of the runs below it, then each ancestor's in
    ``parents`` (nearest first) against the ancestor's whole tree; ``pending_steps``: calls
    it started that are not counted yet (a batch's). The reason names the run whose limit it
    is, the tree's usage and the command that raises it."""
    rid = state.run_id
    # Its own limits hold for it and every run below it (its live state: fresher than the
    # store's by what it has not written yet; a raise in its inbox it takes at a boundary).
    hits: list[str] = []
    if state.budget != Budget():
        own = account(store, rid, now_ms, state, budget=state.budget)
        own.steps += pending_steps
        hits = [_of_tree(h, own) for h in own.hits()]
    owner = rid
    if not hits:
        for a in parents:
            st = store.load(a)
            if effective_budget(store, a, st) == Budget():
                continue
            acc = account(store, a, now_ms, st)
            acc.steps += pending_steps
            hits = [_of_tree(h, acc) for h in acc.hits()]
            if hits:
                owner = a
                break
    if not hits:
        return ""
    return (
        f"{EXHAUSTED} (" + "; ".join(hits) + f"); raise it and resume: torpor budget {owner} "
        "--tokens N / --cost USD / --steps N / --wall-clock SECONDS"
    )


def set_limits(j: Journal, budget: Budget, *, by: str = "workflow", reason: str = "") -> None:
    """Record ``budget`` as the run's limits (those it has none for yet), once — a step
    ``budget``, read back on replay: how a plain workflow gives its tree of runs a budget (an
    agent records its ``Agent(budget=...)`` so itself)."""
    want = {
        k: v
        for k, v in budget.model_dump().items()
        if v is not None and getattr(j.state.budget, k) is None
    }
    facts: list[Payload] = (
        [BudgetSet(**want, by=by, reason=reason or "the tree's limits")] if want else []
    )
    j.record("budget", lambda sid: (want, facts), purpose="the run's budget")


def _of_tree(hit: str, acc: TreeAccount) -> str:
    """A limit reached, naming the tree that reached it (when it is more than the run)."""
    return f"{hit} by the {acc.runs} runs of the tree of run {acc.run_id}" if acc.runs > 1 else hit


def reopen_blocked(store: Store, run_id: str, by: str) -> list[str]:
    """Reopen every run below ``run_id`` that a budget blocked (its limit was just raised):
    a ``reopen`` message to each (once per raise: a fresh message id). Returns their ids."""
    out: list[str] = []
    acc = account(store, run_id, store.now_ms())
    for rid, reason in acc.blocked.items():
        if (
            f"the tree of run {run_id})" not in reason
            and f"the tree of run {run_id};" not in reason
        ):
            continue  # blocked by another run's limit (its own, or a run's between)
        body: dict[str, Any] = {"by": by, "reason": f"the budget of run {run_id} was raised"}
        store.post_inbox(rid, "reopen", body)
        out.append(rid)
    return out


__all__ = [
    "EXHAUSTED",
    "TreeAccount",
    "account",
    "ancestors",
    "effective_budget",
    "exhausted",
    "limits_reached",
    "reopen_blocked",
    "set_limits",
]
