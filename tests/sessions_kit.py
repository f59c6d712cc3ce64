"""A session agent for the session tests (tests/test_sessions*.py) and bench/sessions.py: an
offline model that answers the latest user message, logging what it saw."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from typing import Any

import torpor
from torpor.memory import Memory
from torpor.messages import Message, ModelResponse, TokenUsage
from torpor.sessions import SessionAgent

SAID = re.compile(r"(?:user|ann): (.*)")


class Listener:
    """Replies ``ok: <the latest user message>``; with ``log`` (a path) appends one JSON line
    per call (the message answered, whether the context held ``watch``, the time); a message
    containing ``BLOCK`` makes the call wait until the file ``<log>.go`` exists."""

    model_id = "listener"

    def __init__(self, log: str | None = None, watch: str = ""):
        self.log = log
        self.watch = watch
        self.seen: list[str] = []

    def complete(self, messages: Sequence[Message], tools: Sequence[Any] = ()) -> ModelResponse:
        text = "\n".join(m.content for m in messages)
        said = SAID.findall(text)
        last = said[-1] if said else "?"
        self.seen.append(text)
        if self.log:
            with open(self.log, "a") as f:
                row = {"said": last, "watch": bool(self.watch) and self.watch in text}
                f.write(json.dumps({**row, "pid": os.getpid(), "t": time.time()}) + "\n")
                f.flush()
                os.fsync(f.fileno())
            if "BLOCK" in last:
                open(self.log + ".in-call", "w").close()
                deadline = time.time() + 300
                while not os.path.exists(self.log + ".go") and time.time() < deadline:
                    time.sleep(0.01)
        return ModelResponse(
            message=Message(role="assistant", content=f"ok: {last}"),
            usage=TokenUsage(input_tokens=10, output_tokens=5),
            model=self.model_id,
        )


def session_agent(
    name: str, model: Any, segment_turns: int, budget_tokens: int = 16_000
) -> SessionAgent:
    agent = torpor.Agent(
        name,
        goal="talk with the user",
        tools=torpor.Tools(),
        planner=torpor.ReActPlanner(model),
        memory=Memory(budget_tokens=budget_tokens),
    )
    return SessionAgent(agent, segment_turns=segment_turns)


def drive(rt: torpor.Runtime, sessions: Any, name: str) -> None:
    """Execute the session's current segment until it waits (following it when it continues
    as new), in this process."""
    while True:
        cur = sessions.get(name).run_id
        rt.resume(cur)
        if sessions.get(name).run_id == cur:
            return
