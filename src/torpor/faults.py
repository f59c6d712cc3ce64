"""Named fault points at the durable boundaries of the engine and the stores, and fault plans.

A *fault point* is a one-line call, ``faults.point("append.after")``, at a place where a process
could die or a conversation with the outside world could go wrong. With no plan and no trace
configured the module-level :func:`point` is a no-op function (a call that returns at once), so
the points cost nothing measurable in production.

A *fault plan* is a list of rules ``<action>:<point>[@<n>][=<arg>]`` — do ``action`` the
``n``-th time (default the first; ``@*`` every time) the process reaches ``point`` (``*``: any
of the :data:`CRASH_POINTS`, counted together). Actions:

==========  ==========================================================================
``crash``   SIGKILL this process — a real crash, no ``except``/``finally`` runs
``ack``     raise :class:`AcknowledgementLost` (a ``ConnectionError``): at ``effect.called``
            the effect happened but its caller never hears so (a dropped acknowledgement)
``break``   raise :class:`ConnectionBroken` (a :class:`~torpor.errors.StoreError`): the
            database connection died here (``append.committing``: before the commit;
            ``append.committed``: after it — the store must read back, never guess)
``delay``   sleep ``arg`` seconds here (``lease.renewing``: a renewal late past expiry)
``twice``   ask the caller to do it again (``wake.posted``: the same wake delivered twice)
``stop``    SIGSTOP this process — it pauses, every thread, until someone sends SIGCONT
==========  ==========================================================================

Configure a plan with the environment (read at import, so a fresh process picks it up):

- ``TORPOR_FAULTS="crash:append.after@3;delay:lease.renewing@*=2.5"`` — explicit rules;
- ``TORPOR_CRASH_AT=<point>[@<n>]`` — the original interface, the same as ``crash:<point>@<n>``;
- ``TORPOR_TRACE_POINTS=<file>`` — append every point reached, one name a line (with
  ``TORPOR_TRACE_DETAIL=1`` also ``#step <step id>`` before each step body runs);

or in code: :func:`install` (:meth:`FaultPlan.parse` / :meth:`FaultPlan.from_seed`), :func:`reset`.
The crash-point explorer (:mod:`torpor.testing.explorer`) builds plans from a seed.

The points (:data:`POINTS` is the table the docs are generated from):
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from .errors import AcknowledgementLost, ConnectionBroken

#: Every fault point: where it is and what the state is when a process dies there.
POINTS: dict[str, str] = {
    # engine (runtime.py)
    "append.before": "events folded and checked, not yet written (a crash loses only them)",
    "append.after": "an append committed (events, engine checkpoint, consumed inbox)",
    "append.deferred": "an effect's observation folded, to be written with the next append "
    "(a crash loses it: the effect is intended, not observed, and reconciled on recovery)",
    "lease.acquired": "the first write of an execution recorded its lease",
    "lease.renewing": "the heartbeat is about to renew the lease (delay: renewal late)",
    "lease.renewed": "a lease renewal committed",
    # workflow primitives (run.py)
    "effect.intended": "an effect's intent committed; the effect not yet called",
    "effect.calling": "an effect is about to be called: its intent committed, the lease not yet "
    "checked (stop: the process pauses here, as a SIGSTOP or a long GC pause would)",
    "effect.called": "the effect function returned (the world changed); observation not "
    "recorded (ack: the call raises instead, as if the reply were lost)",
    "artifact.stored": "artifact bytes written to the artifact store; not yet recorded",
    "checkpoint.saved": "a run.checkpoint(state) committed",
    "wait.started": "a wait recorded; the run is about to suspend",
    "wait.completed": "a wake recorded (signal, timer, decision, children): the wait is over",
    # child runs (engine/children.py)
    "child.created": "a child run created (its row and run_started); the parent's step that "
    "started it not yet recorded (a resumed parent finds it, never a second)",
    "child.spawned": "the parent's step that started a child run committed",
    "children.cancelled": "a parent posted the cancel of its unfinished children; its own "
    "outcome (or the end of its wait) is not yet recorded",
    # agents (models/record.py, agent.py)
    "model.recorded": "a model call's response and usage committed (never paid for again)",
    "agent.plan.recorded": "an agent's new plan version committed",
    "agent.tool.settled": "the outcome of an agent's tool call committed",
    "memory.compacted": "an agent's compaction committed (summary and folded units, one "
    "transition); its checkpoint not yet saved",
    "memory.overflow": "a provider refused an agent's context as too long: the harder "
    "compaction committed (one step), the retry not yet made",
    # stores (store/base.py)
    "append.committing": "the store is about to run the append transaction (break: the "
    "connection dies before anything commits; the store reads back and retries)",
    "append.committed": "the append committed, before the store returns (break: the "
    "connection dies after the commit; the store reads back and finds it)",
    "append.landed": "a failed commit was read back and had landed (not retried)",
    "append.absent": "a failed commit was read back and had not landed (retried)",
    "wake.posted": "an inbox message (signal, decision, revocation, cancel) committed "
    "(twice: delivered again with the same message id)",
    # episodes (episodes/store.py)
    "episodes.derived": "a run's episodes derived from its history, none written yet",
    "episodes.written": "a run's episodes inserted, their transaction not yet committed",
    # episode vectors (episodes/store.py)
    "episodes.vectors": "a run's episodes committed, their vectors not yet written",
}

#: Points reached in a deterministic order by the process executing a run: where the explorer
#: crashes, and what ``*`` counts. (The others are aliases of these for a crash —
#: ``append.committing``/``append.committed`` fall between ``append.before``/``append.after``
#: with nothing else in between — or happen on another thread or in another process.)
CRASH_POINTS: tuple[str, ...] = (
    "append.before",
    "append.after",
    "append.deferred",
    "lease.acquired",
    "effect.intended",
    "effect.called",
    "artifact.stored",
    "checkpoint.saved",
    "wait.started",
    "wait.completed",
    "child.created",
    "child.spawned",
    "children.cancelled",
    "model.recorded",
    "agent.plan.recorded",
    "agent.tool.settled",
    "memory.compacted",
    "memory.overflow",
)

ACTIONS = ("crash", "ack", "break", "delay", "twice", "stop")


@dataclass
class Rule:
    """Do ``action`` the ``nth`` time (0: every time) ``target`` is reached (``*``: any crash
    point)."""

    action: str
    target: str
    nth: int = 1
    arg: float | None = None
    seen: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown fault action {self.action!r} (one of {ACTIONS})")
        if self.target != "*" and self.target not in POINTS:
            raise ValueError(f"unknown fault point {self.target!r} (see torpor.faults.POINTS)")
        if self.action == "delay" and self.arg is None:
            raise ValueError("a delay rule needs seconds: delay:<point>@<n>=<seconds>")

    def matches(self, name: str) -> bool:
        if self.target == name:
            return True
        return self.target == "*" and name in _CRASH_SET

    def __str__(self) -> str:
        n = "*" if self.nth == 0 else str(self.nth)
        arg = "" if self.arg is None else f"={self.arg:g}"
        return f"{self.action}:{self.target}@{n}{arg}"


@dataclass
class FaultPlan:
    """An ordered list of :class:`Rule`; the first rule that fires at a point decides."""

    rules: list[Rule] = field(default_factory=list)
    seed: int | None = None

    @classmethod
    def parse(cls, text: str) -> FaultPlan:
        """``"crash:append.after@3;delay:lease.renewing@*=2.5"`` (``;`` or ``,`` separated).
        A rule without an action (``append.after@3``) is a crash."""
        rules = []
        for raw in text.replace(",", ";").split(";"):
            raw = raw.strip()
            if not raw:
                continue
            action, sep, rest = raw.partition(":")
            if not sep:
                action, rest = "crash", raw
            rest, _, arg = rest.partition("=")
            target, _, nth = rest.partition("@")
            rules.append(
                Rule(
                    action.strip(),
                    target.strip(),
                    0 if nth.strip() == "*" else int(nth or 1),
                    float(arg) if arg else None,
                )
            )
        return cls(rules)

    @classmethod
    def from_seed(
        cls,
        seed: int,
        boundaries: Sequence[str] | int,
        *,
        actions: Sequence[str] = ("crash",),
    ) -> FaultPlan:
        """A plan drawn from ``seed``: one rule at one boundary.

        ``boundaries`` is what a crash-free run crossed (``["append.after", ...]`` in order,
        e.g. from a trace) or just how many: then the rule is ``<action>:*@<k>``. The same seed
        and boundaries always give the same plan.
        """
        rng = random.Random(seed)
        action = rng.choice(list(actions))
        if isinstance(boundaries, int):
            return cls([Rule(action, "*", rng.randint(1, max(1, boundaries)))], seed)
        if not boundaries:
            raise ValueError("no boundaries to choose from")
        i = rng.randrange(len(boundaries))
        name = boundaries[i]
        nth = sum(1 for b in boundaries[: i + 1] if b == name)
        return cls([Rule(action, name, nth)], seed)

    def __str__(self) -> str:
        return ";".join(str(r) for r in self.rules)


# ------------------------------------------------------------------ the active configuration

_CRASH_SET = frozenset(CRASH_POINTS)
_lock = threading.Lock()
_plan: FaultPlan | None = None
_trace: str | None = None
_detail = False


def _noop(name: str) -> bool:
    return False


def _noop_note(kind: str, detail: str, run_id: str = "") -> None:
    return None


def _active(name: str) -> bool:
    """Mark a boundary: trace it, and apply the plan's rule for it if one fires. Returns True
    when the caller should do what it just did again (``twice``)."""
    if _trace is not None:
        with open(_trace, "a") as f:
            f.write(name + "\n")
    plan = _plan
    if plan is None:
        return False
    fired: Rule | None = None
    with _lock:
        for rule in plan.rules:
            if rule.matches(name):
                rule.seen += 1
                if fired is None and (rule.nth == 0 or rule.seen == rule.nth):
                    fired = rule
    if fired is None:
        return False
    return _do(fired, name)


def _do(rule: Rule, name: str) -> bool:
    if rule.action == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # not reached: SIGKILL is delivered before the next instruction matters
    if rule.action == "ack":
        raise AcknowledgementLost(f"acknowledgement lost at {name} (injected: {rule})")
    if rule.action == "break":
        raise ConnectionBroken(f"database connection broken at {name} (injected: {rule})")
    if rule.action == "delay":
        time.sleep(rule.arg or 0.0)
        return False
    if rule.action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
        return False
    return rule.action == "twice"


def _active_note(kind: str, detail: str, run_id: str = "") -> None:
    if _trace is not None and _detail:
        with open(_trace, "a") as f:
            # (The run, after a tab: the explorer tells the runs of a tree apart.)
            f.write(f"#{kind} {detail}\t{run_id}\n" if run_id else f"#{kind} {detail}\n")


#: ``point(name) -> bool``: the hook called at every boundary (rebound by :func:`install`).
point = _noop
#: ``note(kind, detail, run_id="")``: trace-only notes (``step`` before a step body runs),
#: never faults.
note = _noop_note


def install(
    plan: FaultPlan | str | None = None,
    *,
    trace: str | os.PathLike[str] | None = None,
    detail: bool = False,
) -> None:
    """Activate ``plan`` (a :class:`FaultPlan` or its text) and/or a trace file in this
    process; with neither, the points become no-ops again."""
    global _plan, _trace, _detail, point, note
    if isinstance(plan, str):
        plan = FaultPlan.parse(plan) if plan.strip() else None
    _plan = plan
    _trace = os.fspath(trace) if trace is not None else None
    _detail = detail
    on = _plan is not None or _trace is not None
    point = _active if on else _noop
    note = _active_note if _trace is not None and _detail else _noop_note


def reset() -> None:
    """No plan, no trace: every point is a no-op."""
    install(None)


def active_plan() -> FaultPlan | None:
    return _plan


def from_env() -> None:
    """(Re)read ``TORPOR_FAULTS``, ``TORPOR_CRASH_AT``, ``TORPOR_TRACE_POINTS`` and
    ``TORPOR_TRACE_DETAIL`` (done at import; call again after changing them in a forked
    child)."""
    text = os.environ.get("TORPOR_FAULTS") or ""
    crash_at = os.environ.get("TORPOR_CRASH_AT") or ""
    if crash_at:
        text = f"{text};crash:{crash_at}" if text else f"crash:{crash_at}"
    install(
        text or None,
        trace=os.environ.get("TORPOR_TRACE_POINTS") or None,
        detail=os.environ.get("TORPOR_TRACE_DETAIL", "") not in ("", "0"),
    )


def describe_points() -> str:
    """The point table as text (``torpor explore --points``, the docs)."""
    width = max(len(n) for n in POINTS)
    return "\n".join(
        f"{n:<{width}}  {'*' if n in _CRASH_SET else ' '} {d}" for n, d in POINTS.items()
    )


from_env()

__doc__ = (__doc__ or "") + "\n" + "\n".join(f"- ``{n}`` — {d}" for n, d in POINTS.items())
