"""Workflows the console tests steer (imported by the tests, which execute them in-process; the
console itself only reads the store)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torpor
from torpor import Unknown
from torpor.errors import ApprovalDeniedError


def push(diff: str, idempotency_key: str) -> dict[str, Any]:
    return {"ok": True, "key": idempotency_key}


@torpor.workflow("console.ship", criteria=["shipped"])
def ship(run: torpor.Run, inp: dict[str, Any]) -> dict[str, Any]:
    """A patch artifact, an approval bound to it, then the effect it authorizes."""
    patch = run.artifact(inp.get("name", "patch"), inp["diff"], media_type="text/x-diff")
    ok = run.approval("ship", [patch], summary=inp.get("summary", "ship the patch"))
    res = run.effect("push", push, inp["diff"], approval=ok, artifacts=[patch])
    run.verify("shipped", res["ok"])
    return res


@torpor.workflow("console.revise")
def revise(run: torpor.Run, inp: dict[str, Any]) -> str:
    """Asks to approve a document; when nobody decided by the first deadline, revises it and
    asks again: the content under review changes while a page shows the old one."""
    for n in range(3):
        doc = run.artifact("doc", f"{inp['text']} (revision {n})", media_type="text/plain")
        timeout = timedelta(seconds=inp["first_timeout_s"] if n == 0 else 3600)
        try:
            run.approval("publish", [doc], summary=f"publish revision {n}", timeout=timeout)
        except ApprovalDeniedError:
            continue
        return f"published revision {n}"
    return "gave up"


@torpor.workflow("console.gate")
def gate(run: torpor.Run, inp: object) -> Any:
    return run.wait_for("go")


def send(to: str, idempotency_key: str) -> dict[str, Any]:
    raise TimeoutError("smtp server timed out after 30s")


def find_sent(call: torpor.EffectCall) -> Unknown:
    return Unknown("the smtp server keeps no record of " + call.idempotency_key)


@torpor.workflow("console.mail")
def mail(run: torpor.Run, inp: dict[str, Any]) -> Any:
    """An effect whose outcome nobody can tell: the run ends unresolved, for a person."""
    return run.effect("send", send, inp["to"], reconcile=find_sent)


@torpor.workflow("console.park")
def park(run: torpor.Run, inp: object) -> str:
    """Ends blocked until a person reopens it (then blocks again: the test looks at the
    record of who reopened it)."""
    run.step("look", lambda: "looked")
    run.block("waiting for more budget")
    return "unreachable"
