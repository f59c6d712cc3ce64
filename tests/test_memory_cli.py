"""``torpor context RUN`` and the console's run page show the context an agent's next model
call would get, section by section, read from the run's latest checkpoint (both stores for the
command; the console on its own store)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import torpor
from torpor.agents.planners import CodePlanner
from torpor.cli import app
from torpor.errors import BadInputError

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the examples package lives at the repository root
    sys.path.insert(0, str(ROOT))

from examples.long_agent.agent import make_agent  # noqa: E402

from conftest import HANG_S  # noqa: E402
from console_kit import path_of, running_console  # noqa: E402
from memory_kit import fresh, world  # noqa: E402
from torpor.memory.view import context_view  # noqa: E402

TURNS = 30


def _stopped_midway(url: str, tmp_path: Path, rid: str) -> None:
    """A long-agent run stopped after 20 model turns (its budget of steps reached: blocked)."""
    world(tmp_path, TURNS)
    agent = make_agent(fresh("cli"), budget_tokens=2500)
    agent.budget = torpor.Budget(steps=40)
    with torpor.Runtime(url) as rt:
        res = rt.run(agent, {"turns": TURNS, "seed": 7}, run_id=rid)
    assert res.outcome == "blocked", res


def test_context_command_shows_sections_with_token_counts(store_url: str, tmp_path: Path) -> None:
    _stopped_midway(store_url, tmp_path, "ctx")
    out = CliRunner().invoke(app, ["--db", store_url, "context", "ctx", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    names = [s["name"] for s in data["sections"]]
    assert names == [
        "system", "summary", "plan", "checkpoint", "recall", "artifacts", "goal", "buffer"
    ]  # fmt: skip
    by = {s["name"]: s for s in data["sections"]}
    assert by["summary"]["tokens"] > 0 and "earlier turns summarized" in by["summary"]["text"]
    assert by["buffer"]["tokens"] > 0 and "read_file" in by["buffer"]["text"]
    assert data["total_tokens"] <= data["budget_tokens"] == 2500
    assert data["model_turns"] == 20 and data["compactions"] >= 1
    # What it shows is what the agent builds: the same function, the same hash.
    with torpor.Client(store_url) as c:
        view = context_view(c.state("ctx"))
    assert view is not None and view.context_hash == data["context_hash"]
    # The limits in force (issue 29): the budget's parts, the result clip, the plan-version cap.
    limits = data["limits"]
    # (the clip: at most a third of the buffer part, the long agent gives it 45%: 750 chars)
    assert limits["budget_tokens"] == 2500 and limits["result_chars"] == 750
    assert limits["max_plan_versions"] == 1_000_000 and limits["plan_version"] == 20
    assert 0 < limits["summary_tokens"] < limits["summary_keep_tokens"] == 2500
    text = CliRunner().invoke(app, ["--db", store_url, "context", "ctx"])
    assert text.exit_code == 0 and "── summary" in text.output and "total" in text.output
    flat = " ".join(text.output.split())
    assert "tool results clipped at 750 chars" in flat and "of at most 1000000" in flat
    assert "HOLDS" in text.output
    # A run that is not an agent: a clear one-line error.
    with torpor.Runtime(store_url) as rt:
        rt.run(torpor.workflow(name=fresh("plain"))(lambda run, x: x), 1, run_id="plain")
    bad = CliRunner().invoke(app, ["--db", store_url, "context", "plain"])
    assert isinstance(bad.exception, BadInputError)  # (main() prints it as one line, exit 2)
    assert "run 'plain' is not an agent run: it finished with no agent checkpoint" in str(
        bad.exception
    )
    # --ledger of it too (it printed an empty table).
    bad = CliRunner().invoke(app, ["--db", store_url, "context", "plain", "--ledger"])
    assert isinstance(bad.exception, BadInputError)
    assert "run 'plain' is not an agent run" in str(bad.exception)


def test_context_of_an_agent_waiting_for_approval(store_url: str) -> None:
    """An agent waiting for a person's approval shows its next context once it has a
    checkpoint; before its first boundary the error says why there is none and what it waits
    for. A workflow's own checkpoint is named as such."""
    tools = torpor.Tools()

    @tools.tool
    def fetch(source: str) -> list[int]:
        return [3, 1, 2]

    @tools.tool(policy="effect", requires_approval=True)
    def publish(rows: list[int], idempotency_key: str) -> dict[str, Any]:
        return {"published": rows}

    def first_publish(view: torpor.PlanView) -> torpor.Proposal:
        if view.version == 0:
            return torpor.Proposal(steps=[torpor.step("p", "publish", rows=[1])])
        return torpor.Proposal.finish()

    def fetch_then_publish(view: torpor.PlanView) -> torpor.Proposal:
        if view.version == 0:
            return torpor.Proposal(steps=[torpor.step("a", "fetch", source="db")])
        if view.version == 1:
            return torpor.Proposal(steps=[torpor.step("p", "publish", rows=[1, 2, 3])])
        return torpor.Proposal.finish()

    def agent(name: str, plan: Any) -> torpor.Agent:
        return torpor.Agent(fresh(name), goal="publish", tools=tools, planner=CodePlanner(plan))

    with torpor.Runtime(store_url) as rt:
        assert rt.run(agent("first", first_publish), None, run_id="w1").status == "waiting"
        assert rt.run(agent("later", fetch_then_publish), None, run_id="w2").status == "waiting"
        own = torpor.workflow(name=fresh("own"))(lambda run, x: run.checkpoint({"n": x}))
        rt.run(own, 1, run_id="own")
    bad = CliRunner().invoke(app, ["--db", store_url, "context", "w1"])
    assert isinstance(bad.exception, BadInputError)
    msg = str(bad.exception)
    assert "run 'w1' has no agent checkpoint yet" in msg and "waiting (approval" in msg, msg
    out = CliRunner().invoke(app, ["--db", store_url, "context", "w2", "--json"])
    assert out.exit_code == 0, out.output
    plan = {s["name"]: s for s in json.loads(out.output)["sections"]}["plan"]["text"]
    assert '- a: fetch({"source": "db"}) [succeeded]' in plan, plan  # its latest boundary
    bad = CliRunner().invoke(app, ["--db", store_url, "context", "own"])
    assert "run 'own' is not an agent run: its checkpoint" in str(bad.exception)


@pytest.mark.slow
def test_console_run_page_shows_the_next_context(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from console_kit import Http

    with running_console(tmp_path_factory.mktemp("console")) as env:
        env.use(monkeypatch)
        _stopped_midway(env.db_url, tmp_path, "ctx-page")
        http = Http(env.url)
        assert http.login() in (200, 303)
        status, _, page = http.get(path_of("ctx-page"))
    assert status == 200
    assert "Context of the next model call" in page and 'id="context-sections"' in page
    assert "earlier turns summarized" in page and "<td>summary</td>" in page


@pytest.mark.proc
def test_the_docs_snippet_runs_as_written(tmp_path: Path) -> None:
    """docs/context.md's Python block and its ``torpor context`` commands, as written."""
    import re
    import subprocess

    from conftest import run_python

    doc = (ROOT / "docs" / "context.md").read_text()
    code = re.findall(r"```python\n(.*?)```", doc, re.S)[0]
    proc = run_python(code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("succeeded\n") and "## team-notes" in proc.stdout
    assert "Deploys are frozen on Fridays." in proc.stdout
    for line in re.findall(r"^(torpor --db .*?)\s+#", doc, re.M):
        out = subprocess.run(
            [sys.executable, "-m", "torpor.cli", *line.split()[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        assert out.returncode == 0, (line, out.stderr)
        assert "team-notes" in out.stdout


@pytest.mark.slow
def test_the_long_example_runs_as_its_readme_says(tmp_path: Path) -> None:
    """The commands of docs/context.md's (and the README's) long example: killed at turn 150,
    resumed to the end, then ``torpor context``."""
    import re
    import subprocess

    doc = (ROOT / "docs" / "context.md").read_text()
    block = re.findall(r"```bash\n(uv run python -m examples.long_agent.*?)```", doc, re.S)[0]
    demo = tmp_path / "long-demo"
    outs = []
    for line in block.strip().splitlines():
        args = line.replace("/tmp/long-demo", str(demo)).split()[2:]  # (after "uv run")
        if args[0] == "python":
            args = [sys.executable, *args[1:]]
        else:
            args = [sys.executable, "-m", "torpor.cli", *args[1:]]
        outs.append(subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300))
    killed, resumed, shown = outs
    assert killed.returncode == -9 and "SIGKILL at turn 150" in killed.stdout, killed.stderr
    assert resumed.returncode == 0 and "succeeded: 300 model calls" in resumed.stdout
    first = resumed.stdout.splitlines()[0]
    assert first.startswith("turn  150"), first  # continued where it died
    sizes = [int(m) for m in re.findall(r"context\s+(\d+) tokens", resumed.stdout)]
    assert max(sizes) <= 6000
    assert shown.returncode == 0 and "summary" in shown.stdout
