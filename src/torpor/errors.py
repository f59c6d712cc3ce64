"""The torpor exception tree: every exception torpor raises is defined here.

Every error derives from :class:`TorporError`, so ``except TorporError`` catches all of them.
Control flow that user code must never swallow — a run suspending to wait, a run being
cancelled or stopped, an effect found in doubt — derives from :class:`RunInterrupt`, a
:class:`BaseException`, so a bare ``except Exception`` in a workflow cannot catch it (the rule
DBOS follows with ``DBOSWorkflowCancelledError``; Absurd's ``SuspendTask`` is the
counter-example). Each class's docstring is the meaning of its default message; the ids
involved are attributes (after procrastinate's and httpx's exception modules).

::

    TorporError
    ├── ConfigError                   bad URL, bad setting, bad run id
    │   ├── KeyringError              a key or the keyring: missing, malformed, misplaced
    │   ├── UsersFileError            the console's users file: missing, malformed, no user
    │   └── MarkError                 this host's high-water mark: unreadable or tampered
    ├── BadInputError                 malformed input given to the CLI (usage)
    ├── StoreError                    the store refused or failed
    │   ├── SchemaVersionError        database written by a newer torpor
    │   ├── CorruptRecordError        a row that cannot be decoded
    │   ├── DamagedStoreError         a file that is not a (sound) SQLite database, or missing
    │   ├── StoreFileChangedError     the SQLite file was deleted or replaced while in use
    │   ├── StoreMissingError         a read-only open found no store at the path
    │   ├── StoreBehindMarkError      rolled back, restored or recreated (G16)
    │   ├── LeaseError
    │   │   ├── LeaseHeldError        another owner holds the run
    │   │   └── LeaseLostError        our epoch was fenced off
    │   ├── RunNotFoundError
    │   ├── EpisodeNotFoundError      no episode with this id (torpor.episodes)
    │   ├── InboxPendingError         a guarded append found unapplied messages
    │   └── ConnectionBroken          (injected by a fault plan) the connection died here
    ├── TransitionError               an impossible event (G4)
    ├── PayloadError                  non-serializable or oversized payload (G10)
    │   └── RecordedValueError        a recorded value cannot be read back (its class moved)
    ├── NotSerializable               (also a ValueError) a value that cannot be recorded
    ├── NotDecodable                  (also a ValueError) a recorded value that cannot be read
    ├── WorkflowError
    │   ├── UnknownWorkflowError
    │   ├── VersionMismatchError      resumed under incompatible code
    │   ├── NonDeterminismError       replayed code asks for a different step
    │   └── AsyncMisuseError          an async function given to the sync API in a loop
    ├── StepError                     a step failed (raised again on replay)
    ├── EffectNotApplied              raised by an effect that knows nothing happened
    │   └── AttemptNotStartedError    a child process killed before its function ran
    ├── AttemptTimeoutError           (also a TimeoutError) an attempt outlived its timeout
    ├── AttemptStoppedError           an attempt stopped because its run was cancelled
    ├── WaitTimeout                   a wait reached its deadline
    ├── ApprovalError
    │   ├── ApprovalDeniedError
    │   │   └── ApprovalRespondedError  answered with a reply for the model instead
    │   └── ApprovalInvalidError      revoked, changed content, bad signature
    │       └── DecisionRefusedError  a decision that fails verification where delivered
    ├── RunFinishedError              the run already has an outcome
    ├── InboxError                    a signal/decision the run cannot accept
    │   └── StaleContentError         a decision on content that is no longer what is bound
    ├── ArtifactNotFoundError         no artifact matches a name or hash
    ├── PlannerError                  a planner proposed something impossible
    ├── ToolError
    │   ├── ToolArgsError             arguments refused by a tool's schema
    │   ├── ToolFailedError           a tool raised (message scrubbed of secrets)
    │   ├── ToolTimeoutError          (also a TimeoutError) no return within the timeout
    │   └── TransientError            raised by a tool: worth retrying
    ├── ModelError                    a model call failed
    │   ├── ModelRateLimitedError     429 after the adapter's retries
    │   ├── ModelTimeoutError
    │   ├── ModelUnavailableError     connection refused/reset, 5xx
    │   └── ModelRequestError         4xx other than 429
    │       └── ModelContextTooLongError  the provider refused the context as too long
    └── InjectedFault                 raised by a fault plan (testing)
        ├── AcknowledgementLost       (also a ConnectionError) an effect's reply was lost
        └── ConnectionBroken

    BaseException
    └── RunInterrupt                  never catch in user code
        ├── Suspended                 the run waits (signal, timer, approval, person)
        ├── Cancelled                 the run was cancelled
        ├── RunStopped                run.stop_safe() / run.block(): end with that outcome
        ├── EffectUnresolved          an effect in doubt that only a person can settle
        └── ReleaseRun                give the run back at this boundary (worker shutdown)
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


class TorporError(Exception):
    """Root of every torpor error."""


class ConfigError(TorporError):
    """A configuration value (URL, setting, run id) is invalid."""


class KeyringError(ConfigError):
    """An approver's key pair or the trusted keyring is missing, malformed, of a kind torpor
    does not accept, or in a place torpor refuses (under ``TORPOR_HOME``). The message names
    the file and, for a missing key, the command that creates it."""


class UsersFileError(ConfigError):
    """The web console's users file (names and password hashes) is missing, malformed, or
    lists nobody; or a name or password given for it is not acceptable."""


class BadInputError(TorporError):
    """Input given on the command line is malformed (exit code 2, a usage error)."""


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


class DamagedStoreError(StoreError):
    """The store's file is missing, is not an SQLite database, or is malformed: nothing was
    read from it as if it were sound. The message names the file and what to run
    (``torpor doctor``)."""


class StoreMissingError(StoreError):
    """A command found no store at the path it was given (nothing was created: only what
    starts a run, and ``torpor init``, creates a store)."""


class StoreFileChangedError(StoreError):
    """The SQLite database file a store opened was deleted or replaced while in use: its writes
    would go to a file nobody can open again, so the execution stops before its next effect."""


class StoreFoundDamagedError(StoreFileChangedError, DamagedStoreError):
    """The SQLite store was found damaged by another process while this one used it (the
    damage marker beside the file appeared: :mod:`torpor.store.damage`): the execution stops
    before its next effect, as for a file deleted or replaced."""


class StoreBehindMarkError(StoreError):
    """The store is behind this host's high-water mark (G16): rolled back, restored from an
    older copy, or recreated where another stood. No effect runs and no decision is consumed
    until a person accepts it (``torpor store accept-restore``)."""


class MarkError(ConfigError):
    """This host's high-water mark file cannot be read, written or trusted (:mod:`torpor.marks`)."""


class RunNotFoundError(StoreError):
    """No run with this id exists in the store."""


class EpisodeNotFoundError(StoreError):
    """No episode with this id exists in the store (it may have been pruned)."""


class SessionNotFoundError(StoreError):
    """No session with this name exists in the store (:mod:`torpor.sessions`)."""


class LeaseError(StoreError):
    """A lease operation failed."""


class LeaseHeldError(LeaseError):
    """Another owner holds an unexpired lease on the run."""

    def __init__(self, run_id: str, owner: str, expires_at_ms: int, detail: str = ""):
        super().__init__(
            f"run {run_id!r} is leased by {owner!r} until "
            f"{datetime.fromtimestamp(expires_at_ms / 1000, tz=UTC):%Y-%m-%d %H:%M:%S} UTC; "
            + (detail or "it is being executed elsewhere (retry after the lease expires)")
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


class StreamError(TorporError):
    """A stream write was refused: an item too large or not JSON data, a write inside a
    step's own work outside a part (issue 40, :mod:`torpor.streams`); nothing was written."""


class InboxPendingError(StoreError):
    """An append guarded against unapplied inbox messages found some (apply them, retry)."""


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


class RecordedValueError(PayloadError):
    """A recorded value cannot be read back as what was recorded: its class cannot be found
    (moved, renamed, its module not imported) or refuses the recorded fields. Nothing is
    written; the run resumes once the class is found again (``torpor.register_type``)."""


class NotSerializable(TorporError, ValueError):
    """A value cannot be recorded (see :mod:`torpor.serde`); the message names the path to the
    offending part and its type."""


class NotDecodable(TorporError, ValueError):
    """A recorded value cannot be read back; the message names the path and the class."""


class WorkflowError(TorporError):
    """A problem with workflow code or its registration."""


class UnknownWorkflowError(WorkflowError):
    """No workflow is registered under this name."""


class VersionMismatchError(WorkflowError):
    """The run was recorded under a workflow version the current code does not accept."""


class NonDeterminismError(WorkflowError):
    """Replayed workflow code asked for something that contradicts the recorded history."""


class AsyncMisuseError(WorkflowError):
    """An async function was given to the sync API inside a running event loop: a mistake in
    the workflow code, never recorded as the step's failure (fixed code must be able to
    replay)."""

    def __init__(self) -> None:
        super().__init__(
            "an async step function was called with run.step()/run.effect() inside an async "
            "workflow; use `await run.astep(...)` / `await run.aeffect(...)` there"
        )


class StepError(TorporError):
    """A step failed; on replay the recorded failure is raised again (determinism)."""

    def __init__(self, run_id: str, step_id: str, error: str):
        super().__init__(f"run {run_id!r} step {step_id!r} failed: {error}")
        self.run_id, self.step_id, self.error = run_id, step_id, error


class EffectNotApplied(TorporError):
    """Raise from an effect function when it *knows* nothing happened (e.g. refused before
    sending). The engine records the effect as absent instead of asking ``reconcile``."""


class AttemptNotStartedError(EffectNotApplied):
    """An attempt's child process (``Timeout(kill=True)``) did not start its function within
    ``Timeout.startup_s`` and was killed: the function never ran, so nothing happened (the
    effect is absent; retried under its retry policy)."""


class AttemptTimeoutError(TorporError, TimeoutError):
    """An attempt of an effect did not return within its timeout and was stopped (killed in
    its child process, or cancelled); the message says which attempt and how."""


class AttemptStoppedError(TorporError):
    """An attempt of an effect was stopped (its child process killed, its task cancelled)
    because its run was cancelled and the attempt outlived the cancel's grace
    (:mod:`torpor.engine.cancel`). Never retried; the effect is reconciled."""


class WaitTimeout(TorporError):
    """A wait reached its deadline before its wake condition."""


class ApprovalError(TorporError):
    """An approval does not authorize what was asked."""


class ApprovalDeniedError(ApprovalError):
    """A person denied the approval."""


class ApprovalRespondedError(ApprovalDeniedError):
    """A person answered the approval with a reply instead of approving it (issue 39): nothing
    runs; ``reply`` goes back to the model, ``by`` names who replied."""

    def __init__(self, message: str, *, reply: str = "", by: str = ""):
        super().__init__(message)
        self.reply = reply
        self.by = by


class ApprovalInvalidError(ApprovalError):
    """The approval was revoked, its content changed, or its signature does not verify."""


class DecisionRefusedError(ApprovalInvalidError):
    """A decision fails verification against the trusted keyring (unknown or removed key, a
    signature that does not match what was decided, a signer not allowed to sign for that
    person); ``reason`` says which. Nothing was delivered."""

    def __init__(self, message: str, *, reason: str = ""):
        super().__init__(message)
        self.reason = reason or message


class RunFinishedError(TorporError):
    """The run already has a terminal outcome."""


class InboxError(TorporError):
    """A signal or decision cannot be accepted (unknown approval, already consumed)."""


class StaleContentError(InboxError):
    """A decision names content other than what the run asks to approve now — the person
    reviewed a page rendered before the content changed (or the approval was settled since):
    nothing was sent; review the content again."""


class ArtifactNotFoundError(TorporError):
    """No artifact of the run matches the name or hash asked for."""


class PlannerError(TorporError):
    """The planner proposed something impossible (a finished step changed, an unknown
    dependency, too many revisions)."""


class SummaryFailed(TorporError):
    """An agent's summarizer gave no usable summary (its model call failed, or it answered
    nothing): the working buffer stays as it was (:mod:`torpor.memory.compaction`)."""


class SandboxError(TorporError):
    """A sandbox VM could not be had or used (:mod:`torpor.sandbox`)."""


class SandboxImageError(SandboxError):
    """The sandbox's guest image cannot be built, is missing, or does not match its sha256."""


class SandboxSnapshotError(SandboxError):
    """A sandbox could not be put to sleep, or its snapshot is refused at waking: the stream or
    the workspace disk does not match the manifest's hashes, or it needs another machine."""


class IsolationUnavailableError(SandboxError):
    """No VM boundary can be had on this host (no QEMU, no image): torpor refuses to run agent
    code without one unless told ``isolation="process"`` (G15). ``reason`` says what is missing."""

    def __init__(self, reason: str):
        super().__init__(f"no VM boundary on this host: {reason} (see `torpor sandbox doctor`)")
        self.reason = reason


class SandboxGoneError(SandboxError):
    """The sandbox's VM died, was killed at a timeout, or stopped answering its agent channel."""


class ToolError(TorporError):
    """A tool call could not be made or did not return a result."""


class ToolArgsError(ToolError):
    """Arguments refused by the tool's schema; ``details`` is what the planner is shown."""

    def __init__(self, tool: str, message: str, details: list[dict[str, Any]] | None = None):
        super().__init__(f"tool {tool!r}: {message}")
        self.tool, self.message, self.details = tool, message, details or []

    def observation(self) -> dict[str, Any]:
        """What a planner is shown: the refusal and pydantic's error details."""
        return {
            "error": f"invalid arguments for tool {self.tool!r}: {self.message}",
            "details": self.details,
        }


class ToolFailedError(ToolError):
    """A tool raised; the message is the original error with secrets scrubbed."""


class ToolTimeoutError(ToolError, TimeoutError):
    """The tool did not return within its timeout. ``future`` is the call still running in
    its thread (a thread cannot be killed), or None."""

    def __init__(self, tool: str, timeout_s: float, future: Any = None):
        super().__init__(f"tool {tool!r} did not return within {timeout_s:g} s")
        self.future = future


class TransientError(ToolError):
    """Raise from a tool for a failure worth retrying (a 503, a dropped connection)."""


class McpError(ToolError):
    """An MCP server (:mod:`torpor.mcp`) could not be reached, or answered outside the
    protocol; the message names the server."""


class McpConnectionError(McpError, ConnectionError):
    """The connection to an MCP server broke while a call was in flight: the server may have
    performed it (an effect is reconciled, never retried blindly)."""


class McpNotSentError(McpError, EffectNotApplied):
    """An MCP call was never sent (the server could not be reached, or its session could not
    be re-established): nothing happened."""


class McpSessionLostError(McpNotSentError):
    """The server's session was lost and the state it kept for it cannot be re-created
    (``stateful=True`` without ``setup`` calls, or a setup call failed on replay): the run
    cannot continue on that server; nothing was sent."""


class McpToolsChangedError(McpError, VersionMismatchError):
    """An MCP server offers another tool list than the one the run recorded (an upgrade):
    the run needs attention and stays resumable (it continues once the server offers the
    recorded list again)."""


class ModelError(TorporError):
    """A model call failed. ``transient``: trying again later may succeed."""

    transient = False

    def __init__(self, model: str, message: str, *, status: int | None = None):
        super().__init__(f"model {model!r}: {message}")
        self.model, self.status = model, status


class ModelRateLimitedError(ModelError):
    """HTTP 429 after the adapter's own retries. ``retry_after`` (seconds) when the server
    said so."""

    transient = True

    def __init__(self, model: str, message: str, *, retry_after: float | None = None):
        super().__init__(model, message, status=429)
        self.retry_after = retry_after


class ModelTimeoutError(ModelError):
    """No answer within the adapter's timeout (after its retries)."""

    transient = True


class ModelUnavailableError(ModelError):
    """Connection refused or reset, or a 5xx/overloaded answer (after retries)."""

    transient = True


class ModelRequestError(ModelError):
    """The provider refused the request (4xx other than 429): bad request, auth, not found."""


class ModelContextTooLongError(ModelRequestError):
    """The provider refused the request because its context is longer than the model's window
    (OpenAI ``context_length_exceeded``, Anthropic ``prompt is too long`` or 413).
    ``limit`` and ``sent``: the window and the request's size in the provider's tokens, when
    its message says them. An agent compacts harder and retries once (docs/context.md)."""

    def __init__(
        self,
        model: str,
        message: str,
        *,
        status: int | None = None,
        limit: int | None = None,
        sent: int | None = None,
    ):
        super().__init__(model, message, status=status)
        self.limit, self.sent = limit, sent


class InjectedFault(TorporError):
    """Base of the exceptions a fault plan raises at a point (:mod:`torpor.faults`)."""


class AcknowledgementLost(InjectedFault, ConnectionError):
    """The effect's acknowledgement was lost (injected): it may well have happened."""


class ConnectionBroken(InjectedFault, StoreError):
    """The database connection broke here (injected)."""


class RunInterrupt(BaseException):
    """Control flow that unwinds a workflow. Derives from BaseException: never catch it."""


class Suspended(RunInterrupt):
    """The run is waiting durably; the process may exit. Raised out of ``run.wait_for`` & co."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Cancelled(RunInterrupt):
    """The run was cancelled; raised at the next durable boundary."""


class RunStopped(RunInterrupt):
    """``run.stop_safe()`` / ``run.block()``: the run ends with ``outcome`` (an Outcome value)
    and ``reason``."""

    def __init__(self, outcome: str, reason: str):
        super().__init__(reason)
        self.outcome, self.reason = outcome, reason


class EffectUnresolved(RunInterrupt):
    """An effect's outcome is unknown and only a person can settle it: the run ends
    ``unresolved`` naming ``key``."""

    def __init__(self, key: str, reason: str):
        super().__init__(f"effect {key!r}: {reason}")
        self.key, self.reason = key, reason


class ReleaseRun(RunInterrupt):
    """Give the run back at this boundary without an outcome (a worker shutting down)."""
