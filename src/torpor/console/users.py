"""Who may log in to the console: a users file of names and scrypt password hashes.

The file (:meth:`torpor.Settings.console_users_path`: ``--users``, ``$TORPOR_CONSOLE_USERS``, or
``$TORPOR_CONFIG_DIR/console-users``; never under ``TORPOR_HOME``) has one line per person::

    # NAME scrypt$LOG2_N$R$P$SALT$HASH
    alice scrypt$15$8$1$3q2+7w...$Zk9...

``torpor console --add-user NAME`` writes a line (the password read twice from the terminal,
or once from standard input with ``--password-stdin``). Hashes are scrypt (RFC 7914, from the
standard library's :func:`hashlib.scrypt`) with a random 16-byte salt, N = 2**15, r = 8, p = 1
(the parameters are stored per line, so they can be raised later), compared in constant time.
The name is the approver's name in signed decisions, so it follows the keyring's rules
(:data:`torpor.keys.NAME_RE`). No web framework is imported here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import KeyringError, UsersFileError
from ..keys import check_name

#: scrypt cost parameters for new hashes: N = 2**LOG2_N, r, p (about 50 ms and 32 MiB).
LOG2_N, R, P = 15, 8, 1
#: Shortest password accepted when adding a user.
MIN_PASSWORD = 10
_SCHEME = "scrypt"
_HEADER = (
    "# torpor console users: who may log in (torpor console --add-user NAME).\n"
    "# NAME scrypt$LOG2_N$R$P$SALT$HASH\n"
)


def _scrypt(password: str, salt: bytes, log2_n: int, r: int, p: int) -> bytes:
    n = 1 << log2_n
    return hashlib.scrypt(
        password.encode(), salt=salt, n=n, r=r, p=p, maxmem=256 * n * r + (1 << 20), dklen=32
    )


def hash_password(password: str) -> str:
    """The stored form of ``password``: ``scrypt$LOG2_N$R$P$SALT$HASH`` (base64)."""
    salt = secrets.token_bytes(16)
    digest = _scrypt(password, salt, LOG2_N, R, P)
    b64 = base64.b64encode
    return f"{_SCHEME}${LOG2_N}${R}${P}${b64(salt).decode()}${b64(digest).decode()}"


def _parse(stored: str, where: str) -> tuple[int, int, int, bytes, bytes]:
    parts = stored.split("$")
    try:
        if len(parts) != 6 or parts[0] != _SCHEME:
            raise ValueError
        log2_n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt, digest = base64.b64decode(parts[4]), base64.b64decode(parts[5])
        if not (10 <= log2_n <= 20 and 1 <= r <= 32 and 1 <= p <= 16 and salt and digest):
            raise ValueError
    except ValueError:
        raise UsersFileError(
            f"{where}: not a password hash this console reads (expected "
            "scrypt$LOG2_N$R$P$SALT$HASH; make one with torpor console --add-user NAME)"
        ) from None
    return log2_n, r, p, salt, digest


@dataclass(frozen=True)
class Users:
    """The parsed users file: name -> stored hash."""

    path: Path
    hashes: dict[str, str]

    @classmethod
    def load(cls, path: Path, *, missing_ok: bool = False) -> Users:
        """Read and check every line (UsersFileError naming ``path:line``)."""
        try:
            text = path.read_text()
        except FileNotFoundError:
            if missing_ok:
                return cls(path, {})
            raise UsersFileError(
                f"no console users file at {path}: add a user with "
                f"`torpor console --add-user NAME --users {path}`"
            ) from None
        except OSError as exc:
            raise UsersFileError(f"cannot read the users file {path}: {exc.strerror}") from None
        hashes: dict[str, str] = {}
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{path}:{n}"
            name, _, stored = line.partition(" ")
            try:
                check_name(name, f"{where}: user")
            except KeyringError as exc:
                raise UsersFileError(str(exc)) from None
            _parse(stored.strip(), where)
            if name in hashes:
                raise UsersFileError(f"{where}: user {name!r} is listed twice")
            hashes[name] = stored.strip()
        return cls(path, hashes)

    def verify(self, name: str, password: str) -> bool:
        """Whether ``password`` is ``name``'s. An unknown name costs as much as a known one
        (no timing tells which names exist)."""
        stored = self.hashes.get(name)
        log2_n, r, p, salt, digest = _parse(stored or _DUMMY, str(self.path))
        got = _scrypt(password, salt, log2_n, r, p)
        return hmac.compare_digest(got, digest) and stored is not None

    def with_user(self, name: str, password: str) -> Users:
        """A copy with ``name``'s password set (UsersFileError for a bad name or a short
        password)."""
        try:
            check_name(name, "user")
        except KeyringError as exc:
            raise UsersFileError(str(exc)) from None
        if len(password) < MIN_PASSWORD:
            raise UsersFileError(f"a password needs at least {MIN_PASSWORD} characters")
        return Users(self.path, {**self.hashes, name: hash_password(password)})

    def save(self) -> None:
        """Write the file atomically, readable by its owner only (0600)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = _HEADER + "".join(f"{k} {v}\n" for k, v in self.hashes.items())
        fd, tmp = tempfile.mkstemp(prefix=".console-users-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            raise UsersFileError(
                f"cannot write the users file {self.path}: {exc.strerror}"
            ) from None


#: A well-formed hash no password matches (checked for unknown names, to cost the same).
_DUMMY = (
    f"{_SCHEME}${LOG2_N}${R}${P}$"
    + base64.b64encode(b"torpor-no-user!!").decode()
    + "$"
    + base64.b64encode(bytes(32)).decode()
)


__all__ = ["MIN_PASSWORD", "Users", "hash_password"]
