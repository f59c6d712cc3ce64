"""The same agent made durable: its run is a torpor run, killed anywhere and resumed."""

import json
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel  # offline; e.g. "openai:gpt-4o" for a real one

import torpor
from torpor.integrations.pydantic_ai import TorporAgent, idempotency_key

PAYMENTS = Path("payments.jsonl")  # stands for a payments service that keeps each call's key
agent = Agent(TestModel(), name="shop", instructions="Buy what the customer asks for.")


@agent.tool_plain
def lookup_price(item: str) -> int:
    return {"tea": 3, "coffee": 4}.get(item, 5)


@agent.tool_plain
def charge(item: str, amount: int) -> str:
    with PAYMENTS.open("a") as f:
        f.write(json.dumps({"key": idempotency_key(), "item": item, "amount": amount}) + "\n")
    return f"charged {amount} for {item}"


def find_charge(call: torpor.EffectCall) -> torpor.Applied | torpor.Absent:
    """After a crash during a charge: ask the service by the call's key, never charge blindly."""
    lines = PAYMENTS.read_text().splitlines() if PAYMENTS.exists() else []
    for row in map(json.loads, lines):
        if row.get("key") == call.idempotency_key:
            return torpor.Applied(f"charged {row['amount']} for {row['item']}")
    return torpor.Absent()


shop = TorporAgent(agent, reads=["lookup_price"], effects={"charge": find_charge})

if __name__ == "__main__":
    result = torpor.Runtime().run(shop.workflow, "buy tea")
    print(result.outcome, result.result)
