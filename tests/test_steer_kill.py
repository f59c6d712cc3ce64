"""Steering messages sent during a model call, then SIGKILL, then resume in a new process
(issue 39), on both backends: the agent sees them exactly once, in order, and the recorded
model call after them is not made again (its prompt, rebuilt on replay with the messages
read back from the record, matches the recorded one).

The agent runs in a real process; its scripted model's first call blocks until the test has
sent two messages (one with the real CLI, ``torpor steer``, in another process); the agent process
kills itself (SIGKILL) right after the next model call is recorded — after the boundary took
the messages. A new process resumes it to the end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import torpor
from conftest import HANG_S, ROOT

pytestmark = pytest.mark.slow

MODULE = r'''
import json, os, time

import torpor
from torpor.agents.models import ScriptedModel, say, use

DIR = os.environ["STEER_DIR"]


def log(kind, **fields):
    with open(os.path.join(DIR, "calls.jsonl"), "a") as f:
        f.write(json.dumps({"kind": kind, "pid": os.getpid(), **fields}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def seen(messages):
    text = "\n".join(m.content for m in messages)
    return [text.count("use the staging database"), text.count("keep it under 10 lines"),
            text.find("use the staging database") < text.find("keep it under 10 lines")]


def turn(n, reply, block=False):
    def respond(messages, tools):
        log("model", turn=n, seen=seen(messages))
        if block:  # a model call in flight while the operators steer
            open(os.path.join(DIR, "in-call"), "w").close()
            deadline = time.time() + 300
            while not os.path.exists(os.path.join(DIR, "go")) and time.time() < deadline:
                time.sleep(0.02)
        return reply
    return respond


tools = torpor.Tools()


@tools.tool
def lookup(word: str) -> dict:
    """Look a word up."""
    log("tool", word=word)
    return {"word": word}


model = ScriptedModel([
    turn(0, use(("lookup", {"word": "alpha"})), block=True),
    turn(1, use(("lookup", {"word": "beta"}))),
    turn(2, say("done")),
])
agent = torpor.Agent("steer.kill", goal="look words up", tools=tools,
                     planner=torpor.ReActPlanner(model))
'''

DRIVER = r"""
import dataclasses, json, os, signal, sys, torpor, steermod
import torpor.faults as F

_point = F.point
_seen = [0]


def point(name, *args, **kwargs):
    if name == "model.recorded" and os.environ.get("STEER_KILL"):
        _seen[0] += 1
        if _seen[0] == 2:  # the call after the boundary that took the messages
            os.kill(os.getpid(), signal.SIGKILL)
    return _point(name, *args, **kwargs)


F.point = point
rt = torpor.Runtime(sys.argv[1])
if sys.argv[2] == "start":
    rt.run(steermod.agent, {}, run_id="k1")
else:
    print("RESULT " + json.dumps(dataclasses.asdict(rt.resume("k1"))), flush=True)
"""


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["STEER_DIR"] = str(tmp)
    env.update(extra)
    return env


def _calls(tmp: Path, kind: str) -> list[dict[str, object]]:
    rows = [json.loads(x) for x in (tmp / "calls.jsonl").read_text().splitlines() if x]
    return [r for r in rows if r["kind"] == kind]


def test_messages_sent_during_a_model_call_survive_sigkill_seen_once_in_order(
    store_url: str, tmp_path: Path
) -> None:
    (tmp_path / "steermod.py").write_text(MODULE)
    (tmp_path / "driver.py").write_text(DRIVER)
    agent = subprocess.Popen(
        [sys.executable, str(tmp_path / "driver.py"), store_url, "start"],
        env=_env(tmp_path, STEER_KILL="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + HANG_S
        while not (tmp_path / "in-call").exists():
            assert agent.poll() is None, agent.communicate()
            assert time.monotonic() < deadline, "the model call never began"
            time.sleep(0.05)
        # One operator with the real CLI (another process), one through a Client.
        cp = subprocess.run(
            [sys.executable, "-m", "torpor.cli", "--db", store_url, "steer", "k1",
             "use the staging database", "--as", "alice"],
            env=_env(tmp_path), capture_output=True, text=True, timeout=HANG_S,
        )  # fmt: skip
        assert cp.returncode == 0, cp.stderr
        assert "queued" in cp.stdout, cp.stdout
        with torpor.Client(store_url) as client:
            client.steer("k1", "keep it under 10 lines", by="bob")
        (tmp_path / "go").touch()
        _, err = agent.communicate(timeout=HANG_S)
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode == -signal.SIGKILL, err
    assert [c["turn"] for c in _calls(tmp_path, "model")] == [0, 1]

    cp = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), store_url, "resume"],
        env=_env(tmp_path), capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    result = json.loads(cp.stdout.split("RESULT ", 1)[1])
    assert result["outcome"] == "succeeded", result

    model = _calls(tmp_path, "model")
    assert [c["turn"] for c in model] == [0, 1, 2]  # the recorded turn 1 was not made again
    assert model[0]["seen"][:2] == [0, 0]  # the call in flight had not seen them
    assert model[1]["seen"] == [1, 1, True]  # seen at the next boundary, once, in order
    assert model[2]["seen"] == [1, 1, True]  # and after the resume: still once, in order
    assert [c["word"] for c in _calls(tmp_path, "tool")] == ["alpha", "beta"]

    with torpor.Client(store_url) as client:
        events = client.events("k1")
        got = [e.payload.message_id for e in events if e.type == "steer_received"]  # type: ignore[attr-defined]
        taken = [e.payload for e in events if e.type == "steer_taken"]
        assert len(got) == 2 and len(taken) == 1
        assert taken[0].message_ids == got  # type: ignore[attr-defined]
        assert [x.status for x in client.state("k1").steering] == ["taken", "taken"]
