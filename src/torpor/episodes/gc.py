"""Episodes in garbage collection: the artifacts a kept episode names are never collected.

An episode outlives the run it came from (episodes have their own retention, ``torpor memory
prune``) and names that run's artifacts by sha256 (``refs["artifacts"]``). Garbage collection
(:mod:`torpor.retention`) keeps every artifact a row of ``blob_refs`` names, so
:class:`~.store.EpisodeStore` records one row per artifact under the owner ``episode:<episode
id>`` in the transaction that writes the episode, and deletes them in the one that prunes it.

:func:`collect` is the collector :mod:`torpor.retention` runs in every pass (imported only then:
a cold resume never loads episodes): it drops the rows of episodes deleted some other way and
says how many episodes keep how many artifacts.
"""

from __future__ import annotations

from ..store.base import Store
from .model import OWNER_PREFIX, owner_of


def collect(store: Store, dry_run: bool) -> str:
    """One gc pass over the episodes' references: delete (``dry_run``: count) those of episodes
    that no longer exist; returns one line saying what it did and what episodes keep."""
    dropped, episodes, artifacts = store.collect_episode_refs(dry_run=dry_run)
    verb = "to drop" if dry_run else "dropped"
    return (
        f"episodes: {episodes} episode(s) keep {artifacts} artifact(s); "
        f"{dropped} reference(s) of deleted episodes {verb}"
    )


__all__ = ["OWNER_PREFIX", "collect", "owner_of"]
