"""The engine: the one recording seam (:mod:`~torpor.engine.journal`), steps, effects and
reconcile, approvals, waits, the inbox, leases, and executing a workflow under one lease
(:mod:`~torpor.engine.execution`). Internal: workflows use :class:`torpor.Run`."""
