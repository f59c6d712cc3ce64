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

from ..store.sqlstore import SQLStore
from .model import OWNER_PREFIX, owner_of
from .store import load_episode_queries


def collect(store: SQLStore, dry_run: bool) -> str:
    """One gc pass over the episodes' references: delete (``dry_run``: count) those of episodes
    that no longer exist; returns one line saying what it did and what episodes keep."""
    q, driver = load_episode_queries(store.driver.dialect), store.driver
    if dry_run:
        with driver.read() as cur:
            row = driver.fetchone(cur, q["orphan_episode_refs"], {})
        dropped = int(row[0]) if row else 0
    else:
        with driver.transaction() as cur:
            dropped = int(driver.execute(cur, q["drop_orphan_episode_refs"], {}) or 0)
    with driver.read() as cur:
        row = driver.fetchone(cur, q["episode_refs"], {})
    episodes, artifacts = (int(row[0]), int(row[1])) if row else (0, 0)
    verb = "to drop" if dry_run else "dropped"
    return (
        f"episodes: {episodes} episode(s) keep {artifacts} artifact(s); "
        f"{dropped} reference(s) of deleted episodes {verb}"
    )


__all__ = ["OWNER_PREFIX", "collect", "owner_of"]
