"""A Pydantic AI agent with two tools — a read (a price list) and an effect (a charge written to
a local ledger) — made durable with TorporAgent; offline with Pydantic AI's FunctionModel.
Imported by tests/test_pydantic_ai*.py and by the explorer's subprocesses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic_ai import Agent, CallDeferred, DeferredToolRequests, ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import torpor
from torpor.integrations.pydantic_ai import TorporAgent, idempotency_key
from torpor.testing import FileLedger

PRICES = {"tea": 3, "coffee": 4}


def shopkeeper(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The scripted model: look the price up, charge it, then say what was done. Each request
    it answers is counted in the world's ledger (``model:<n>``): paid once, or not."""
    FileLedger.here().record(f"model:{len(messages)}", messages=len(messages))
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    done = {p.tool_name: p.content for p in returns if p.outcome != "retried"}
    if "lookup_price" not in done:
        return ModelResponse(parts=[ToolCallPart("lookup_price", {"item": "tea"}, "c-price")])
    if "charge" not in done:
        amount = done["lookup_price"]
        return ModelResponse(
            parts=[ToolCallPart("charge", {"item": "tea", "amount": amount}, "c-charge")]
        )
    return ModelResponse(parts=[TextPart(f"charged: {done['charge']}")])


def careless(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The shopkeeper, asking first for an item the price list does not spell that way (the
    tool answers with Pydantic AI's ModelRetry, and the model asks again — under the same tool
    call id, as Pydantic AI's TestModel does for every call of a tool)."""
    parts = [p for m in messages for p in m.parts]
    if not any(isinstance(p, ToolReturnPart) and p.outcome == "retried" for p in parts):
        FileLedger.here().record(f"model:{len(messages)}", messages=len(messages))
        return ModelResponse(parts=[ToolCallPart("lookup_price", {"item": "Tea"}, "c-price")])
    return shopkeeper(messages, info)


def make_agent(approval: bool = False, retry: bool = False) -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(
        FunctionModel(careless if retry else shopkeeper),
        output_type=[str, DeferredToolRequests],
        name="teashop",
    )

    @agent.tool_plain
    def lookup_price(item: str) -> int:
        """The price of an item (read: safe to ask again)."""
        if item not in PRICES:
            raise ModelRetry(f"no item {item!r}; the items are {sorted(PRICES)}")
        return PRICES[item]

    @agent.tool_plain(requires_approval=approval)
    def charge(item: str, amount: int) -> str:
        """Charge the customer (an effect, keyed)."""
        key = idempotency_key()
        FileLedger.here().record(key, item=item, amount=amount)
        return f"{item} for {amount} ({key.rsplit('/', 1)[-1]})"

    return agent


def find_charge(call: torpor.EffectCall) -> torpor.Applied | torpor.Absent:
    """Reconcile: ask the ledger by the idempotency key."""
    ledger = FileLedger.here()
    if not ledger.has(call.idempotency_key):
        return torpor.Absent()
    return torpor.Applied(f"tea for 3 ({call.step_id})")


shop = TorporAgent(make_agent(), reads=["lookup_price"], effects={"charge": find_charge})
flow = shop.workflow

#: The same agent with the charge needing a person's approval (Pydantic AI's requires_approval).
guarded = TorporAgent(
    make_agent(approval=True),
    name="shop-guarded",
    reads=["lookup_price"],
    effects={"charge": find_charge},
)


def effect_ledger(world: Any, run_id: str) -> dict[str, int]:
    """The explorer's ledger adapter: the charges only (the model's requests, counted in the
    same file as ``model:<n>``, are checked by the test itself: a read may be paid again when
    the kill fell between the response and its record)."""
    counts = FileLedger(Path(world) / FileLedger.NAME).counts()
    MODEL_PAID[Path(world).name] = {k: n for k, n in counts.items() if k.startswith("model:")}
    return {k: n for k, n in counts.items() if not k.startswith("model:")}


#: World name (``baseline``, ``case0003``) -> times each model request was paid for, noted by
#: :func:`effect_ledger` when the explorer checks the world (in the test's process).
MODEL_PAID: dict[str, dict[str, int]] = {}

#: The guarded agent whose model first asks for an item that is not on the list (ModelRetry).
retrying = TorporAgent(
    make_agent(approval=True, retry=True),
    name="shop-retrying",
    reads=["lookup_price"],
    effects={"charge": find_charge},
)

#: The same agent with no reconcile for the charge: a kill during it leaves the run unresolved.
bare = TorporAgent(make_agent(), name="shop-bare", reads=["lookup_price"])


def make_external_agent() -> Agent[None, Any]:
    """The charge done outside the agent (Pydantic AI's ``CallDeferred``): a person or another
    system answers it later."""
    agent: Agent[None, Any] = Agent(
        FunctionModel(shopkeeper), output_type=[str, DeferredToolRequests], name="shop-external"
    )

    @agent.tool_plain
    def lookup_price(item: str) -> int:
        return PRICES[item]

    @agent.tool_plain
    def charge(item: str, amount: int) -> str:
        raise CallDeferred(metadata={"item": item, "amount": amount})

    return agent


external = TorporAgent(make_external_agent(), reads=["lookup_price"], effects={"charge": None})
