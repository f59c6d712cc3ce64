"""A ReAct agent run recorded before issue 17 (event schema 3, the whole transcript in every
prompt; no agent checkpoint), killed after its third model call, resumes under today's code:
its recorded prompts are rebuilt as they were (the old transcript form, kept for such runs), no
model call is made again, and the run finishes."""

from __future__ import annotations

import shutil
from pathlib import Path

import legacy_agent_flow as flow
import torpor

FIXTURE = Path(__file__).parent / "fixtures" / "legacy" / "agent-v3.sqlite"


def test_a_react_run_recorded_before_working_memory_resumes(tmp_path: Path) -> None:
    shutil.copy(FIXTURE, tmp_path / "agent.db")
    url = f"sqlite:///{tmp_path}/agent.db"
    with torpor.Client(url) as c:
        before = [e.payload for e in c.events("react") if e.type == "model_called"]
        assert len(before) == 3 and c.state("react").user_checkpoint_seq == 0
    flow.model.calls.clear()
    with torpor.Runtime(url) as rt:
        res = rt.resume("react")
    assert res.outcome == "succeeded", res
    assert len(flow.model.calls) == 1  # only the fourth turn: three calls replayed, not made
    with torpor.Client(url) as c:
        called = [e.payload for e in c.events("react") if e.type == "model_called"]
        assert len(called) == 4
        assert c.state("react").result["final"] == "alpha 35, beta 28, gamma 35, delta 35"
    # The fourth prompt is the old transcript: every turn, each result after its call.
    last = flow.model.calls[0]
    assert [m.role for m in last] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
    ]
