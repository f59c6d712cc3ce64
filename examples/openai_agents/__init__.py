"""An OpenAI Agents SDK support desk made durable by torpor (docs/openai-agents.md).

A triage agent hands off to a billing agent, which reads an order (a ``read`` tool) and refunds
it (an ``effect`` tool against a local ledger, reconciled by its idempotency key). The model is
offline: :class:`DeskModel` answers through the SDK's ``Model`` interface from the conversation
it is given, so a replayed run and a fresh one see the same answers.

    uv run python -m examples.openai_agents            # plain SDK, then durable, same output
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrail,
    Model,
    ModelResponse,
    OutputGuardrail,
    RunConfig,
    Usage,
    function_tool,
)
from agents.testing import assistant_message, function_call

import torpor
from torpor.integrations.openai_agents import Runner, effect_tool, idempotency_key, read_tool
from torpor.testing import FileLedger, Target

ORDERS = {"A-42": {"order": "A-42", "amount": "19.90", "status": "delivered"}}


class DeskModel(Model):
    """A fake model provider: the next move of each agent, decided from what the conversation
    already holds (so it is a function of its input, as a replayed call must be). Every call
    that reaches it is written to ``<world>/model-calls.jsonl`` (what a provider would bill)."""

    def __init__(self, world: str | Path) -> None:
        self.bill = FileLedger(Path(world) / "model-calls.jsonl")

    async def get_response(self, system_instructions: Any, input: Any, *a: Any, **k: Any) -> Any:
        items = [] if isinstance(input, str) else list(input)
        outputs = {
            _get(i, "call_id"): _get(i, "output")
            for i in items
            if _get(i, "type") == "function_call_output"
        }
        who = "triage" if "triage" in (system_instructions or "") else "billing"
        self.bill.record(f"{who}:{len(items)}")
        if who == "triage":
            out = function_call("transfer_to_billing", {}, call_id="h1")
        elif "c1" not in outputs:
            out = function_call("lookup_order", {"order": "A-42"}, call_id="c1")
        elif "c2" not in outputs:
            amount = json.loads(outputs["c1"])["amount"]
            out = function_call("refund", {"order": "A-42", "amount": amount}, call_id="c2")
        else:
            out = assistant_message(f"Refunded order A-42: {outputs['c2']}")
        return ModelResponse(
            output=[out],
            usage=Usage(requests=1, input_tokens=10 * len(items) + 5, output_tokens=7),
            response_id=None,
        )

    def stream_response(self, *a: Any, **k: Any) -> Any:
        raise NotImplementedError


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


def make_desk(world: str | Path, *, approval: bool = False, reconcile: bool = True) -> Agent[Any]:
    """The triage agent (with its handoff to billing, two tools and two guardrails).
    ``approval``: the refund asks a person first (the SDK's ``needs_approval``); ``reconcile``
    False: the refund has no reconcile (a crash during it leaves the run ``unresolved``)."""
    ledger = FileLedger(Path(world) / "ledger.jsonl")
    model = DeskModel(world)

    @function_tool
    def lookup_order(order: str) -> str:
        """Read an order."""
        return json.dumps(ORDERS[order])

    @function_tool(needs_approval=approval)
    def refund(order: str, amount: str) -> str:
        """Refund an order (changes the outside world)."""
        key = idempotency_key(default=f"plain/{order}")  # (the plain SDK has none)
        ledger.record(key, order=order, amount=amount)
        return f"refund {amount} for {order}"

    def find_refund(call: torpor.EffectCall) -> torpor.Applied | torpor.Absent:
        for e in ledger.entries():
            if e["key"] == call.idempotency_key:
                return torpor.Applied(f"refund {e['amount']} for {e['order']}")
        return torpor.Absent()

    def not_empty(ctx: Any, agent: Any, text: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(
            output_info={"chars": len(str(text))}, tripwire_triggered=not str(text).strip()
        )

    def names_order(ctx: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered="A-42" not in output)

    billing = Agent(
        name="billing",
        instructions="You handle refunds.",
        model=model,
        tools=[
            read_tool(lookup_order),
            effect_tool(refund, reconcile=find_refund if reconcile else None),
        ],
        output_guardrails=[OutputGuardrail(guardrail_function=names_order, name="names_order")],
    )
    return Agent(
        name="triage",
        instructions="You triage support requests.",
        model=model,
        handoffs=[billing],
        input_guardrails=[InputGuardrail(guardrail_function=not_empty, name="not_empty")],
    )


@torpor.workflow(name="openai_agents.desk", version="1")
async def desk(run: torpor.Run, inp: dict[str, Any]) -> str:
    """The desk as a torpor workflow: ``{"request": str, "world": dir, "approval": bool,
    "reconcile": bool}``."""
    agent = make_desk(
        inp["world"], approval=inp.get("approval", False), reconcile=inp.get("reconcile", True)
    )
    quiet = RunConfig(tracing_disabled=True)  # (offline: no trace export)
    result = await Runner.run(agent, inp["request"], run=run, run_config=quiet)
    return str(result.final_output)


def explore_target(root: str | Path) -> Target:
    """The desk for the crash-point explorer (``root``: the repository, holding ``examples``):
    each case's world holds its ledger and model bill; the explorer counts the ledger."""
    return Target(
        module="examples.openai_agents",
        workflow="openai_agents.desk",
        input={"request": "Please refund my order A-42.", "world": "{world}"},
        paths=[str(root)],
        ledger="torpor.testing:world_ledger",
    )
