"""An episode write survives SIGKILL at every fault point without duplicates (issue 18).

The agent of ``episodes_kit`` (approach A fails, B fixes it) runs in a real process (forked
from this one: no interpreter start per case, so every point fits in seconds) that kills
itself with SIGKILL at the n-th time it reaches a fault point — every crash point the run passes
(its appends, plan versions, settled calls, lease) and the two of episode capture
(``episodes.derived``: derived, nothing written; ``episodes.written``: inserted, not committed).
This process then resumes the run (or, for a run killed after its outcome, sweeps with
``EpisodeStore.catch_up``) and checks the run's episodes against a run never killed: the same
boundaries, each written once, with the same lessons.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest

import episodes_kit as kit
import torpor
from torpor import faults
from torpor.episodes import EpisodeStore

pytestmark = pytest.mark.slow

#: On PostgreSQL the points around the boundaries that write episodes (the SQLite run covers
#: every point; the store code is the same).
PG_CASES = (
    "agent.tool.settled@1",
    "agent.tool.settled@2",
    "append.before@11",
    "append.after@11",
    "append.before@12",
    "append.after@12",
    "episodes.derived@1",
    "episodes.written@1",
)


def _drive(url: str, rid: str, plan: str | None = None, trace: Path | None = None) -> int:
    """Run the agent in a forked process with fault ``plan``; its exit code (-9: SIGKILL)."""
    pid = os.fork()
    if pid == 0:  # the child: its own store connections, its own fault plan
        code = 3
        try:
            faults.install(plan, trace=trace)
            rt = torpor.Runtime(url)
            res = rt.run(kit.code_agent(), {"target": "prod"}, run_id=rid, scope="acme")
            code = 0 if res.outcome == "succeeded" else 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _shape(es: EpisodeStore, rid: str) -> list[tuple[str, str, str]]:
    """The run's episodes, as (boundary kind, outcome, lesson) with its id taken out."""
    hits = es.search("", scope="acme", limit=100, include_superseded=True)
    mine = sorted((h for h in hits if h.run_id == rid), key=lambda h: h.at_seq)
    return [(h.kind, h.outcome, h.lesson) for h in mine]


def test_episode_writes_survive_sigkill_at_every_point(store_url: str, tmp_path: Path) -> None:
    kit.WORLD.update(a_works=False, log=[])
    trace = tmp_path / "trace.txt"
    assert _drive(store_url, "base", trace=trace) == 0
    seen = Counter(trace.read_text().split())
    points = [*torpor.faults.CRASH_POINTS, "episodes.derived", "episodes.written"]
    cases = [f"{p}@{n}" for p in points for n in range(1, seen[p] + 1)]
    if store_url.startswith("postgres"):
        assert set(PG_CASES) <= set(cases), cases
        cases = list(PG_CASES)
    assert len(cases) >= 8

    kit.code_agent()  # registered here too: this process resumes the runs
    rt = torpor.Runtime(store_url)
    try:
        es = EpisodeStore(rt.store)
        expected = _shape(es, "base")
        assert [k for k, _, _ in expected] == ["milestone", "ended"]
        killed = 0
        for i, case in enumerate(cases):
            rid = f"k{i:02d}"
            code = _drive(store_url, rid, f"crash:{case}")
            killed += code == -signal.SIGKILL
            rec = rt.store.get_run(rid)
            if rec.status == "finished" and i % 2:
                es.catch_up()  # a sweep writes what the dead process did not
            else:
                assert rt.resume(rid).outcome == "succeeded", case
            assert _shape(es, rid) == expected, case
            # Again: nothing more.
            assert rt.resume(rid).outcome == "succeeded"
            es.catch_up()
            assert _shape(es, rid) == expected, case
        assert killed == len(cases)  # every case really died at its point
        everything = es.search("", scope="acme", limit=1000, include_superseded=True)
        ids = [h.episode_id for h in everything]
        assert len(ids) == len(set(ids)) == 2 * (len(cases) + 1)  # two per run, once each
    finally:
        rt.close()


def _phrasing_agent(model: object) -> torpor.Agent:
    return torpor.Agent(
        "ep.phrased.kill",
        goal="deploy the service to the target environment",
        tools=kit.tools,
        planner=torpor.CodePlanner(kit.code_plan),
        task_type="deploy",
        lesson_model=model,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("case", ["model.recorded@1", "episodes.derived@1"])
def test_a_phrased_lesson_survives_sigkill(store_url: str, case: str) -> None:
    """Killed right after the phrasing model call was recorded (or after the run ended, before
    its episodes were written), the resumed run reads the call back — the same prompt, so no
    divergence — and never pays for it again; its episode carries the phrasing once."""
    from torpor.agents.models import ScriptedModel
    from torpor.agents.models.scripted import say

    kit.WORLD.update(a_works=False, log=[])
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            faults.install(f"crash:{case}")
            rt = torpor.Runtime(store_url)
            agent = _phrasing_agent(ScriptedModel([say("Use B; A speaks TLS 1.0 only.")]))
            rt.run(agent, {"target": "prod"}, run_id="ph", scope="acme")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    model = ScriptedModel([say("a second answer: must never be asked")])
    _phrasing_agent(model)
    rt = torpor.Runtime(store_url)
    try:
        assert rt.resume("ph").outcome == "succeeded"
        assert model.calls == []
        ended = [h for h in EpisodeStore(rt.store).search("", scope="acme") if h.kind == "ended"]
        assert [h.lesson.splitlines()[0] for h in ended] == [
            "- in short: Use B; A speaks TLS 1.0 only."
        ]
    finally:
        rt.close()
