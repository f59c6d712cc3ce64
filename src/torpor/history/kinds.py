"""The kinds of a history that need no model: statuses, outcomes, policies, verdicts and the
event schema version. Plain enums and constants, importable without pydantic, so a command
that only lists runs (``torpor ls``) does not load the payload models (issue 48); every name
here is re-exported by :mod:`.events` and :mod:`torpor.history`."""

from __future__ import annotations

import re
from enum import StrEnum

SHA256_RE = re.compile(r"[0-9a-f]{64}")

#: Version of the event payload schema. A stored event with a higher version is refused.
#: 2: ``step_completed`` may record a whole read/compute step attempt (``attempt`` >= 1).
#: 3: decisions signed per person (``approval_decided.scheme``/``key``/``delegate``), N-of-M
#: approvals (``approval_requested.approvers``/``required``), ``approval_refused``; messages
#: carry when they arrived (``signal_received.arrived_at_ms``, ``approval_decided.arrived_at_ms``)
#: and the wait they answer (``signal_received.wait_id``); ``message_refused`` records a message
#: that had no effect.
#: 4: an agent's working memory: ``context_compacted`` (the oldest turns folded into the running
#: summary, one atomic transition) and ``context_built`` (what a model call was sent: its hash and
#: per-section token counts). Histories of versions 1-3 read as they were.
#: 5: child runs (issue 37): ``run_started.parent``, ``wait_started`` of kind ``children``
#: (``children``, ``need``), ``wait_completed`` via ``children``, and ``child_ended`` (a child's
#: outcome, moved from the parent's inbox); and decisions name the store and the request they
#: were signed for (``approval_decided.store``/``request``; the request's
#: ``approval_requested.nonce``, issue 34).
#: 6 (issue 39): steering (``steer_received``, ``steer_taken``, ``reply_retracted``), escalation
#: stages of an approval's wait (``wait_escalated``), approve with edit
#: (``approval_decided.edited``/``edited_content``), ``respond`` decisions and the ``responded``
#: outcome of a tool call.
#: 6 (issue 45): forks: ``run_forked`` (a run whose events up to it are another run's,
#: copied), ``effect_intended.redoes`` (an effect a fork performs again, by ``--redo-effects``).
EVENT_SCHEMA_VERSION = 6


class Policy(StrEnum):
    """Recovery policy of a step (DESIGN.md §1)."""

    #: Safe to repeat: re-executed on resume if it did not complete.
    READ = "read"
    #: Deterministic: the recorded result is reused while its input hash is unchanged.
    COMPUTE = "compute"
    #: Changes the outside world: idempotency key, intent before the call, reconcile on recovery.
    EFFECT = "effect"
    #: A person's decision, bound to the content decided on.
    DECISION = "decision"


class Outcome(StrEnum):
    """Terminal state of a run (DESIGN.md §1)."""

    SUCCEEDED = "succeeded"
    SUCCEEDED_WITH_WARNINGS = "succeeded_with_warnings"
    STOPPED_SAFE = "stopped_safe"
    BLOCKED = "blocked"
    UNRESOLVED = "unresolved"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: Outcomes a person can reopen (resolve the effect in doubt, raise the limit, re-approve).
REOPENABLE = frozenset({Outcome.UNRESOLVED, Outcome.BLOCKED})


class RunStatus(StrEnum):
    """Where a run is in its life. ``finished`` runs carry an :class:`Outcome`."""

    PENDING = "pending"  # created or woken, runnable
    RUNNING = "running"  # has executed under a lease (may have crashed since)
    WAITING = "waiting"  # durable wait: holds no lease, no process
    FINISHED = "finished"


class Verdict(StrEnum):
    """What reconciling an intended-but-unobserved effect found (DESIGN.md §1, effect)."""

    APPLIED = "applied"
    ABSENT = "absent"
    UNKNOWN = "unknown"
