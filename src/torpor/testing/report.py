"""What the crash-point explorer works with and reports: the workflow under test
(:class:`Target`), each process of a case (:class:`Proc`), the invariants it broke
(:class:`Violation`), each case (:class:`CaseResult`) and the whole run (:class:`Report`) —
plus how effects are counted from a history (:func:`performed_effects`)."""

from __future__ import annotations

import importlib
import json
import random
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..history import Event

#: ``ledger(world, run_id) -> {idempotency key: times the outside world received it}``.
Ledger = Callable[[Path, str], Mapping[str, int]]

KINDS = ("crash", "ack", "break")
PROCESS_SEP = " > "


@dataclass
class Target:
    """What to explore: ``module`` registers ``workflow``; ``input`` is JSON data."""

    module: str
    workflow: str
    input: Any = None
    #: Extra ``sys.path`` entries for the processes (e.g. a repository root).
    paths: Sequence[str] = ()
    #: The effect's own ledger: a callable, or ``"module:function"`` naming one.
    ledger: Ledger | str | None = None
    #: Approver recorded for approvals (None: runs wait for a person; the case then fails).
    auto_approve: str | None = "explorer"
    lease_ttl_s: float = 30.0
    #: Keys of a dict result that may differ between runs (a timestamp, a commit of one).
    ignore_result_keys: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    run_id: str = "explored"
    #: Seconds one process of a case may take before the lane kills it.
    timeout_s: float = 300.0

    def spec(self) -> str:
        return f"{self.module}:{self.workflow}"

    def ledger_fn(self) -> Ledger | None:
        if self.ledger is None or callable(self.ledger):
            return self.ledger
        mod, _, fn = self.ledger.partition(":")
        for p in self.paths:
            if p not in sys.path:
                sys.path.insert(0, p)
        found: Ledger = getattr(importlib.import_module(mod), fn)
        return found


@dataclass
class Proc:
    """One process of a case."""

    plan: str
    pid: int
    rc: int
    killed: bool
    result: dict[str, Any]
    trace: list[str]

    @property
    def points(self) -> list[str]:
        return [t for t in self.trace if not t.startswith("#")]

    @property
    def steps_run(self) -> list[str]:
        return [t.split(" ", 1)[1] for t in self.trace if t.startswith("#step ")]


@dataclass
class Violation:
    case: int
    plan: str
    seed: int
    message: str

    def __str__(self) -> str:
        return f"case {self.case} [seed {self.seed}] plan {self.plan!r}: {self.message}"


@dataclass
class CaseResult:
    index: int
    plan: str
    seed: int
    procs: list[Proc]
    outcome: str | None = None
    violations: list[Violation] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def landed(self) -> int:
        """Processes that died by their fault plan's SIGKILL."""
        return sum(1 for p in self.procs if p.killed)


@dataclass
class Report:
    target: str
    seed: int
    boundaries: list[str]
    by_kind: dict[str, int]
    cases: list[CaseResult]
    baseline: dict[str, Any]
    seconds: float

    @property
    def violations(self) -> list[Violation]:
        return [v for c in self.cases for v in c.violations]

    @property
    def ok(self) -> bool:
        return not self.violations

    def kills(self) -> int:
        return sum(c.landed for c in self.cases)

    def assert_ok(self) -> None:
        """Raise AssertionError with the summary (violations, how to reproduce) if any."""
        if not self.ok:
            raise AssertionError(self.summary())

    def summary(self) -> str:
        crash_names = Counter(b.split("@")[0] for b in self.boundaries)
        lines = [
            f"explored {self.target}: {len(self.boundaries)} crash boundaries "
            f"({', '.join(f'{n} {k}' for k, n in sorted(crash_names.items()))})",
            f"  cases run: {len(self.cases)} "
            f"({', '.join(f'{k} {n}' for k, n in self.by_kind.items() if n)}); "
            f"processes killed by their plan: {self.kills()}; seed {self.seed}; "
            f"{self.seconds:.0f} s",
            f"  baseline: {self.baseline.get('outcome')} in "
            f"{self.baseline.get('seconds', 0):.1f} s",
        ]
        if self.ok:
            lines.append("  violations: 0")
        else:
            lines.append(f"  violations: {len(self.violations)}")
            for v in self.violations:
                lines.append(f"  - {v}")
                lines.append(
                    f"    reproduce: torpor explore {self.target} --input "
                    f"'{json.dumps(self.baseline.get('input'))}' --case '{v.plan}'"
                )
        return "\n".join(lines)


def numbered(points: Sequence[str]) -> list[str]:
    seen: Counter[str] = Counter()
    out = []
    for p in points:
        seen[p] += 1
        out.append(f"{p}@{seen[p]}")
    return out


def performed_effects(events: Sequence[Event]) -> dict[str, int]:
    """``{idempotency key: times performed}`` by a history: observed, or reconciled as
    applied (by the engine or a person)."""
    performed: Counter[str] = Counter()
    for e in events:
        p: Any = e.payload
        if e.type == "effect_observed" or (
            e.type == "effect_reconciled" and p.verdict.value == "applied"
        ):
            performed[p.key] += 1
    return dict(performed)


def plan_cases(
    boundaries: Sequence[str],
    other: Mapping[str, Sequence[str]],
    *,
    kinds: Sequence[str] = KINDS,
    sample: int | None = None,
    seed: int = 0,
    recovery_crashes: int = 1,
    order: Sequence[str] | None = None,
) -> list[tuple[str, int]]:
    """``[(plan, case seed)]``: one case per boundary of each kind (or a ``sample`` of them:
    every effect boundary, then a seeded draw), each followed by ``recovery_crashes`` crashes
    at a seeded boundary of the resuming processes (``crash:*@k``)."""
    firsts: list[str] = []
    if "crash" in kinds:
        firsts += [f"crash:{b}" for b in boundaries]
    for kind in ("ack", "break"):
        if kind in kinds:
            firsts += [f"{kind}:{b}" for b in other.get(kind, ())]
    rng = random.Random(seed)
    if sample is not None and sample < len(firsts):
        # The effect boundaries first (where a crash can duplicate or lose an effect), then a
        # seeded draw among the rest; the cases keep the order of the run.
        must = [i for i, f in enumerate(firsts) if ":effect." in f][:sample]
        rest = [i for i in range(len(firsts)) if i not in set(must)]
        chosen = sorted(must + rng.sample(rest, sample - len(must)))
        firsts = [firsts[i] for i in chosen]
    every = list(order or boundaries)  # all boundaries of the run, to place each case
    total = len(every)
    pos = {b: i for i, b in enumerate(every)}
    out = []
    for first in firsts:
        case_seed = rng.randrange(1 << 30)
        crng = random.Random(case_seed)
        where = first.split(":", 1)[1]
        remaining = max(1, total - pos.get(where, 0) - 1)
        plans = [first]
        for _ in range(recovery_crashes):
            plans.append(f"crash:*@{crng.randint(1, remaining)}")
        out.append((PROCESS_SEP.join(plans), case_seed))
    return out
