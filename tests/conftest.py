"""Shared fixtures: every test gets its own TORPOR_HOME (SQLite file, artifacts, signing key)
and its own approvers' key folder and trusted keyring (outside TORPOR_HOME) with keys for the
people tests approve as (:data:`APPROVERS`)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import torpor

#: The tiers (fast / default / slow) and the check that a fast-tier test starts no process; the
#: console fixtures (``console_env``, ``console``) of the console's test files.
pytest_plugins = ("tiers", "console_kit")

ROOT = Path(__file__).resolve().parents[1]
# Tables printed by CLI subprocesses are read by the tests: one width everywhere (pytest-xdist
# workers inherit COLUMNS=80, a single process none).
os.environ["COLUMNS"] = "200"

#: The people tests approve as: each test's key folder holds a key pair for each, and its
#: keyring trusts them (made once per test process, copied into each test's folders).
APPROVERS = ("alice", "bob", "carol")
_KEYS: dict[str, tuple[bytes, str]] = {}


def _approver_keys() -> dict[str, tuple[bytes, str]]:
    """``name -> (OpenSSH private key, public key line)``, generated once per process."""
    if not _KEYS:
        from torpor.keys import generate

        with tempfile.TemporaryDirectory() as tmp:
            for name in APPROVERS:
                path, public = generate(Path(tmp), name)
                _KEYS[name] = (path.read_bytes(), public)
    return _KEYS


@pytest.fixture(autouse=True)
def torpor_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Isolate each test: its own home, database and artifacts, its own approvers' keys
    (``TORPOR_CONFIG_DIR``) and trusted keyring (``TORPOR_KEYRING``); no inherited TORPOR_*
    vars."""
    for k in list(os.environ):
        if k.startswith("TORPOR_") and k != "TORPOR_TEST_DATABASE_URL":
            monkeypatch.delenv(k)
    home = tmp_path / "torpor-home"
    monkeypatch.setenv("TORPOR_HOME", str(home))
    monkeypatch.setenv("TORPOR_SIGNING_KEY", "test-signing-key")
    config = tmp_path / "torpor-config"
    (config / "keys").mkdir(parents=True, mode=0o700)
    lines = []
    for name, (private, public) in _approver_keys().items():
        key = config / "keys" / name
        key.write_bytes(private)
        key.chmod(0o600)
        (config / "keys" / f"{name}.pub").write_text(public + "\n")
        lines.append(f"{name} {public}\n")
    (config / "keyring").write_text("".join(lines))
    monkeypatch.setenv("TORPOR_CONFIG_DIR", str(config))
    monkeypatch.setenv("TORPOR_KEYRING", str(config / "keyring"))
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


#: The hang guard for one subprocess or wait in a test, in seconds: not a budget. Generous, so
#: a machine loaded far beyond its cores never trips it (interpreters have been seen to take
#: 7 s to start there); a real hang still fails with the process's output, below the per-test
#: timeout (pyproject.toml).
HANG_S = 300.0


def run_python(
    code: str, *, cwd: Path, env: dict[str, str] | None = None, timeout: float = HANG_S
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
