"""Where torpor keeps things, from the environment, with project-local defaults.

- ``TORPOR_HOME`` (default ``./.torpor``): the folder for the default database, artifacts and
  signing key.
- ``TORPOR_DATABASE_URL`` (default ``sqlite:///$TORPOR_HOME/torpor.db``).
- ``TORPOR_ARTIFACTS_URL`` (default ``$TORPOR_HOME/artifacts``; any fsspec URL).
- ``TORPOR_SIGNING_KEY``: the local shared key (text) for keyed hashes of secret values (G12)
  and, only in the local single-user approval mode, for HMAC decisions. Without it, the keyed
  hashes use ``$TORPOR_HOME/signing.key`` (made once, random, mode 0600: it approves nothing —
  a writer of ``TORPOR_HOME`` who replaces it only makes later hashes differ), and the
  ``hmac-local`` mode uses ``$TORPOR_CONFIG_DIR/hmac-local.key`` (made once, outside
  ``TORPOR_HOME``, so a writer of that folder cannot approve in that mode either).

Approvals (G6; :mod:`torpor.keys`) — never read from the database nor from ``TORPOR_HOME``:

- ``TORPOR_CONFIG_DIR`` (default ``$XDG_CONFIG_HOME/torpor``, else ``~/.config/torpor``): the
  user's own folder; ``keys/NAME`` holds the private key ``torpor keys init --as NAME`` made.
- ``TORPOR_KEYRING``: the trusted keyring file (the public keys allowed to sign decisions).
  Without it: ``$TORPOR_CONFIG_DIR/keyring`` when it exists, else the system-wide
  :data:`SYSTEM_KEYRING` when it exists, else ``$TORPOR_CONFIG_DIR/keyring`` (created by
  ``torpor keys init``/``add``). A keyring or key folder under ``TORPOR_HOME`` is refused
  (:class:`~torpor.errors.KeyringError`): whoever can write that folder must not be trusted.
- ``TORPOR_CONSOLE_USERS``: the web console's users file (``torpor console``; default
  ``$TORPOR_CONFIG_DIR/console-users``): who may log in, with scrypt password hashes.
- ``TORPOR_APPROVALS``: ``keys`` (default: decisions signed per person) or ``hmac-local``
  (also accept decisions made with the shared key above — ``TORPOR_SIGNING_KEY`` or
  ``$TORPOR_CONFIG_DIR/hmac-local.key``, never a file in ``TORPOR_HOME``; one local user, not
  attributable; the key must be at least 32 bytes).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError, KeyringError

#: The system-wide keyring, read when neither ``TORPOR_KEYRING`` nor a user keyring exists.
SYSTEM_KEYRING = Path("/etc/torpor/keyring")

#: The approval modes ``TORPOR_APPROVALS`` may name.
APPROVAL_MODES = ("keys", "hmac-local")


def _home() -> Path:
    return Path(os.environ.get("TORPOR_HOME", ".torpor"))


def _outside(
    home: Path, path: Path, what: str, variable: str, who: str = "make themselves an approver"
) -> Path:
    """``path`` if it is not under ``home`` (KeyringError naming both otherwise)."""
    resolved = path.expanduser().resolve()
    if resolved.is_relative_to(home.expanduser().resolve()):
        raise KeyringError(
            f"{what} {path} is inside TORPOR_HOME ({home}); whoever can write that folder "
            f"could {who}, so torpor refuses it: set {variable} to a path outside it"
        )
    return resolved


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

    def config_dir(self) -> Path:
        """The user's own torpor folder (private keys under ``keys/``); never under
        ``TORPOR_HOME`` (KeyringError)."""
        env = os.environ.get("TORPOR_CONFIG_DIR")
        if env:
            path = Path(env)
        else:
            xdg = os.environ.get("XDG_CONFIG_HOME")
            path = (Path(xdg) if xdg else Path.home() / ".config") / "torpor"
        return _outside(self.home, path, "the key folder", "TORPOR_CONFIG_DIR")

    def keyring_path(self) -> Path:
        """The trusted keyring file (see the module docstring for the order); never under
        ``TORPOR_HOME`` (KeyringError). The file need not exist yet."""
        env = os.environ.get("TORPOR_KEYRING")
        if env:
            return _outside(self.home, Path(env), "the keyring", "TORPOR_KEYRING")
        user = self.config_dir() / "keyring"
        if not user.exists() and SYSTEM_KEYRING.exists():
            return _outside(self.home, SYSTEM_KEYRING, "the keyring", "TORPOR_KEYRING")
        return user

    def console_users_path(self, explicit: str | Path | None = None) -> Path:
        """The console's users file (``torpor console``: names and password hashes):
        ``explicit``, else ``$TORPOR_CONSOLE_USERS``, else ``$TORPOR_CONFIG_DIR/console-users``;
        never under ``TORPOR_HOME`` (KeyringError). The file need not exist yet."""
        raw = explicit or os.environ.get("TORPOR_CONSOLE_USERS")
        path = Path(raw) if raw else self.config_dir() / "console-users"
        return _outside(
            self.home, path, "the console's users file", "TORPOR_CONSOLE_USERS", "log in as anyone"
        )

    def approval_mode(self) -> str:
        """``keys`` or ``hmac-local`` (``TORPOR_APPROVALS``; ConfigError for another value)."""
        mode = os.environ.get("TORPOR_APPROVALS", "keys").strip() or "keys"
        if mode not in APPROVAL_MODES:
            raise ConfigError(
                f"TORPOR_APPROVALS={mode!r}: expected one of {', '.join(APPROVAL_MODES)}"
            )
        return mode

    def hmac_key(self) -> bytes | None:
        """The shared key HMAC decisions are made and checked with, in the ``hmac-local``
        mode only (None otherwise): ``TORPOR_SIGNING_KEY``, else the file
        :meth:`hmac_key_path` in the user's own folder — never a file in ``TORPOR_HOME``, so a
        writer of that folder cannot approve in this mode either (issue 34). Made once (random,
        mode 0600) when missing; ConfigError if it is shorter than 32 bytes."""
        if self.approval_mode() != "hmac-local":
            return None
        env = os.environ.get("TORPOR_SIGNING_KEY")
        path = self.hmac_key_path()
        key = env.encode() if env else _key_file(path)
        if len(key) < 32:
            source = "TORPOR_SIGNING_KEY" if env else str(path)
            raise ConfigError(
                f"TORPOR_APPROVALS=hmac-local needs a shared key of at least 32 bytes; "
                f"the one in {source} has {len(key)}"
            )
        return key

    def hmac_key_path(self) -> Path:
        """Where the ``hmac-local`` mode keeps its shared key without ``TORPOR_SIGNING_KEY``:
        ``$TORPOR_CONFIG_DIR/hmac-local.key`` (outside ``TORPOR_HOME``, KeyringError else)."""
        return self.config_dir() / "hmac-local.key"

    def signing_key(self) -> bytes:
        """The key of the keyed hashes that stand for secret values in the record
        (``{"$secret": HMAC-SHA256(key, value)}``, G12): ``TORPOR_SIGNING_KEY``, else
        ``$TORPOR_HOME/signing.key``, made once (random, mode 0600). It signs and approves
        nothing (decisions are signed by people's keys; :meth:`hmac_key` in ``hmac-local``)."""
        env = os.environ.get("TORPOR_SIGNING_KEY")
        if env:
            return env.encode()
        return _key_file(self.home / "signing.key")


def _key_file(path: Path) -> bytes:
    """The key in ``path`` (stripped), made once with 64 random hex digits, mode 0600."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process made it first: read theirs
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
    return path.read_text().strip().encode()
