"""The episodes section of an agent's context: the lessons of earlier runs of the same agent and
task type within the caller's scope, most relevant to the goal first, bounded by a token budget
(DESIGN.md G9: the section never grows with the number of episodes stored)."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..store.base import Store
from ..tokens import estimate_text
from .contradict import Conflict
from .embed import Embedder
from .model import Episode
from .store import FROM_ENV, EpisodeStore

SECTION_TITLE = "Episodes: what earlier runs of this task did, what failed and why"
#: The heading of the changed facts in the section (:meth:`EpisodeStore.conflicts`).
CHANGED_TITLE = "Facts that changed in this scope (the newer holds):"
#: Most changed facts the section shows (the newest).
CHANGED_LIMIT = 5


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ms / 1000))


def render_episode(ep: Episode) -> str:
    """One episode as context text: a header line, the summary and the lesson lines."""
    head = f"- run {ep.run_id}, {ep.kind} {ep.outcome}, {_when(ep.created_at_ms)}: {ep.summary}"
    lesson = "\n".join("  " + ln for ln in ep.lesson.splitlines())
    return head + ("\n" + lesson if lesson else "")


def render_conflict(c: Conflict) -> str:
    """One recorded contradiction as context text: the value in force, the one it replaced
    and the runs that stated each."""
    return (
        f"- {c.subject}: {c.new_value} (run {c.newer.run_id}, {_when(c.newer.at_ms)}; "
        f'was {c.old_value}, run {c.older.run_id}: "{c.older.text}")'
    )


def select_episodes(
    episodes: EpisodeStore,
    *,
    scope: str,
    agent: str | None,
    task_type: str | None,
    goal: str,
    exclude_run: str | None = None,
    until_ms: int | None = None,
    limit: int = 5,
) -> list[Episode]:
    """The episodes a new run should see: the most relevant to ``goal`` of each earlier run
    (one per run, the best ranked; when the goal matches nothing, the most recent), at most
    ``limit``."""
    want = max(limit * 4, 20)
    hits: list[Episode] = []
    for query in (goal, ""):  # the goal's words; if they match nothing, the most recent
        hits = episodes.search(
            query, scope=scope, agent=agent, task_type=task_type, until_ms=until_ms, limit=want
        )
        if hits:
            break
    out: list[Episode] = []
    seen: set[str] = set()
    for ep in hits:
        if ep.run_id == exclude_run or ep.run_id in seen:
            continue
        seen.add(ep.run_id)
        out.append(ep)
        if len(out) == limit:
            break
    return out


def episodes_section(
    store: Store,
    *,
    scope: str,
    agent: str | None,
    task_type: str | None,
    goal: str,
    token_budget: int,
    exclude_run: str | None = None,
    until_ms: int | None = None,
    limit: int = 5,
    count_tokens: Callable[[str], int] | None = None,
    embedder: Embedder | None = FROM_ENV,
) -> str:
    """The episodes section text for a run of ``agent``/``task_type`` in ``scope`` pursuing
    ``goal`` — the chosen episodes, then the latest :data:`CHANGED_LIMIT` contradictions
    recorded among the scope's ledger facts (:meth:`EpisodeStore.conflicts`: which value holds
    now, which it replaced), those of ``until_ms`` too — at most ``token_budget`` tokens
    (``count_tokens(text) -> int`` when given, else :func:`torpor.tokens.estimate_text`, the
    estimate the rest of an agent's context is counted with); ``""`` when there is nothing to
    say or no room. ``exclude_run``: the run the context is for (its own episodes are not
    lessons of earlier runs); ``until_ms``: only episodes created (and conflicts recorded) by
    then (epoch ms). ``embedder``: episodes are found by meaning too (hybrid search,
    :mod:`.hybrid`); by default the one ``TORPOR_EMBEDDER`` names, None: full-text search
    alone."""
    if token_budget <= 0:
        return ""
    count = count_tokens or estimate_text
    es = EpisodeStore(store, embedder=embedder)
    changed = es.conflicts(scope, until_ms=until_ms, limit=CHANGED_LIMIT)
    chosen = select_episodes(
        es,
        scope=scope,
        agent=agent,
        task_type=task_type,
        goal=goal,
        exclude_run=exclude_run,
        until_ms=until_ms,
        limit=limit,
    )
    if not chosen and not changed:
        return ""
    text = SECTION_TITLE + "\n"
    if count(text) > token_budget:
        return ""
    for ep in chosen:
        block = render_episode(ep) + "\n"
        if count(text + block) > token_budget:
            break
        text += block
    if changed and count(text + CHANGED_TITLE + "\n") <= token_budget:
        head = CHANGED_TITLE + "\n"
        for c in changed:
            line = render_conflict(c) + "\n"
            if count(text + head + line) > token_budget:
                break
            text, head = text + head + line, ""
    return text.rstrip("\n") if text != SECTION_TITLE + "\n" else ""


def section_for_run(
    store: Store,
    run_id: str,
    *,
    goal: str,
    token_budget: int,
    count_tokens: Callable[[str], int] | None = None,
    embedder: Embedder | None = FROM_ENV,
) -> str:
    """The episodes section for run ``run_id`` (filed under its scope, agent and task type):
    the lessons of *earlier* runs — episodes created before this run was, so a resumed run is
    given the same section its first execution was (episodes written meanwhile are not
    seen). ``""`` for a run not filed for episodes. ``embedder``: see
    :func:`episodes_section`."""
    episodes = EpisodeStore(store, embedder=None)
    found = episodes.filing(run_id)
    if found is None:
        return ""
    filing, _ = found
    created = store.get_run(run_id).created_at_ms
    return episodes_section(
        store,
        scope=filing.scope,
        agent=filing.agent,
        task_type=filing.task_type,
        goal=goal,
        token_budget=token_budget,
        exclude_run=run_id,
        until_ms=created - 1,
        count_tokens=count_tokens,
        embedder=embedder,
    )


__all__ = [
    "CHANGED_LIMIT",
    "CHANGED_TITLE",
    "SECTION_TITLE",
    "episodes_section",
    "render_conflict",
    "render_episode",
    "section_for_run",
    "select_episodes",
]
