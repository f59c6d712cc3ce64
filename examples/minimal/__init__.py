"""The smallest workflow that uses every kind of durable primitive: a step, an artifact, an
approval bound to it, a durable sleep, and an effect with a reconcile.

    uv run python -m examples.minimal --auto-approve        # all in this process
    uv run torpor start minimal.greet --import examples.minimal --input '"world"'

The effect "sends" the greeting by writing a file named after its idempotency key into an
outbox folder (``$TORPOR_HOME/minimal-outbox``); its reconcile looks for that file, so a run
killed between the intent and the observation never sends twice.
"""

from __future__ import annotations

import hashlib
import os
from datetime import timedelta
from pathlib import Path

import torpor


def outbox() -> Path:
    """Where greetings are "sent" (the outside world of this example)."""
    return Path(os.environ.get("TORPOR_HOME", ".torpor")) / "minimal-outbox"


def _letter(idempotency_key: str) -> Path:
    return outbox() / (hashlib.sha256(idempotency_key.encode()).hexdigest()[:16] + ".txt")


# --8<-- [start:find_sent]
def find_sent(call: torpor.EffectCall) -> torpor.Applied | torpor.Absent:
    """Reconcile: ask the outside world whether the greeting with this key arrived."""
    letter = _letter(call.idempotency_key)
    return torpor.Applied(str(letter)) if letter.exists() else torpor.Absent()


@torpor.effect(reconcile=find_sent, operation="outbox.send")
def send(text: str, idempotency_key: str) -> str:
    """The effect: write the greeting into the outbox, named by its idempotency key."""
    letter = _letter(idempotency_key)
    letter.parent.mkdir(parents=True, exist_ok=True)
    letter.write_text(text + "\n")
    return str(letter)


# --8<-- [end:find_sent]


@torpor.workflow(name="minimal.greet", version="1", criteria=["greeting sent"])
def greet(run: torpor.Run, name: str) -> str:
    text = run.step("compose", lambda: f"Hello, {name}!")  # read: recorded once
    ref = run.artifact("greeting.txt", text, media_type="text/plain")  # sha256-addressed
    approval = run.approval("send", [ref])  # waits, durably, for a person
    run.sleep(timedelta(seconds=1))  # a durable timer: holds no process
    letter = run.effect("send", send, text, approval=approval, artifacts=[ref])
    run.verify("greeting sent", lambda: Path(letter).read_text() == text + "\n")
    return letter
