"""The episodes section of an agent's context: lessons of earlier runs of the same agent and
task type in the run's scope (:func:`torpor.episodes.section_for_run`), recalled for the goal
at the run's start and again at each new plan version (issue 31), each recall a recorded step
read back by every later execution."""

from __future__ import annotations

import json
from typing import Any

from ..episodes.context import section_for_run
from ..episodes.store import EpisodeStore
from ..history import Policy
from ..run import Run

#: Tokens the episodes section of the context may take (lessons of earlier runs); the context
#: builder may cut it further (:data:`torpor.memory.PRIORITIES`).
EPISODES_TOKENS = 800
#: The step that records a run's episodes section.
EPISODES_STEP = "episodes"


class EpisodeRecall:
    """The episodes section of ``run``'s agent (its ``goal`` and ``input``), cached per plan
    version."""

    def __init__(self, run: Run, goal: str, input: Any):
        self.run = run
        self.goal = goal
        self.input = input
        self._episodes: str | None = None
        self._episodes_at = -1
        self._start_section: str | None = None
        self._filed = False

    def section(self, version: int) -> str:
        """The episodes section for plan ``version``: the latest recalled at or before it.
        Each is recorded as a step (``episodes`` at the run's start, ``episodes@vN`` at plan
        vN) and read back by every later execution (also one resumed from a checkpoint past
        it), so a run is given the same text at the same point on replay; ``""`` for a run
        not filed for episodes."""
        if self._episodes is not None and self._episodes_at == version:
            return self._episodes
        journal = self.run.journal
        text = self._start_episodes()
        for v in range(version, 1, -1):
            comp = journal.recorded(f"{EPISODES_STEP}@v{v}", Policy.READ)
            if comp is not None:
                text = str(journal.value(f"{EPISODES_STEP}@v{v}", comp.result) or "")
                break
        self._episodes, self._episodes_at = text, version
        return text

    def _start_episodes(self) -> str:
        if self._start_section is not None:
            return self._start_section
        store = self.run.journal.store
        rid = self.run.run_id
        self._filed = EpisodeStore(store).filing(rid) is not None
        if not self._filed:
            self._start_section = ""
            return ""
        journal = self.run.journal
        comp = journal.recorded(EPISODES_STEP, Policy.READ)
        if comp is not None:
            self._start_section = str(journal.value(EPISODES_STEP, comp.result) or "")
            return self._start_section
        goal = f"{self.goal} {json.dumps(self.input, sort_keys=True, default=str)}"
        rec = journal.record(
            EPISODES_STEP,
            lambda sid: (
                section_for_run(store, rid, goal=goal, token_budget=EPISODES_TOKENS),
                [],
            ),
            purpose="lessons of earlier runs",
        )
        self._start_section = str(rec.result or "")
        return self._start_section

    def recall(self, version: int, plan_text: str) -> None:
        """At plan ``version`` (2 and later: the plan step changed), recall the episodes most
        relevant to the goal *and the new plan* (``plan_text``: its reason, each step's tool
        and why), recorded as the step ``episodes@v{version}`` (read back on replay; nothing
        for a run not filed for episodes)."""
        self._start_episodes()
        if version < 2 or not self._filed:
            return
        store, rid = self.run.journal.store, self.run.run_id
        goal = f"{plan_text} {self.goal}"
        self.run.journal.record(
            f"{EPISODES_STEP}@v{version}",
            lambda sid: (
                section_for_run(store, rid, goal=goal, token_budget=EPISODES_TOKENS),
                [],
            ),
            purpose=f"lessons of earlier runs for plan v{version}",
        )
        self._episodes = None
