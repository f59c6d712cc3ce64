"""Episodic memory across runs: what earlier runs of an agent did, what failed and why,
retrieved by relevance within a scope (see :mod:`.model` for the terms).

- :class:`EpisodeStore` — write (idempotent per run boundary), search, show, supersede, prune;
- :func:`episodes_section` — the episodes section of a new run's context, within a token
  budget.

Episodes are captured at the end of every execution of a run filed with a task type (agents
are, by default under their name; a workflow run when started with ``task_type=`` or
``scope=``).
"""

from __future__ import annotations

from .context import episodes_section, render_episode, section_for_run, select_episodes
from .derive import RunFiling, derive
from .model import KINDS, Episode, terms
from .store import EpisodeStore, Rerank, contradicts

__all__ = [
    "KINDS",
    "Episode",
    "EpisodeStore",
    "Rerank",
    "RunFiling",
    "contradicts",
    "derive",
    "episodes_section",
    "render_episode",
    "section_for_run",
    "select_episodes",
    "terms",
]
