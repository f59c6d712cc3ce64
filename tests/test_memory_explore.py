"""Compaction survives a SIGKILL at every fault point inside it (the crash-point explorer,
issue 5): the long agent with a model summarizer, crashed at each boundary from the last
checkpoint before its first compaction to the checkpoint after it (the summarizer's recorded
call, the ``compact`` step, ``memory.compacted``, the checkpoint), resumed to its end: the
same outcome and result, no step run again after its completion was recorded, a history that
folds, and every model turn and the summary paid for once."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

import torpor
from torpor.testing import Target, explore

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the examples package lives at the repository root
    sys.path.insert(0, str(ROOT))

from examples.long_agent.script import make_script, write_world  # noqa: E402

#: Real processes killed and resumed: the full suite runs these; the fast tier skips them.
pytestmark = pytest.mark.slow

MODULE = """
from torpor.agents.models import Message, ScriptedModel
from torpor.memory import ModelSummarizer
from examples.long_agent.agent import make_agent

writer = ScriptedModel(
    [lambda msgs, tools: Message(role="assistant", content="- notes read so far\\n- no errors")]
    * 1000,
    model_id="summarizer",
)
agent = make_agent("explore.memory", budget_tokens=2500, summarizer=ModelSummarizer(writer))
"""


def _compaction_window(boundaries: list[str]) -> list[str]:
    first = boundaries.index("memory.compacted@1")
    start = max(i for i in range(first) if boundaries[i].startswith("checkpoint.saved@"))
    end = min(
        i for i in range(first, len(boundaries)) if boundaries[i].startswith("checkpoint.saved@")
    )
    return boundaries[start + 1 : end + 1]


def test_sigkill_at_every_point_inside_compaction_resumes(tmp_path: Path) -> None:
    (tmp_path / "memflow.py").write_text(textwrap.dedent(MODULE))
    notes = tmp_path / "notes-world"
    write_world(notes, make_script(12))
    target = Target(
        module="memflow",
        workflow="explore.memory",
        input={"turns": 12, "seed": 7},
        paths=[str(tmp_path), str(ROOT)],
        env={"LONG_AGENT_WORLD": str(notes)},
    )
    chosen: list[str] = []

    def select(boundaries: list[str]) -> list[str]:
        chosen.extend(_compaction_window(boundaries))
        return chosen

    report = explore(
        target, seed=17, kinds=["crash"], select=select, workdir=tmp_path / "worlds", jobs=2
    )
    print(report.summary())
    assert report.ok, report.summary()
    names = {b.split("@")[0] for b in chosen}
    assert {"model.recorded", "memory.compacted", "checkpoint.saved", "append.after"} <= names
    crashed = {c.plan.split(" > ")[0] for c in report.cases}
    assert {f"crash:{b}" for b in chosen} <= crashed  # every point inside, not a sample


LEDGER_MODULE = """
from examples.long_agent.agent import make_agent

agent = make_agent("explore.ledger", budget_tokens=2500)
"""


def test_sigkill_at_every_point_inside_compaction_with_the_ledger(tmp_path: Path) -> None:
    """The default (extractive) compaction writes fact-ledger records in its transaction
    (issue 30): a SIGKILL at every point inside it leaves no violation, and the explorer's own
    check finds the ledger rows exactly the records of the history's compactions, none twice."""
    (tmp_path / "ledgerflow.py").write_text(textwrap.dedent(LEDGER_MODULE))
    notes = tmp_path / "notes-world"
    write_world(notes, make_script(12))
    target = Target(
        module="ledgerflow",
        workflow="explore.ledger",
        input={"turns": 12, "seed": 7},
        paths=[str(tmp_path), str(ROOT)],
        env={"LONG_AGENT_WORLD": str(notes)},
    )
    chosen: list[str] = []

    def select(boundaries: list[str]) -> list[str]:
        chosen.extend(_compaction_window(boundaries))
        return chosen

    report = explore(
        target, seed=23, kinds=["crash"], select=select, workdir=tmp_path / "worlds", jobs=2,
        keep=True,
    )  # fmt: skip
    print(report.summary())
    assert report.ok, report.summary()
    names = {b.split("@")[0] for b in chosen}
    assert {"memory.compacted", "checkpoint.saved", "append.after"} <= names
    crashed = {c.plan.split(" > ")[0] for c in report.cases}
    assert {f"crash:{b}" for b in chosen} <= crashed
    # The crash-free run wrote records (so the check above had something to compare).
    with torpor.Client(f"sqlite:///{tmp_path / 'worlds' / 'baseline' / 'torpor.db'}") as c:
        assert c.ledger(target.run_id)
