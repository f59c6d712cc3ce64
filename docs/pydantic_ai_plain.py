"""A Pydantic AI agent, written plainly: two tools, one that reads and one that charges."""

import json
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel  # offline; e.g. "openai:gpt-4o" for a real one

PAYMENTS = Path("payments.jsonl")  # stands for a payments service
agent = Agent(TestModel(), name="shop", instructions="Buy what the customer asks for.")


@agent.tool_plain
def lookup_price(item: str) -> int:
    return {"tea": 3, "coffee": 4}.get(item, 5)


@agent.tool_plain
def charge(item: str, amount: int) -> str:
    with PAYMENTS.open("a") as f:
        f.write(json.dumps({"item": item, "amount": amount}) + "\n")
    return f"charged {amount} for {item}"


if __name__ == "__main__":
    print(agent.run_sync("buy tea").output)
