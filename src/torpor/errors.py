"""The torpor exception tree.

Every error torpor raises derives from :class:`TorporError`, so ``except TorporError`` catches
all of them. Control flow that user code must never swallow — a run suspending to wait, a run
being cancelled, a crash injected on purpose — derives from :class:`BaseException` instead, so a
bare ``except Exception`` in a workflow cannot catch it (the rule DBOS follows with
``DBOSWorkflowCancelledError``; Absurd's ``SuspendTask`` is the counter-example).

::

    TorporError
    ├── ConfigError                   bad URL, bad setting
    ├── StoreError                    the store refused or failed
    │   ├── SchemaVersionError        database written by a newer torpor
    │   ├── CorruptRecordError        a row that cannot be decoded
    │   ├── LeaseError
    │   │   ├── LeaseHeldError        another owner holds the run
    │   │   └── LeaseLostError        our epoch was fenced off
    │   └── RunNotFoundError
    ├── TransitionError               an impossible event (G4)
    ├── PayloadError                  non-serializable or oversized payload (G10)
    ├── WorkflowError
    │   ├── UnknownWorkflowError
    │   ├── VersionMismatchError      resumed under incompatible code
    │   └── NonDeterminismError       replayed code asks for a different step
    ├── ApprovalError
    │   ├── ApprovalDeniedError
    │   └── ApprovalInvalidError      revoked, changed content, bad signature
    ├── RunFinishedError              the run already has an outcome
    └── InboxError                    a signal/decision the run cannot accept

    BaseException
    └── RunInterrupt                  never catch in user code
        ├── Suspended                 the run waits (signal, timer, approval, person)
        └── Cancelled                 the run was cancelled
"""

from __future__ import annotations

from datetime import UTC, datetime


class TorporError(Exception):
    """Root of every torpor error."""


class ConfigError(TorporError):
    """A configuration value (URL, setting) is invalid."""


class StoreError(TorporError):
    """The store refused an operation or failed to perform it."""


class SchemaVersionError(StoreError):
    """The database was written by a newer schema than this torpor knows; nothing was changed."""


class CorruptRecordError(StoreError):
    """A stored row cannot be decoded. Carries ``run_id`` and ``seq`` when known."""

    def __init__(self, message: str, *, run_id: str | None = None, seq: int | None = None):
        super().__init__(message)
        self.run_id = run_id
        self.seq = seq


class RunNotFoundError(StoreError):
    """No run with this id exists in the store."""


class LeaseError(StoreError):
    """A lease operation failed."""


class LeaseHeldError(LeaseError):
    """Another owner holds an unexpired lease on the run."""

    def __init__(self, run_id: str, owner: str, expires_at_ms: int):
        super().__init__(
            f"run {run_id!r} is leased by {owner!r} until "
            f"{datetime.fromtimestamp(expires_at_ms / 1000, tz=UTC):%Y-%m-%d %H:%M:%S} UTC; "
            "it is being executed elsewhere (retry after the lease expires)"
        )
        self.run_id = run_id
        self.owner = owner
        self.expires_at_ms = expires_at_ms


class LeaseLostError(LeaseError):
    """A write was rejected because the writer's lease epoch is no longer current (fencing)."""

    def __init__(self, run_id: str, epoch: int, detail: str = ""):
        super().__init__(
            f"write to run {run_id!r} under lease epoch {epoch} rejected: lease lost"
            + (f" ({detail})" if detail else "")
        )
        self.run_id = run_id
        self.epoch = epoch


class TransitionError(TorporError):
    """An event is an impossible transition for the run's current state (guarantee G4)."""

    def __init__(self, run_id: str, seq: int, event_type: str, rule: str):
        super().__init__(f"run {run_id!r} seq {seq}: {event_type} refused: {rule}")
        self.run_id = run_id
        self.seq = seq
        self.event_type = event_type
        self.rule = rule


class PayloadError(TorporError):
    """A value to record is not serializable or too large (guarantee G10)."""

    def __init__(self, run_id: str, step_id: str | None, problem: str):
        where = f"run {run_id!r}" + (f" step {step_id!r}" if step_id else "")
        super().__init__(f"{where}: {problem}")
        self.run_id = run_id
        self.step_id = step_id


class WorkflowError(TorporError):
    """A problem with workflow code or its registration."""


class UnknownWorkflowError(WorkflowError):
    """No workflow is registered under this name."""


class VersionMismatchError(WorkflowError):
    """The run was recorded under a workflow version the current code does not accept."""


class NonDeterminismError(WorkflowError):
    """Replayed workflow code asked for something that contradicts the recorded history."""


class ApprovalError(TorporError):
    """An approval does not authorize what was asked."""


class ApprovalDeniedError(ApprovalError):
    """A person denied the approval."""


class ApprovalInvalidError(ApprovalError):
    """The approval was revoked, its content changed, or its signature does not verify."""


class RunFinishedError(TorporError):
    """The run already has a terminal outcome."""


class InboxError(TorporError):
    """A signal or decision cannot be accepted (unknown approval, already consumed)."""


class RunInterrupt(BaseException):
    """Control flow that unwinds a workflow. Derives from BaseException: never catch it."""


class Suspended(RunInterrupt):
    """The run is waiting durably; the process may exit. Raised out of ``run.wait_for`` & co."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Cancelled(RunInterrupt):
    """The run was cancelled; raised at the next durable boundary."""
