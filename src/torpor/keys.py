"""Approvers' keys and the trusted keyring (DESIGN.md G6).

Each person who approves has an Ed25519 key pair of their own (OpenSSH format, so an existing
``~/.ssh/id_ed25519`` or ``ssh-agent`` serves as well): ``torpor keys init --as NAME`` makes one
in the user's own folder (:meth:`torpor.Settings.config_dir`, ``keys/NAME``, mode 0600), and
``torpor approve`` signs the decision's canonical bytes (:mod:`torpor.signing`) with it. torpor
never stores a private key in the database or in ``TORPOR_HOME``.

Workers verify decisions against the **keyring** (:meth:`torpor.Settings.keyring_path`: from the
environment or a system-wide path, never from the database nor ``TORPOR_HOME``), a text file of
one public key per line::

    # NAME [delegate-for=NAME,NAME,...] ssh-ed25519 BASE64 [COMMENT]
    alice ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB5... alice@laptop
    console@ops delegate-for=alice,bob ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0... the console

A line with ``delegate-for`` names a **delegate** (a web console): its key signs *for* the people
listed (``*``: anyone), never as itself; the decision records both the person and the delegate.
Removing a line (``torpor keys remove NAME``) revokes that key: decisions it signed are refused
from then on, also those recorded but not yet consumed. Workers only read the file (re-read when
it changes); they need no write access to it.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import socket
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from . import signing
from .errors import KeyringError
from .filemodes import check_private

#: Names of approvers and delegates: what ``--as`` takes and ``keys/NAME`` is called.
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@+-]{0,127}")

#: The only key type accepted.
KEY_TYPE = "ssh-ed25519"

HEADER = (
    "# torpor keyring: the public keys allowed to sign approval decisions (G6).\n"
    "# NAME [delegate-for=NAME,NAME,...] ssh-ed25519 BASE64 [COMMENT]\n"
)


def check_name(name: str, what: str = "name") -> str:
    """``name`` if it can name an approver (KeyringError otherwise)."""
    if not NAME_RE.fullmatch(name or ""):
        raise KeyringError(
            f"{what} {name!r} is not a valid approver name: use letters, digits and . _ @ + - "
            "(at most 128, not starting with . + - or @)"
        )
    return name


def parse_public(text: str, where: str = "the public key") -> tuple[bytes, str]:
    """``(wire-format blob, comment)`` of an OpenSSH ``ssh-ed25519 BASE64 [COMMENT]`` line
    (KeyringError naming ``where`` for another type or a malformed key)."""
    parts = text.strip().split(None, 2)
    if len(parts) < 2:
        raise KeyringError(f"{where}: expected 'ssh-ed25519 BASE64 [COMMENT]', got {text!r}")
    if parts[0] != KEY_TYPE:
        raise KeyringError(
            f"{where}: key type {parts[0]!r} is not accepted; torpor takes {KEY_TYPE} keys only"
        )
    try:
        blob = base64.b64decode(parts[1].encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise KeyringError(f"{where}: the key is not valid base64") from None
    # The wire format of an Ed25519 key is string "ssh-ed25519" + string of 32 bytes (RFC 8709).
    prefix = struct.pack(">I", len(KEY_TYPE)) + KEY_TYPE.encode() + struct.pack(">I", 32)
    if len(blob) != len(prefix) + 32 or not blob.startswith(prefix):
        raise KeyringError(f"{where}: not an {KEY_TYPE} public key")
    return blob, parts[2].strip() if len(parts) > 2 else ""


# ---------------------------------------------------------------------------------- keyring


@dataclass(frozen=True)
class KeyEntry:
    """One keyring line: ``name`` may sign with the key ``blob`` (OpenSSH wire format) — as
    itself, or, for a delegate, for the people in ``delegate_for``."""

    name: str
    blob: bytes
    comment: str = ""
    delegate_for: tuple[str, ...] = ()

    @property
    def fingerprint(self) -> str:
        return signing.fingerprint(self.blob)

    def may_sign_for(self, person: str) -> bool:
        return person in self.delegate_for or "*" in self.delegate_for

    def line(self) -> str:
        opts = f" delegate-for={','.join(self.delegate_for)}" if self.delegate_for else ""
        tail = f" {self.comment}" if self.comment else ""
        return f"{self.name}{opts} {signing.public_line(self.blob)}{tail}"


@dataclass
class Keyring:
    """The trusted keyring at ``path`` (empty when the file does not exist)."""

    path: Path
    entries: list[KeyEntry] = field(default_factory=list)
    exists: bool = False

    @classmethod
    def load(cls, path: Path) -> Keyring:
        """Parse the file (KeyringError naming ``path:line`` for a malformed line, and one
        naming the fix for a file or folder others can write: :func:`~.filemodes.check_private`)."""
        try:
            text = path.read_text()
            check_private(path, "the keyring")
        except FileNotFoundError:
            return cls(path)
        except OSError as exc:
            raise KeyringError(f"cannot read the keyring {path}: {exc.strerror}") from None
        ring = cls(path, exists=True)
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if line and not line.startswith("#"):
                ring.entries.append(_entry(line, f"{path}:{n}"))
        return ring

    def named(self, name: str) -> list[KeyEntry]:
        return [e for e in self.entries if e.name == name]

    def add(self, entry: KeyEntry) -> bool:
        """Add ``entry`` (False if that name already has that key with those options)."""
        same = [e for e in self.entries if e.name == entry.name and e.blob == entry.blob]
        if entry in same:
            return False
        self.entries = [e for e in self.entries if e not in same] + [entry]
        return True

    def remove(self, name: str, fingerprint: str | None = None) -> list[KeyEntry]:
        """Remove ``name``'s keys (only the one with ``fingerprint`` when given)."""
        gone = [
            e
            for e in self.entries
            if e.name == name and (fingerprint is None or e.fingerprint == fingerprint)
        ]
        self.entries = [e for e in self.entries if e not in gone]
        return gone

    def save(self) -> None:
        """Write the file atomically (a reader sees the old or the new keyring, never half)."""
        self.path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)  # never loose
        text = HEADER + "".join(e.line() + "\n" for e in self.entries)
        fd, tmp = tempfile.mkstemp(prefix=".keyring-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            raise KeyringError(f"cannot write the keyring {self.path}: {exc.strerror}") from None
        self.exists = True


def _entry(line: str, where: str) -> KeyEntry:
    tokens = line.split()
    name = tokens[0]
    check_name(name, f"{where}: name")
    delegate_for: tuple[str, ...] = ()
    i = 1
    while i < len(tokens) and tokens[i] != KEY_TYPE and "=" in tokens[i]:
        opt, _, value = tokens[i].partition("=")
        if opt != "delegate-for":
            raise KeyringError(f"{where}: unknown option {opt!r} (only delegate-for=NAME,...)")
        delegate_for = tuple(v for v in value.split(",") if v)
        for person in delegate_for:
            if person != "*":
                check_name(person, f"{where}: delegate-for")
        i += 1
    blob, comment = parse_public(" ".join(tokens[i:]), where)
    return KeyEntry(name, blob, comment, delegate_for)


# ---------------------------------------------------------------------------------- key pairs


def key_file(config_dir: Path, name: str) -> Path:
    """Where ``torpor keys init --as NAME`` keeps NAME's private key."""
    return config_dir / "keys" / check_name(name)


def generate(config_dir: Path, name: str, *, force: bool = False) -> tuple[Path, str]:
    """Make an Ed25519 key pair for ``name``: the private key in OpenSSH format at
    ``config_dir/keys/NAME`` (mode 0600, folder 0700), the public one beside it as
    ``NAME.pub``. Returns ``(private key path, public key line)``; KeyringError if a key is
    there already (unless ``force``)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = key_file(config_dir, name)
    if path.exists() and not force:
        raise KeyringError(
            f"{path} exists already: {name!r} has a key (its public key is in {path}.pub); "
            "pass --force to replace it"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    line = f"{public.decode()} {name}"
    tmp = path.with_name(f".{name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private)
    os.replace(tmp, path)
    path.with_name(f"{name}.pub").write_text(line + "\n")
    return path, line


class Signer(Protocol):
    """Signs decisions with one key: ``blob`` is its public key (OpenSSH wire format)."""

    blob: bytes

    def sign(self, data: bytes) -> bytes:
        """The 64-byte Ed25519 signature (RFC 8032) of ``data``."""
        ...


class FileSigner:
    """A private key read from a file: OpenSSH or PKCS#8 PEM, Ed25519 only. An encrypted key
    needs ``passphrase`` (or ``$TORPOR_KEY_PASSPHRASE``)."""

    def __init__(self, path: Path, passphrase: bytes | None = None):
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        try:
            data = path.read_bytes()
        except OSError as exc:
            raise KeyringError(f"cannot read the private key {path}: {exc.strerror}") from None
        if passphrase is None and os.environ.get("TORPOR_KEY_PASSPHRASE"):
            passphrase = os.environ["TORPOR_KEY_PASSPHRASE"].encode()
        key: object
        try:
            if b"OPENSSH PRIVATE KEY" in data:
                key = serialization.load_ssh_private_key(data, passphrase)
            else:
                key = serialization.load_pem_private_key(data, passphrase)
        except (ValueError, TypeError) as exc:
            hint = (
                " (it is encrypted: set TORPOR_KEY_PASSPHRASE, or add it to ssh-agent and "
                "sign with --agent)"
                if "password" in str(exc).lower() or "encrypted" in str(exc).lower()
                else ""
            )
            raise KeyringError(
                f"cannot load the private key {path}: {str(exc).splitlines()[0]}{hint}"
            ) from None
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyringError(f"{path} is not an Ed25519 key; torpor signs with Ed25519 only")
        self._key = key
        self.path = path
        self.blob = _wire(key.public_key())

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data)


def _wire(public: object) -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    assert isinstance(public, Ed25519PublicKey)
    line = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return base64.b64decode(line.split()[1])


class AgentSigner:
    """A key held by ``ssh-agent`` (``$SSH_AUTH_SOCK``), chosen among ``wanted`` public keys
    (the signer's keyring entries or ``keys/NAME.pub``). Speaks the agent protocol's
    request-identities and sign-request messages (draft-miller-ssh-agent); the agent signs."""

    _IDENTITIES, _IDENTITIES_ANSWER, _SIGN, _SIGN_RESPONSE = 11, 12, 13, 14

    def __init__(self, wanted: list[bytes], who: str, sock: str | None = None):
        self.sock = sock or os.environ.get("SSH_AUTH_SOCK") or ""
        if not self.sock:
            raise KeyringError("--agent: SSH_AUTH_SOCK is not set (no ssh-agent to sign with)")
        reply = self._ask(bytes([self._IDENTITIES]), self._IDENTITIES_ANSWER)
        (count,) = struct.unpack(">I", reply[:4])
        pos, held = 4, []
        for _ in range(count):
            blob, pos = _string(reply, pos)
            _, pos = _string(reply, pos)
            held.append(blob)
        match = [b for b in held if b in wanted]
        if not match:
            raise KeyringError(
                f"--agent: the ssh-agent at {self.sock} holds none of {who}'s keys "
                f"({', '.join(signing.fingerprint(b) for b in wanted) or 'none known'}); "
                "add it with ssh-add"
            )
        self.blob = match[0]

    def sign(self, data: bytes) -> bytes:
        msg = bytes([self._SIGN]) + _pack(self.blob) + _pack(data) + struct.pack(">I", 0)
        sig, _ = _string(self._ask(msg, self._SIGN_RESPONSE), 0)
        kind, pos = _string(sig, 0)
        raw, _ = _string(sig, pos)
        if kind != KEY_TYPE.encode() or len(raw) != 64:
            raise KeyringError(f"--agent: unexpected signature of type {kind!r}")
        return raw

    def _ask(self, msg: bytes, expect: int) -> bytes:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(30)
                s.connect(self.sock)
                s.sendall(struct.pack(">I", len(msg)) + msg)
                (n,) = struct.unpack(">I", _recv(s, 4))
                body = _recv(s, n)
        except OSError as exc:
            raise KeyringError(f"--agent: cannot talk to ssh-agent at {self.sock}: {exc}") from None
        if not body or body[0] != expect:
            raise KeyringError(f"--agent: ssh-agent at {self.sock} refused the request")
        return body[1:]


def _pack(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def _string(buf: bytes, pos: int) -> tuple[bytes, int]:
    if pos + 4 > len(buf):
        raise KeyringError("--agent: truncated reply from ssh-agent")
    (n,) = struct.unpack(">I", buf[pos : pos + 4])
    if pos + 4 + n > len(buf):
        raise KeyringError("--agent: truncated reply from ssh-agent")
    return buf[pos + 4 : pos + 4 + n], pos + 4 + n


def _recv(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise OSError("the agent closed the connection")
        out += chunk
    return out


def signer_for(
    config_dir: Path,
    keyring: Keyring,
    name: str,
    *,
    key: Path | None = None,
    agent: bool = False,
) -> Signer:
    """How ``name`` signs: the ssh-agent (``agent``: one of ``name``'s keys in ``keyring`` or
    in ``keys/NAME.pub``), the private key file ``key``, or ``config_dir/keys/NAME``.
    KeyringError when there is none, naming the command that makes one."""
    check_name(name)
    if agent:
        wanted = [e.blob for e in keyring.named(name)]
        pub = key_file(config_dir, name).with_name(f"{name}.pub")
        if pub.exists():
            wanted.append(parse_public(pub.read_text(), str(pub))[0])
        return AgentSigner(wanted, name)
    path = key or key_file(config_dir, name)
    if not path.exists():
        if key is not None:
            raise KeyringError(f"no private key at {path} (--key)")
        raise KeyringError(
            f"no private key for {name!r} at {path}: create one with "
            f"`torpor keys init --as {name}` (or sign with --key PATH, or --agent)"
        )
    return FileSigner(path)


# ---------------------------------------------------------------------------------- trust


class Decision(Protocol):
    """What :meth:`Trust.check` reads of a decision (an event payload or its folded record)."""

    @property
    def decision(self) -> str: ...
    @property
    def approver(self) -> str: ...
    @property
    def scheme(self) -> str: ...
    @property
    def signature(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def delegate(self) -> str: ...
    @property
    def decided_at_ms(self) -> int: ...
    @property
    def comment(self) -> str: ...
    @property
    def store(self) -> str: ...
    @property
    def request(self) -> str: ...
    @property
    def edited(self) -> str: ...


class Trust:
    """Verifies signed decisions against the keyring at ``path`` — re-read when the file
    changes, so a removed key is refused at once — and, with ``hmac_key`` (the ``hmac-local``
    mode only), HMAC decisions. Never writes anything."""

    def __init__(self, path: Path, hmac_key: bytes | None = None):
        self.path = path
        self.hmac_key = hmac_key
        self._seen: tuple[int, int, int] | None = None
        self._ring = Keyring(path)

    def keyring(self) -> Keyring:
        try:
            st = self.path.stat()
            seen = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            seen = None
        if seen != self._seen:
            self._ring = Keyring.load(self.path)
            self._seen = seen
        return self._ring

    def check(
        self,
        run_id: str,
        approval_id: str,
        hashes: list[str],
        d: Decision,
        *,
        store: str | None = None,
        request: str | None = None,
    ) -> str | None:
        """None when ``d`` is a valid decision on ``hashes`` of approval ``approval_id`` of run
        ``run_id`` — and, when given, of the store with identity ``store`` and the request with
        nonce ``request`` (what a worker checks: G16, issue 34) — else why not (one line)."""
        why = self._check_signature(run_id, approval_id, hashes, d)
        if why is None and store is not None:
            why = _bound_elsewhere(d, approval_id, store, request)
        return why

    def _check_signature(
        self, run_id: str, approval_id: str, hashes: list[str], d: Decision
    ) -> str | None:
        if d.scheme == "ed25519":
            return self._check_key(run_id, approval_id, hashes, d)
        if d.scheme == "hmac":
            if self.hmac_key is None:
                return (
                    "an HMAC decision (the local single-user mode) is not accepted here: "
                    "TORPOR_APPROVALS is not hmac-local"
                )
            data = signing.hmac_bytes(
                run_id,
                approval_id,
                d.decision,
                d.approver,
                hashes,
                d.decided_at_ms,
                store=d.store,
                request=d.request,
                edited=d.edited,
            )
            if not signing.hmac_verify(self.hmac_key, data, d.signature):
                return "its HMAC signature does not verify with the local shared key"
            return None
        return f"a decision of scheme {d.scheme!r} carries no signature a keyring can check"

    def _check_key(
        self, run_id: str, approval_id: str, hashes: list[str], d: Decision
    ) -> str | None:
        try:
            ring = self.keyring()
        except KeyringError as exc:
            return str(exc)
        signer = d.delegate or d.approver
        if not ring.exists:
            return f"there is no keyring at {self.path} (create one: torpor keys init --as NAME)"
        entries = ring.named(signer)
        if not entries:
            return f"{signer!r} has no key in the keyring {self.path}"
        entry = next((e for e in entries if e.fingerprint == d.key), None)
        if entry is None:
            return (
                f"{signer!r}'s key {d.key or '(none named)'} is not in the keyring {self.path} "
                "(removed, or never added)"
            )
        if d.delegate and not entry.may_sign_for(d.approver):
            return f"delegate {d.delegate!r} may not sign for {d.approver!r} (keyring {self.path})"
        if not d.delegate and entry.delegate_for:
            return f"{signer!r} is a delegate key: it signs only for the people it lists"
        data = signing.decision_bytes(
            run_id,
            approval_id,
            d.decision,
            d.approver,
            hashes,
            d.decided_at_ms,
            delegate=d.delegate,
            key=d.key,
            comment=d.comment,
            store=d.store,
            request=d.request,
            edited=d.edited,
        )
        if not signing.ed25519_verify(entry.blob, data, d.signature):
            return f"the signature does not verify with {signer!r}'s key {d.key}"
        return None


def _bound_elsewhere(d: Decision, approval_id: str, store: str, request: str | None) -> str | None:
    """Why a signed decision is not for this store's request (None: it names them)."""
    if not d.store:
        return (
            "it was signed before decisions named their store and request (version 1 of the "
            "signed bytes): decide again"
        )
    if d.store != store:
        return (
            f"it was signed for store {d.store}, not this store {store} (a decision copied "
            "from another store?)"
        )
    if request is not None and d.request != request:
        return (
            f"it was signed for another request of approval {approval_id!r} (nonce "
            f"{d.request[:12] or 'none'}), not this one ({request[:12] or 'none'})"
        )
    return None
