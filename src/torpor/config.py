"""Where torpor keeps things, from the environment, with project-local defaults.

- ``TORPOR_HOME`` (default ``./.torpor``): the folder for the default database, artifacts and
  signing key.
- ``TORPOR_DATABASE_URL`` (default ``sqlite:///$TORPOR_HOME/torpor.db``).
- ``TORPOR_ARTIFACTS_URL`` (default ``$TORPOR_HOME/artifacts``; any fsspec URL).
- ``TORPOR_SIGNING_KEY``: hex or text key for signing approval decisions (HMAC-SHA256); without
  it a random key is created once in ``$TORPOR_HOME/signing.key`` (mode 0600).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path


def _home() -> Path:
    return Path(os.environ.get("TORPOR_HOME", ".torpor"))


@dataclass(frozen=True)
class Settings:
    """Resolved locations. Build with :meth:`from_env` or pass explicit values."""

    database_url: str = field(default="")
    artifacts_url: str = field(default="")
    home: Path = field(default_factory=_home)

    @classmethod
    def from_env(
        cls, database_url: str | None = None, artifacts_url: str | None = None
    ) -> Settings:
        home = _home()
        db = database_url or os.environ.get("TORPOR_DATABASE_URL") or f"sqlite:///{home}/torpor.db"
        art = artifacts_url or os.environ.get("TORPOR_ARTIFACTS_URL") or str(home / "artifacts")
        return cls(database_url=db, artifacts_url=art, home=home)

    def signing_key(self) -> bytes:
        """The approval signing key (see module docstring)."""
        env = os.environ.get("TORPOR_SIGNING_KEY")
        if env:
            return env.encode()
        path = self.home / "signing.key"
        if not path.exists():
            self.home.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
        return path.read_text().strip().encode()
