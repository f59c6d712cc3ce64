"""A model-driven agent killed with SIGKILL and resumed in a new process.

The agent (a ReAct planner over the OpenAI adapter) talks to a loopback Chat Completions
server in this test process, which counts every request per conversation turn; its tools write
to an external ledger (fsynced JSON lines). The process kills itself at a named boundary
(a wrapper of ``torpor.faults.point``):

- ``model.recorded@2`` — the model's answer asking for ``send A`` was recorded, the tool never ran;
- ``effect.called@1`` — ``send A`` happened in the world but its result was never recorded;
- ``agent.tool.settled@2`` — ``send A`` finished and was recorded, the model never saw it.

On resume no model call is repeated (each turn reached the server exactly once), no effect is
duplicated (one ``send A``, one ``send B`` in the ledger), and the plan continues to success.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agent_kit import loopback, openai_reply, turn_of
from conftest import run_python

#: Real processes killed and resumed: the full suite runs these; the fast tier skips them.
pytestmark = pytest.mark.slow

MODULE = '''
import json, os

import torpor
from torpor.agents.models import OpenAIChatModel

LEDGER = os.environ["AGENT_LEDGER"]


def ledger(kind, **fields):
    with open(LEDGER, "a") as f:
        f.write(json.dumps({"kind": kind, "pid": os.getpid(), **fields}) + "\\n")
        f.flush()
        os.fsync(f.fileno())


def entries(kind, **match):
    if not os.path.exists(LEDGER):
        return []
    with open(LEDGER) as f:
        rows = [json.loads(x) for x in f if x.strip()]
    return [r for r in rows if r["kind"] == kind and all(r.get(k) == v for k, v in match.items())]


tools = torpor.Tools()


@tools.tool
def lookup(word: str) -> dict:
    """Look a word up."""
    ledger("lookup", word=word)
    return {"word": word, "letters": len(word)}


def find_sent(call):
    hits = entries("send", key=call.idempotency_key)
    return torpor.Applied({"sent": hits[-1]["item"]}) if hits else torpor.Absent()


@tools.tool(policy="effect", reconcile=find_sent, retry=None)
def send(item: str, idempotency_key: str) -> dict:
    """Send an item to the outside world."""
    ledger("send", key=idempotency_key, item=item)
    return {"sent": item}


model = OpenAIChatModel(
    "loop-1", base_url=os.environ["TORPOR_MODEL_BASE_URL"], api_key="k", max_retries=0
)
agent = torpor.Agent(
    "kill.agent",
    goal="look the word up, then send A and B",
    tools=tools,
    planner=torpor.ReActPlanner(model),
    criteria={
        "sent both": lambda ctx: sorted(
            r["sent"] for r in ctx.results().values() if isinstance(r, dict) and "sent" in r
        ) == ["A", "B"]
    },
)
'''

DRIVER = """
import dataclasses, json, os, signal, torpor, agentmod
import torpor.faults as F

# SIGKILL at the n-th time a named boundary is reached (the agent's own boundaries are not in
# torpor.faults.POINTS, so TORPOR_CRASH_AT cannot name them: wrap faults.point instead).
_target, _, _nth = os.environ.get("AGENT_CRASH_AT", "").partition("@")
_seen = [0]
_point = F.point


def point(name, *args, **kwargs):
    if name == _target:
        _seen[0] += 1
        if _seen[0] == int(_nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)
    return _point(name, *args, **kwargs)


F.point = point
rt = torpor.Runtime({db!r})
for rid in {resume!r}:
    res = rt.resume(rid)
    print("RESULT " + json.dumps(dataclasses.asdict(res)), flush=True)
if {start!r}:
    rt.run(agentmod.agent, {{"case": {start!r}}}, run_id={start!r})
"""

CRASH_POINTS = ["model.recorded@2", "effect.called@1", "agent.tool.settled@2"]

SCRIPT = [
    [("c0", "lookup", {"word": "torpor"})],
    [("c1", "send", {"item": "A"})],
    [("c2", "send", {"item": "B"})],
    "I looked torpor up and sent A and B.",
]


def test_killed_agent_resumes_without_repeating_model_calls_or_effects(
    tmp_path: Path, db_url: str
) -> None:
    (tmp_path / "agentmod.py").write_text(MODULE)
    calls: Counter[tuple[str, int]] = Counter()

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        case = json.loads(user.split("Input (JSON): ", 1)[1])["case"]
        turn = turn_of(body)
        calls[(case, turn)] += 1
        reply = SCRIPT[turn]
        return openai_reply(reply) if isinstance(reply, str) else openai_reply(None, reply)

    rids = {point: "kill-" + point.split("@")[0].replace(".", "-") for point in CRASH_POINTS}
    ledger = tmp_path / "ledger.jsonl"
    with loopback("openai", responder) as api:
        env = {"TORPOR_MODEL_BASE_URL": api.url, "AGENT_LEDGER": str(ledger)}
        for point, rid in rids.items():
            first = run_python(
                DRIVER.format(db=db_url, start=rid, resume=[]),
                cwd=tmp_path,
                env={**env, "AGENT_CRASH_AT": point},
            )
            assert first.returncode == -signal.SIGKILL, (point, first.stdout + first.stderr)
        turns_before = dict(calls)
        # One new process resumes every killed run.
        second = run_python(
            DRIVER.format(db=db_url, start=None, resume=list(rids.values())), cwd=tmp_path, env=env
        )
    assert second.returncode == 0, second.stdout + second.stderr
    results = [
        json.loads(x.split(" ", 1)[1])
        for x in second.stdout.splitlines()
        if x.startswith("RESULT ")
    ]
    outcomes = {r["run_id"]: r for r in results}
    rows = [json.loads(x) for x in ledger.read_text().splitlines()]
    assert [r["word"] for r in rows if r["kind"] == "lookup"] == ["torpor"] * 3  # once per run
    for point, rid in rids.items():
        check_run(point, rid, outcomes[rid], calls, turns_before, rows, db_url)


def check_run(
    point: str,
    rid: str,
    result: dict[str, Any],
    calls: Counter[tuple[str, int]],
    turns_before: dict[tuple[str, int], int],
    rows: list[dict[str, Any]],
    db_url: str,
) -> None:
    assert result["outcome"] == "succeeded", (point, result)
    # Every turn reached the model exactly once: nothing paid twice after the kill.
    mine = {k: v for k, v in calls.items() if k[0] == rid}
    assert mine == {(rid, t): 1 for t in range(len(SCRIPT))}, (point, turns_before, mine)
    sends = [r["item"] for r in rows if r["kind"] == "send" and r["key"].startswith(rid + "/")]
    assert sorted(sends) == ["A", "B"], (point, sends)  # no effect duplicated
    crash_at = point

    import torpor

    client = torpor.Client(db_url)
    try:
        st = client.state(rid)
        assert st.usage.model_calls == len(SCRIPT)
        assert {k: v.status for k, v in st.plan.items()} == {
            "c0": "succeeded",
            "c1": "succeeded",
            "c2": "succeeded",
        }
        settled = [e.payload.call_id for e in client.events(rid) if e.type == "tool_call_settled"]
        assert settled == ["c0", "c1", "c2"]  # one recorded outcome per call, none dangling
        if crash_at.startswith("effect.called"):
            recon = [e.payload for e in client.events(rid) if e.type == "effect_reconciled"]
            assert [(r.verdict.value, r.result) for r in recon] == [("applied", {"sent": "A"})]
    finally:
        client.close()
