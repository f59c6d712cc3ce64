"""Migrations are numbered per change and merged in any order: a database that recorded a
newer migration but not an older-numbered one gets the missing one, and nothing twice."""

from __future__ import annotations

import pytest

from torpor.errors import StoreError
from torpor.store import open_store


def test_a_missing_lower_numbered_migration_is_applied(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dialect = "sqlite" if store_url.startswith("sqlite") else "postgres"
    module = __import__(f"torpor.store.{dialect}", fromlist=["_migrations"])
    s = open_store(store_url)
    real = module._migrations()
    top = real[-1][0]
    with s.driver.transaction() as cur:
        # A database migrated by a build that had migration top+2 but not top+1.
        s.driver.execute(cur, "CREATE TABLE later_t (x integer)", {})
        s.driver.execute(
            cur,
            "INSERT INTO torpor_schema (version, applied_at_ms) VALUES (:v, 0)",
            {"v": top + 2},
        )
    s.close()
    extra = [
        (top + 1, "CREATE TABLE missing_t (x integer)"),
        (top + 2, "CREATE TABLE later_t (x integer)"),  # would fail if run again
    ]
    monkeypatch.setattr(module, "_migrations", lambda: [*real, *extra])
    monkeypatch.setattr(module, "SCHEMA_VERSION", top + 2)
    s = open_store(store_url)
    with s.driver.read() as cur:
        assert s.driver.fetchall(cur, "SELECT count(*) FROM missing_t", {}) == [(0,)]
        versions = s.driver.fetchall(cur, "SELECT version FROM torpor_schema ORDER BY 1", {})
    assert [v for (v,) in versions][-2:] == [top + 1, top + 2]
    s.close()


def test_a_read_only_open_sees_a_missing_lower_numbered_migration(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only command never migrates: a store that recorded the newest migration but lacks
    an older-numbered one is refused naming it on PostgreSQL; SQLite, whose folder is writable,
    migrates it as any open does. (Comparing the newest version alone took such a store for
    current and read it with a table missing.)"""
    dialect = "sqlite" if store_url.startswith("sqlite") else "postgres"
    module = __import__(f"torpor.store.{dialect}", fromlist=["_migrations"])
    real = module._migrations()
    top = real[-1][0]
    s = open_store(store_url)
    with s.driver.transaction() as cur:
        s.driver.execute(cur, "CREATE TABLE later_t (x integer)", {})
        s.driver.execute(
            cur,
            "INSERT INTO torpor_schema (version, applied_at_ms) VALUES (:v, 0)",
            {"v": top + 2},
        )
    s.close()
    extra = [(top + 1, "CREATE TABLE missing_t (x integer)"), (top + 2, "SELECT 1")]
    monkeypatch.setattr(module, "_migrations", lambda: [*real, *extra])
    monkeypatch.setattr(module, "SCHEMA_VERSION", top + 2)
    if dialect == "sqlite":
        s = open_store(store_url, read_only=True)
        with s.driver.read() as cur:
            assert s.driver.fetchall(cur, "SELECT count(*) FROM missing_t", {}) == [(0,)]
        s.close()
    else:
        with pytest.raises(StoreError, match=rf"lacks migrations \[{top + 1}\]"):
            open_store(store_url, read_only=True)
