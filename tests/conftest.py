"""Shared fixtures: every test gets its own TORPOR_HOME (SQLite file, artifacts, signing key)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import torpor

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def torpor_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Isolate each test: its own home, database and artifacts; no inherited TORPOR_* vars."""
    for k in list(os.environ):
        if k.startswith("TORPOR_") and k != "TORPOR_TEST_DATABASE_URL":
            monkeypatch.delenv(k)
    home = tmp_path / "torpor-home"
    monkeypatch.setenv("TORPOR_HOME", str(home))
    monkeypatch.setenv("TORPOR_SIGNING_KEY", "test-signing-key")
    return home


@pytest.fixture
def db_url(torpor_home: Path) -> str:
    return f"sqlite:///{torpor_home}/torpor.db"


@pytest.fixture
def runtime(db_url: str) -> Iterator[torpor.Runtime]:
    rt = torpor.Runtime(db_url)
    yield rt
    rt.close()


@pytest.fixture
def client(runtime: torpor.Runtime) -> torpor.Client:
    return torpor.Client(runtime.store)


def run_python(
    code: str, *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (real process; may be SIGKILLed by a fault point)."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(cwd), str(ROOT / "src"), full_env.get("PYTHONPATH", "")]
    )
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for the session (see tests/pg.py). Fails, never skips, when
    the server is unreachable."""
    from pg import session_database

    with session_database() as url:
        yield url


@pytest.fixture
def pg_url(pg_database: str) -> str:
    """A PostgreSQL URL whose connections use a schema of their own for this test."""
    from pg import schema_url

    return schema_url(pg_database)


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, db_url: str) -> str:
    """The conformance parameter: the same test against every store backend."""
    if request.param == "sqlite":
        return db_url
    return str(request.getfixturevalue("pg_url"))
