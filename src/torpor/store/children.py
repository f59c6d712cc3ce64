"""Child-run rows (issue 37): which run started which, and the message a child's outcome
leaves in its parent's inbox. A mixin of :class:`~torpor.store.sqlstore.SQLStore` (the
:class:`~torpor.store.base.ChildRows` part of its protocol); the SQL is in the ``child_*`` blocks of
``sql/<dialect>.sql``. What the rows mean — spawning once, waiting, the tree rules — is
:mod:`torpor.engine.children`.

A child's outcome reaches its parent in the transaction that records it (:func:`tell_parent`,
called by the append of a ``run_finished``): a ``child`` message in the parent's inbox, and a
wake of the parent if it waits and its wait may be over (``runs.child_need``, kept by
:meth:`ChildStore.await_children`). No process can die between the two, so a parent waiting on
its children is never left asleep by a crash (G14: results never lost); a parent that dies
before it kept the count is taken again once its lease expires, like any crashed waiter.
"""

from __future__ import annotations

from typing import Any

from .. import serde
from .base import Driver, RunRecord, read_retried, run_record


class ChildStore:
    """See :class:`~torpor.store.base.ChildRows` for each method's rows."""

    driver: Driver
    q: dict[str, str]

    @read_retried
    def run_parent(self, run_id: str) -> str | None:
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self.q["child_parent"], {"run_id": run_id})
        return None if row is None or row[0] is None else str(row[0])

    def await_children(self, parent: str, children: list[str], need: int) -> int:
        """Record on ``parent``'s row how many more final outcomes of ``children`` its open
        wait needs (``need`` minus those final now, counted under the parent row's lock, so
        an outcome recorded meanwhile is either counted here or takes one off after); return
        it (0 or less: the wait can end now). Until then every child outcome wakes the
        parent; an extra wake is harmless, a missing one is not possible."""
        with self.driver.transaction() as cur:
            self.driver.fetchone(cur, self.q["child_need_lock"], {"parent": parent})
            row = self.driver.fetchone(
                cur,
                self.q["child_final_count"],
                {"parent": parent, "children": serde.dumps(children)},
            )
            left = need - int(row[0] if row else 0)
            self.driver.execute(
                cur, self.q["child_need_set"], {"parent": parent, "need": max(left, 0)}
            )
        return left

    @read_retried
    def child_runs(self, parent: str, *, limit: int = 10_000) -> list[RunRecord]:
        with self.driver.read() as cur:
            rows = self.driver.fetchall(
                cur, self.q["child_runs"], {"parent": parent, "limit": limit}
            )
        return [run_record(r) for r in rows]


def set_parent(driver: Driver, q: dict[str, str], cur: Any, run_id: str, parent: str) -> None:
    """Inside the transaction that creates run ``run_id``: record its parent."""
    driver.execute(cur, q["child_set_parent"], {"run_id": run_id, "parent": parent})


def tell_parent(
    driver: Driver, q: dict[str, str], cur: Any, run_id: str, outcome: str, seq: int, now: int
) -> None:
    """Inside the transaction that records run ``run_id``'s outcome (at ``seq``): when it is a
    child, post a ``child`` message to its parent's inbox (once per outcome: the message id
    names the child and the seq) and wake the parent if it waits. A finished parent gets no
    message (it takes none; its children were cancelled when it ended)."""
    row = driver.fetchone(cur, q["child_parent"], {"run_id": run_id})
    if row is None or row[0] is None:
        return
    parent = str(row[0])
    body = serde.dumps({"child": run_id, "outcome": outcome, "seq": seq})
    n = driver.execute(
        cur,
        q["child_tell_parent"],
        {"message_id": f"child:{run_id}:{seq}", "parent": parent, "body": body, "now_ms": now},
    )
    if not n:
        return
    if outcome not in ("unresolved", "blocked"):
        # A final outcome: one fewer the parent's wait needs. Woken once none is needed (or
        # no count is kept): a fan-in of a hundred children wakes its parent once, not a
        # hundred times. An unresolved or blocked child always wakes it (it needs attention).
        left = driver.fetchone(cur, q["child_need_taken"], {"parent": parent})
        if left is not None and left[0] is not None and int(left[0]) > 0:
            return
    driver.execute(cur, q["wake_run"], {"run_id": parent, "now_ms": now})
    driver.fetchone(cur, q["notify_wake"], {"run_id": parent})


__all__ = ["ChildStore", "set_parent", "tell_parent"]
