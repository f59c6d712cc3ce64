"""A real PostgreSQL server for tests: ``TORPOR_TEST_DATABASE_URL`` when set (CI sets it), else
one started from the ``pgserver`` package. Each test session creates its own database and drops
it at the end; each test gets its own schema (via ``search_path`` in the URL), so tests — and
the worker subprocesses they start — are isolated without recreating databases."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg


def _server_url() -> str:
    url = os.environ.get("TORPOR_TEST_DATABASE_URL")
    if url:
        return url
    import pgserver

    srv = pgserver.get_server(tempfile.mkdtemp(prefix="torpor-pg-"), cleanup_mode="stop")
    return str(srv.get_uri())


def _with_db(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


@contextmanager
def session_database() -> Iterator[str]:
    """Create a fresh database for this test session; yield its URL; drop it afterwards."""
    admin = _server_url()
    name = f"torpor_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        raise RuntimeError(
            f"PostgreSQL for tests is unreachable at {admin!r} (TORPOR_TEST_DATABASE_URL): {exc}"
        ) from exc
    try:
        yield _with_db(admin, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def schema_url(db_url: str) -> str:
    """A URL on ``db_url`` whose connections use a brand-new schema."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in db_url else "?"
    return f"{db_url}{sep}options={quote(f'-csearch_path={schema}')}"
