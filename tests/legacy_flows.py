"""Workflows of the committed legacy fixture databases (``tests/fixtures/legacy/``).

The fixtures were recorded by ``scripts/make_legacy_fixture.py`` with torpor's ``main`` of
2026-12-01 (store schema v1, event schema v2), before the engine layout, the effect index and
the typed value encoding changed. ``tests/test_legacy_fixture.py`` migrates copies of them and
resumes every run to its end with today's code: these definitions must keep their names,
versions and step ids, or the old histories no longer match the code that resumes them.

The outside world is a JSON-lines ledger in ``$TORPOR_HOME/ledger.jsonl``.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import torpor


def _ledger() -> Path:
    return Path(os.environ.get("TORPOR_HOME", ".torpor")) / "ledger.jsonl"


def ledger_entries() -> list[dict[str, Any]]:
    path = _ledger()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def send(what: str, idempotency_key: str) -> dict[str, Any]:
    """An effect: writes to the ledger with its key (fsynced)."""
    path = _ledger()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps({"key": idempotency_key, "what": what}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return {"sent": what}


def find_sent(call: torpor.EffectCall) -> Any:
    hits = [e for e in ledger_entries() if e["key"] == call.idempotency_key]
    return torpor.Applied({"sent": hits[-1]["what"]}) if hits else torpor.Absent()


def cannot_tell(call: torpor.EffectCall) -> Any:
    return torpor.Unknown("the legacy service keeps no record")


def flaky(what: str) -> dict[str, Any]:
    raise ConnectionError(f"{what}: service down")


@torpor.workflow("legacy.done", criteria=["sent"])
def done(run: torpor.Run, n: int) -> dict[str, Any]:
    rows = run.step("fetch", lambda: [{"i": i, "v": i * i} for i in range(n)])
    total = run.compute("sum", lambda rs: sum(r["v"] for r in rs), rows)
    ref = run.artifact("report.txt", f"total={total}", media_type="text/plain")
    run.effect("send", send, f"total {total}", reconcile=find_sent)
    run.verify("sent", True)
    return {"total": total, "report": ref.sha256}


@torpor.workflow("legacy.signal")
def wait_signal(run: torpor.Run, who: str) -> dict[str, Any]:
    run.step("prepare", lambda: {"who": who})
    answer = run.wait_for("go", timeout=timedelta(days=3650))
    out = run.effect("announce", send, f"{who}: {answer}", reconcile=find_sent)
    return {"answer": answer, "out": out}


@torpor.workflow("legacy.sleep")
def sleepy(run: torpor.Run, seconds: float) -> str:
    run.step("before", lambda: "before")
    run.sleep(timedelta(seconds=seconds))
    run.effect("after", send, "woke", reconcile=find_sent)
    return "woke"


@torpor.workflow("legacy.approval")
def approval(run: torpor.Run, text: str) -> str:
    ref = run.artifact("draft.txt", text, media_type="text/plain")
    ok = run.approval("publish", [ref], summary="publish the draft")
    run.effect("publish", send, text, reconcile=find_sent, approval=ok, artifacts=[ref])
    return "published"


@torpor.workflow("legacy.crashed")
def crashed(run: torpor.Run, n: int) -> int:
    run.step("one", lambda: 1)
    run.effect("charge", send, f"charge {n}", reconcile=find_sent)
    run.step("two", lambda: 2)
    return n


@torpor.workflow("legacy.unresolved")
def unresolved(run: torpor.Run, x: int) -> str:
    run.step("a", lambda: x)
    run.effect("pay", flaky, "pay", reconcile=cannot_tell)
    return "paid"


@torpor.workflow("legacy.failed")
def failed(run: torpor.Run, x: int) -> None:
    run.step("ok", lambda: x)
    run.step("boom", lambda: 1 / 0)


@torpor.workflow("legacy.loop")
def loop(run: torpor.Run, n: int) -> int:
    acc = run.restore({"i": 0, "sum": 0})
    while acc["i"] < n:
        v = run.compute("item", lambda i: i * 10, acc["i"])
        run.effect("emit", send, f"item {acc['i']}", reconcile=find_sent)
        acc = {"i": acc["i"] + 1, "sum": acc["sum"] + v}
        run.checkpoint(acc)
    return int(acc["sum"])
