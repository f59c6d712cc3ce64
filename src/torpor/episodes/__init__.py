"""Episodic memory across runs: what earlier runs of an agent did, what failed and why,
retrieved by relevance within a scope (see :mod:`.model` for the terms).

- :class:`EpisodeStore` — write (idempotent per run boundary), search, show, supersede, prune;
- :func:`episodes_section` — the episodes section of a new run's context, within a token
  budget;
- :class:`Embedder` (:class:`WordLlamaEmbedder`, offline; :class:`HTTPEmbedder`, an
  OpenAI-compatible endpoint) — to find episodes by meaning too: :func:`hybrid_search`
  (:mod:`.hybrid`), used by the store's search and the section when an embedder is configured
  (``TORPOR_EMBEDDER``, :func:`embedder_from_env`).

Episodes are captured at the end of every execution of a run filed with a task type (agents
are, by default under their name; a workflow run when started with ``task_type=`` or
``scope=``).
"""

from __future__ import annotations

from .context import episodes_section, render_episode, section_for_run, select_episodes
from .derive import RunFiling, derive
from .embed import Embedder, HTTPEmbedder, WordLlamaEmbedder, embedder_from_env
from .hybrid import backfill, hybrid_search
from .model import KINDS, Episode, terms
from .store import EpisodeStore, Rerank, contradicts

__all__ = [
    "KINDS",
    "Embedder",
    "Episode",
    "EpisodeStore",
    "HTTPEmbedder",
    "Rerank",
    "RunFiling",
    "WordLlamaEmbedder",
    "backfill",
    "contradicts",
    "derive",
    "embedder_from_env",
    "episodes_section",
    "hybrid_search",
    "render_episode",
    "section_for_run",
    "select_episodes",
    "terms",
]
