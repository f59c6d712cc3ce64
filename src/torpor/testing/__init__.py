"""Testing kit: prove a workflow survives every interruption.

- :func:`explore` / :class:`Target` — the crash-point explorer (:mod:`torpor.testing.explorer`);
- :class:`FakeClock` — time for timers, deadlines and leases that moves when the test says;
- :class:`FileLedger` — an outside-world ledger effects write to and the explorer counts;
- :func:`effect_counts`, :func:`assert_effects`, :func:`step_runs` — what a run's history says;
- pytest fixtures (``torpor_clock``, ``torpor_runtime``, ``torpor_explore``), registered as the
  ``torpor`` pytest plugin (:mod:`torpor.testing.plugin`).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..client import Client
from .clock import FakeClock, OffsetClock
from .explorer import explore
from .report import CaseResult, Report, Target, Violation, performed_effects


class FileLedger:
    """An append-only JSON-lines file that stands for the outside world in tests: an effect
    records each delivery with its idempotency key (fsynced, so it survives SIGKILL), and
    :meth:`counts` tells how often each key arrived. Under the explorer, :meth:`here` is the
    ledger of the case's world (``$TORPOR_EXPLORE_WORLD/ledger.jsonl``)."""

    NAME = "ledger.jsonl"

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    @classmethod
    def here(cls, default: str | os.PathLike[str] | None = None) -> FileLedger:
        world = os.environ.get("TORPOR_EXPLORE_WORLD")
        if world:
            return cls(Path(world) / cls.NAME)
        if default is None:
            raise RuntimeError("no ledger: not under the explorer and no default path given")
        return cls(default)

    def record(self, key: str, **fields: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps({"key": key, "pid": os.getpid(), **fields}) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(x) for x in self.path.read_text().splitlines() if x.strip()]

    def has(self, key: str) -> bool:
        return any(e["key"] == key for e in self.entries())

    def counts(self) -> dict[str, int]:
        return dict(Counter(e["key"] for e in self.entries()))


def world_ledger(world: Path, run_id: str) -> Mapping[str, int]:
    """The explorer's ledger adapter for effects that write a :class:`FileLedger`."""
    return FileLedger(Path(world) / FileLedger.NAME).counts()


def effect_counts(client: Client, run_id: str) -> dict[str, int]:
    """``{idempotency key: times performed}`` by the run's record (observed, or reconciled as
    applied)."""
    return performed_effects(client.events(run_id))


def assert_effects(
    client: Client,
    run_id: str,
    expected: Mapping[str, int],
    ledger: Mapping[str, int] | None = None,
) -> None:
    """Assert the run performed exactly ``expected`` (``{key or step id: count}``) by its
    record — and by ``ledger`` (the outside world's counts) when given. A key without ``/`` is
    taken as a step id (``<run_id>/<step>``, the default key)."""
    want = {(k if "/" in k else f"{run_id}/{k}"): n for k, n in expected.items()}
    got = effect_counts(client, run_id)
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in want.items() if v}, (
        f"run {run_id}: effects performed {got}, expected {want}"
    )
    if ledger is not None:
        seen = {k: v for k, v in ledger.items() if k in want or v}
        assert seen == {k: v for k, v in want.items() if v}, (
            f"run {run_id}: the outside world received {dict(ledger)}, expected {want}"
        )


def step_runs(client: Client, run_id: str) -> dict[str, int]:
    """``{step id: completions recorded}`` (a step id appears once unless a compute step was
    recomputed for a new input)."""
    return dict(
        Counter(
            e.payload.step_id  # type: ignore[attr-defined]
            for e in client.events(run_id)
            if e.type == "step_completed"
        )
    )


__all__ = [
    "CaseResult",
    "FakeClock",
    "FileLedger",
    "OffsetClock",
    "Report",
    "Target",
    "Violation",
    "assert_effects",
    "effect_counts",
    "explore",
    "step_runs",
    "world_ledger",
]
