"""The OpenAI Agents SDK desk (issue 47) killed with SIGKILL at its boundaries (the crash-point
explorer, README "Crash it on purpose"), crashed again while it recovers, resumed to its end:
the crash-free run's outcome and output, every model call and read tool paid for at most once
after it was recorded (no completed step body ran again), the refund performed
exactly once by torpor's record and by the ledger it writes, a history that folds.

CI crashes every boundary that is not a plain append (each model call's record, the refund's
intent and call, the lease) and every append of the refund's step; every boundary, exhaustively:
``uv run python scripts/openai_agents_explore.py`` (28 crash boundaries and the lost
acknowledgement; about a minute on two cores)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from torpor.testing import explore

pytest.importorskip("agents")

ROOT = Path(__file__).resolve().parents[1]

#: Real processes killed and resumed: the full suite runs these; the fast tier skips them.
pytestmark = pytest.mark.slow


def test_sigkill_at_the_desks_boundaries_resumes_to_the_same_output(tmp_path: Path) -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from examples.openai_agents import explore_target

    target = explore_target(ROOT)
    chosen: list[str] = []

    def select(boundaries: list[str]) -> list[str]:
        effect = [i for i, b in enumerate(boundaries) if b.startswith("effect.")]
        around = set(range(effect[0] - 1, effect[-1] + 3))  # the refund's appends too
        chosen.extend(
            b for i, b in enumerate(boundaries) if i in around or not b.startswith("append.")
        )
        return chosen

    report = explore(
        target, seed=47, kinds=["crash", "ack"], select=select, workdir=tmp_path / "w", jobs=2
    )
    print(report.summary())
    assert report.ok, report.summary()
    crashed = {c.plan.split(" > ")[0].split("@")[0] for c in report.cases}
    assert {"crash:model.recorded", "crash:effect.intended", "crash:effect.called"} <= crashed
    assert "ack:effect.called" in crashed
    assert all(c.outcome == "succeeded" for c in report.cases)
    assert {f"crash:{b}" for b in chosen} <= {c.plan.split(" > ")[0] for c in report.cases}
