"""Ready plan steps run side by side (issue 38): the calls of one plan version that are ready
together — no dependency between them, e.g. a model's parallel tool calls — run concurrently,
up to the agent's per-run limit (``Agent(max_parallel=N)``; 1, the default, keeps the loop
sequential).

A batch goes in three phases, so that what is recorded is each call's own and what is handed
back is in the order the plan (the model) named, never completion order:

1. **prepare**, one call at a time in plan order, in the executing thread
   (:func:`~.calls.prepare`): a recorded outcome on replay, the arguments, secrets and budget
   checked, an approval requested (a wait suspends the run before anything of the batch ran);
2. **run** the prepared calls concurrently: each is its own step or effect
   (:func:`~.calls.arun_prepared`), recorded when *it* ends — so a crash mid-batch leaves the
   finished calls recorded and a resume redoes only the unfinished (an effect intended but not
   observed is reconciled, never blindly retried, G2). The recording stays in the executing
   thread's event loop (one writer, the journal); only the tools' own work is in threads, one
   per call (so ten 0.5 s calls take about 0.5 s, ``bench/parallel_calls.py``);
3. **settle**, in plan order (``tool_call_settled``): the outcome of each call, or the first
   interrupt a call raised (a wait, an unresolved effect, a cancel), after the outcomes of
   the calls before it — the same order however the calls finished, so a replay folds the
   same working memory.

Calls delegated to child runs (a tool declared ``spawns=``) start first, in plan order, and
are waited on together after the batch's other calls ran: one fan-in, the run holding no
process meanwhile (:mod:`torpor.engine.children`).

A steps budget (``Budget(steps=N)``, the run's or an ancestor's over its tree) is honoured
for the batch as a whole: it takes no more calls than the steps left. A plan-and-execute
planner revises the plan after the batch, not after its first failure (the other calls had
already run).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..engine.calls import in_loop
from ..history import Policy
from .calls import (
    Decided,
    PlannedCall,
    Prepared,
    arun_prepared,
    child_input,
    delegated,
    execute_call,
    prepare,
)
from .context import Context


def execute_batch(ctx: Context, calls: Sequence[PlannedCall], limit: int) -> list[str]:
    """Run ready ``calls`` (plan order, no dependency between them) at most ``limit`` at a
    time and record their outcomes in plan order (see the module docstring); returns the
    outcomes of the calls the batch took (a steps budget may leave the last ones pending).
    Sequential (:func:`~.calls.execute_call`) for one call, a limit of 1, or inside a
    running event loop."""
    if len(calls) <= 1 or limit <= 1 or in_loop():
        return [execute_call(ctx, c) for c in calls[:1]]
    taken: list[tuple[PlannedCall, Prepared | Decided]] = []
    for c in calls:
        if taken and _cut(ctx, c, sum(isinstance(x, Prepared) for _, x in taken)):
            break
        taken.append((c, prepare(ctx, c)))
    prepared = [x for _, x in taken if isinstance(x, Prepared)]
    ready = [p for p in prepared if p.tool.spawns is None]
    ran: dict[str, Decided | BaseException] = {}
    j = ctx.run.journal
    # Replay reads every recorded completion of the batch first: the history has them in
    # the order they finished, and the replay gate wants the code caught up before it
    # records anything new.
    for p in ready:
        j.recorded(p.sid, Policy.EFFECT if p.tool.policy is Policy.EFFECT else p.tool.policy)
    # Delegations start first (their children may run elsewhere meanwhile), in plan order.
    kids = [
        (p, ctx.run.spawn(p.tool.spawns, child_input(ctx, p), name=p.base))
        for p in prepared
        if p.tool.spawns is not None
    ]
    if ready:
        # (A cancel meanwhile is taken at the next boundary: each call's start, then the
        # first outcome recorded after the batch.)
        ran = dict(zip((p.sid for p in ready), _run_all(ctx, ready, limit), strict=True))
    if kids:
        # One fan-in for the batch's children, after its other calls ran (a wait suspends
        # the run: those are recorded, and replayed when it resumes).
        first = next((x for x in ran.values() if isinstance(x, BaseException)), None)
        if first is not None:
            raise first
        ended = ctx.run.wait_children([k for _, k in kids])
        ran.update({p.sid: delegated(p, r) for (p, _), r in zip(kids, ended, strict=True)})
    outcomes = []
    for c, x in taken:
        d = ran[x.sid] if isinstance(x, Prepared) else x
        if isinstance(d, BaseException):
            raise d
        ctx.settle(c, d.outcome, d.observation, d.executed_by)
        outcomes.append(c.status)
    return outcomes


def _cut(ctx: Context, c: PlannedCall, running: int) -> bool:
    """Whether the batch stops before ``c``: when the budget — the run's steps, and its
    ancestors' over their trees — leaves no room for one more call beside ``running`` ones
    taken and not yet settled. The tree's usage is read as it is now, which a replay cannot
    see as it was, so a cut is recorded (a step ``cut:<call>``) before anything depends on
    it, and a replay stops where the recorded run stopped: the same calls taken, the same
    children waited for (without it, a run resumed twice took more calls on replay than it
    had, and the batch's fan-in no longer matched its recorded children)."""
    j = ctx.run.journal
    sid = f"cut:{c.call_id}@v{c.version}"
    if j.recorded(sid, Policy.READ) is not None:
        return True
    if j.replay.replaying:
        return False  # the recorded run went past ``c``: had it stopped here, it would say so
    why = ctx.budget_exhausted(running)
    if not why:
        return False
    j.record(sid, lambda _sid: ({"reason": why}, []), purpose="the batch stops: budget")
    return True


def _run_all(ctx: Context, ready: list[Prepared], limit: int) -> list[Decided | BaseException]:
    """The prepared calls run concurrently in an event loop of this thread, ``limit`` at a
    time, their tools' work in a pool of ``limit`` threads; each call's result or exception."""
    import asyncio  # (a process that runs no batch never imports asyncio)

    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(
            ThreadPoolExecutor(max_workers=limit, thread_name_prefix="torpor-call")
        )
        gate = asyncio.Semaphore(limit)

        async def one(p: Prepared) -> Decided:
            async with gate:
                return await arun_prepared(ctx, p)

        return await asyncio.gather(*(one(p) for p in ready), return_exceptions=True)

    return asyncio.run(main())


__all__ = ["execute_batch"]
