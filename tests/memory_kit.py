"""Helpers of the working-memory tests: the long agent (examples/long_agent) run in this
process with hooks on every model call, or in a child process killed with SIGKILL at a fault
point."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from examples.long_agent import agent as long_agent
from examples.long_agent.script import make_script, write_world

from conftest import HANG_S, ROOT, run_python
from torpor.agents.models import Message

_n = 0


def fresh(name: str) -> str:
    """A workflow name unique in this process."""
    global _n
    _n += 1
    return f"test.memory.{name}.{_n}.{os.getpid()}"


def world(tmp_path: Path, turns: int, seed: int = 7) -> Path:
    root = tmp_path / "world"
    write_world(root, make_script(turns, seed))
    os.environ["LONG_AGENT_WORLD"] = str(root)
    return root


@contextmanager
def contexts() -> Iterator[dict[int, list[Message]]]:
    """The messages of every model call made in this process, by turn (the last call of a turn
    wins)."""
    seen: dict[int, list[Message]] = {}

    def hook(turn: int, messages: Sequence[Message]) -> None:
        seen[turn] = list(messages)

    long_agent.ON_CALL.append(hook)
    try:
        yield seen
    finally:
        long_agent.ON_CALL.remove(hook)


CHILD = """
import sys
import torpor
sys.path.insert(0, {root!r})
from examples.long_agent.agent import make_agent
agent = make_agent({name!r}, budget_tokens={budget}, model_id={model!r})
with torpor.Runtime({url!r}) as rt:
    rt.run(agent, {{"turns": {turns}, "seed": 7}}, run_id={rid!r}, scope={rid!r})
print("finished")
"""


def killed_child(
    tmp_path: Path,
    url: str,
    *,
    name: str,
    rid: str,
    turns: int,
    budget: int,
    crash_at: str,
    model: str = "scripted-a",
) -> None:
    """Run the long agent in a child process that SIGKILLs itself at ``crash_at``."""
    code = CHILD.format(
        root=str(ROOT), name=name, budget=budget, model=model, url=url, turns=turns, rid=rid
    )
    env = {"TORPOR_FAULTS": f"crash:{crash_at}", "LONG_AGENT_WORLD": os.environ["LONG_AGENT_WORLD"]}
    proc = run_python(code, cwd=tmp_path, env=env, timeout=HANG_S)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr[-2000:])


def payloads(client: Any, run_id: str, etype: str) -> list[Any]:
    return [e.payload for e in client.events(run_id) if e.type == etype]


def tool_pairs_whole(messages: Sequence[Message]) -> bool:
    """Every tool result follows the assistant message that made its call (or a sibling
    result), and every call has its result."""
    open_ids: set[str] = set()
    for m in messages:
        if m.role == "assistant":
            if open_ids:
                return False
            open_ids = {c.id for c in m.tool_calls}
        elif m.role == "tool":
            if m.tool_call_id not in open_ids:
                return False
            open_ids.discard(m.tool_call_id)
        elif open_ids:
            return False
    return not open_ids
