"""The flagship agent with ``--model``: an OpenAI-compatible loopback server plans which files
and rules to handle and writes the commit message; the process is killed right after the push
(before its result was recorded) and resumed: the model is asked each question once, one
commit is pushed, and the commit carries the model's message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_kit import loopback, openai_reply
from conftest import HANG_S

#: Real processes killed and resumed: the full suite runs these; the fast tier skips them.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SUBJECT = "Modernize json: pyupgrade for the chosen files"


def test_flagship_with_a_model_plans_and_writes_the_commit_message(tmp_path: Path) -> None:
    asked: list[str] = []
    chosen: list[str] = []

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("tools"):
            asked.append("plan")
            assert body["tools"][0]["function"]["name"] == "submit_plan"
            survey = json.loads(body["messages"][1]["content"].split("JSON:\n", 1)[1])
            # choose the first file only, every rule found in it (some have no safe fix)
            files = [
                {"path": p, "rules": sorted(r), "why": "most findings"} for p, r in survey.items()
            ][:1]
            chosen.extend(f["path"] for f in files)
            args = {"files": files, "summary": "one file first"}
            return openai_reply(None, [("call_plan", "submit_plan", args)], usage=(900, 60))
        asked.append("message")
        facts = json.loads(body["messages"][1]["content"])
        assert set(facts["files"]) <= set(chosen)
        return openai_reply(f"{SUBJECT}\n\nThe model wrote this body.", usage=(300, 40))

    home, workdir, rid = tmp_path / "home", tmp_path / "work", "flagship-model"
    with loopback("openai", responder) as api:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORPOR_CRASH")}
        env.update(
            TORPOR_HOME=str(home),
            TORPOR_SIGNING_KEY="test-signing-key",
            TORPOR_MODEL_API_KEY="sk-loop",
            PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "src")]),
        )
        base = [sys.executable, "-m", "examples.repo_agent", "--auto-approve", "--json"]
        first = subprocess.run(
            [
                *base,
                "--run-id",
                rid,
                "--packages",
                "json",
                "--workdir",
                str(workdir),
                "--model",
                "loop-1",
                "--model-base-url",
                api.url,
            ],
            cwd=ROOT,
            env={**env, "TORPOR_CRASH_AT": "effect.called@1"},  # the push happened, unrecorded
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        assert first.returncode == -signal.SIGKILL, first.stdout + first.stderr
        second = subprocess.run(
            [*base, "--resume", rid],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
    assert second.returncode == 0, second.stdout + second.stderr
    data = json.loads(second.stdout)
    assert data["outcome"] in ("succeeded", "succeeded_with_warnings"), data
    assert asked == ["plan", "message"]  # each asked once, across the kill

    import torpor

    client = torpor.Client(f"sqlite:///{home}/torpor.db")
    try:
        st = client.state(rid)
        assert st.usage.model_calls == 2 and st.usage.tokens == 900 + 60 + 300 + 40
        plan_ref = client.find_artifact(rid, "plan.json")
        h = plan_ref.sha256
        plan = json.loads((home / "artifacts" / "sha256" / h[:2] / h).read_bytes())
    finally:
        client.close()
    assert plan["planner"] == "model" and plan["summary"] == "one file first"
    assert [f["path"] for f in plan["files"]] == chosen
    assert any("no safe fix" in x["why"] and x["path"] == chosen[0] for x in plan["left"])
    assert any("not chosen by the model" in x["why"] for x in plan["left"])
    sys.path.insert(0, str(ROOT))  # the examples package lives at the repository root
    from examples.repo_agent import world

    commits = world.remote_commits_with_key(workdir / "remote.git", f"{rid}/push")
    assert len(commits) == 1  # one push, reconciled after the kill
    msg = subprocess.run(
        ["git", "--git-dir", str(workdir / "remote.git"), "log", "-1", "--format=%B", commits[0]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert msg.startswith(SUBJECT + "\n\nThe model wrote this body.")


@pytest.mark.parametrize(
    "args, what",
    [(["/nonexistent-folder"], "does not exist"), (["--packages", "nosuchpkg"], "nosuchpkg")],
)
def test_bad_input_exits_3_with_one_line(tmp_path: Path, args: list[str], what: str) -> None:
    """The README's exit codes: 3 is an error before any outcome (the record is intact)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORPOR_")}
    env.update(
        TORPOR_HOME=str(tmp_path / "home"),
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "src")]),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "examples.repo_agent", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 3, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert what in proc.stderr
