"""Completion criteria judged by a model, where a criterion says so (:class:`ModelJudge`);
criteria are checked by code first (DESIGN.md G5: a model saying "done" is not success)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .context import Context
from .models.base import Message, Model, ToolSpec
from .proposals import clip

# ------------------------------------------------------------------ verifiers


class ModelJudge:
    """A completion criterion judged by a model (use only where the criterion says so). The
    model must call ``verdict(passed, reason)``; its call is recorded like any other."""

    VERDICT = ToolSpec(
        name="verdict",
        description="Give your verdict on the criterion.",
        parameters={
            "type": "object",
            "properties": {"passed": {"type": "boolean"}, "reason": {"type": "string"}},
            "required": ["passed", "reason"],
        },
    )

    def __init__(self, model: Model, question: str):
        self.model = model
        self.question = question

    def judge(self, ctx: Context, name: str) -> tuple[bool, dict[str, Any]]:
        evidence = {
            "goal": ctx.agent.goal,
            "final": ctx.final,
            "results": {k: v for k, v in ctx.results().items()},
        }
        messages = [
            Message.system(
                "You check whether a completion criterion is met, from the evidence only. "
                "Answer by calling the verdict tool."
            ),
            Message.user(
                f"Criterion {name!r}: {self.question}\n\nEvidence (JSON):\n"
                + clip(json.dumps(evidence, sort_keys=True, default=str))
            ),
        ]
        resp = ctx.call_model(self.model, messages, [self.VERDICT], name=f"judge:{name}")
        call = next((c for c in resp.message.tool_calls if c.name == "verdict"), None)
        if call is None or not isinstance(call.arguments.get("passed"), bool):
            return False, {
                "judge": self.model.model_id,
                "error": "no verdict",
                "said": resp.message.content[:500],
            }
        return call.arguments["passed"], {
            "judge": self.model.model_id,
            "reason": str(call.arguments.get("reason", ""))[:2000],
        }


Verifier = Callable[[Context], Any] | ModelJudge
