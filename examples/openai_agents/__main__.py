"""The desk twice: by the plain SDK, then durably (``uv run python -m examples.openai_agents``)."""

import asyncio
import tempfile

from agents import RunConfig
from agents import Runner as PlainRunner

import torpor

from . import desk, make_desk

REQUEST = "Please refund my order A-42."

with tempfile.TemporaryDirectory() as tmp:
    plain = asyncio.run(
        PlainRunner.run(
            make_desk(tmp + "/plain"), REQUEST, run_config=RunConfig(tracing_disabled=True)
        )
    )
    print("plain:  ", plain.final_output)
    with torpor.Runtime(f"sqlite:///{tmp}/torpor.db") as rt:
        res = rt.run(desk, {"request": REQUEST, "world": tmp + "/durable"}, run_id="desk-1")
        print("durable:", res.outcome, res.result)
