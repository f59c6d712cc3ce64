"""Creating a segment's run (the first when a session starts, the next when one continues as
new): a normal run of the session's segment workflow, claimable by any worker."""

from __future__ import annotations

from typing import Any

from .. import queues, serde
from ..history import RunStarted
from ..store import sessions as rows
from ..store.base import Store
from ..workflows import get_workflow


def sql_of(store: Store) -> rows.Store:
    """The store as the session rows need it (every SQL store); StoreError otherwise."""
    return rows.rows_of(store)


def create_segment(
    store: Store, workflow: str, run_id: str, input: dict[str, Any], *, module: str = ""
) -> bool:
    """Create the segment run ``run_id`` of ``workflow`` (registered) with ``input``; False
    when it exists (idempotent, as :meth:`torpor.Runtime.start`)."""
    wf = get_workflow(workflow, module)
    return store.create_run(
        run_id,
        RunStarted(
            workflow=wf.name,
            version=wf.version,
            input=serde.to_jsonable(input),
            criteria=list(wf.criteria),
            goal=wf.goal,
            module=getattr(wf.fn, "__module__", "") or "",
        ),
        queues.dispatch_for(None, None, 0, None),
        task_type=wf.task_type,
    )
