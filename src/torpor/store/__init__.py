"""Stores: where a run's authoritative state lives. Chosen by URL in one place, :func:`open_store`.

- ``sqlite:///path/to/file.db`` — embedded default (stdlib sqlite3, WAL).
- ``postgresql://user@host:port/db`` — many workers on many machines (psycopg 3).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..errors import ConfigError
from ..urls import display_url
from .base import Completion, InboxMessage, Lease, RunCount, RunRecord, RunStorage, Store
from .sqlstore import SQLStore


def open_store(
    url: str,
    *,
    clock: Callable[[], float] = time.time,
    read_only: bool = False,
    create: bool = True,
    check: bool = False,
) -> SQLStore:
    """Open the store named by ``url``. Raises ConfigError for an unsupported scheme.

    ``read_only``: for commands that change nothing (``ls``, ``show``, ``events``,
    ``artifacts``, ``doctor``): the store is never created or migrated (StoreMissingError when
    there is none); a SQLite file is opened read-only.

    ``create`` False: a store that does not exist yet is not created (StoreMissingError naming
    the path); an existing one is migrated as usual. Only what starts a run (and ``torpor
    init``) creates a store; every other command opens with ``create=False``, so a deleted or
    mistyped store is named instead of silently replaced by an empty one.

    ``check`` (commands that delete or rewrite: ``gc``, ``retention``, ``archive restore``):
    a SQLite file gets SQLite's quick integrity check before it is opened for writing
    (DamagedStoreError on any finding; :mod:`torpor.store.damage`).
    """
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme == "sqlite":
        from .sqlite import open_sqlite

        return open_sqlite(url, clock=clock, read_only=read_only, create=create, check=check)
    if scheme in ("postgresql", "postgres"):
        from .postgres import open_postgres

        return open_postgres(url, clock=clock, read_only=read_only, create=create)
    raise ConfigError(
        f"unsupported store URL {display_url(url)!r}: expected sqlite:///path or postgresql://…"
    )


__all__ = [
    "Completion",
    "InboxMessage",
    "Lease",
    "RunCount",
    "RunRecord",
    "RunStorage",
    "SQLStore",
    "Store",
    "open_store",
]
