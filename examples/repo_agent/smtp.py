"""A real SMTP server on loopback (aiosmtpd) whose messages survive process restarts.

The repository agent's notification email goes to this server. Every accepted message is
written to a *maildir* (write to ``tmp/``, fsync, rename into ``new/``) **before** the server
answers ``250``, so a message is either fully stored or absent — never torn — whatever instant
the process dies at. :class:`MailStore` reads the maildir back: that is how the email effect is
reconciled (search for its Message-ID) and how the tests count deliveries across restarts.

The server runs in a daemon thread of the current process on a random free port; call
:func:`ensure_server` wherever an email may be sent or reconciled (it is idempotent per maildir).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from email.parser import BytesHeaderParser
from email.policy import default as default_policy
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP, Envelope, Session


@dataclass(frozen=True)
class StoredMessage:
    """One persisted message: its file, Message-ID, subject and envelope."""

    path: Path
    message_id: str
    subject: str
    mail_from: str
    rcpt_to: tuple[str, ...]


class MailStore:
    """A maildir (``tmp/``, ``new/``, ``cur/``) of received messages."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        for sub in ("tmp", "new", "cur"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def add(self, data: bytes, *, mail_from: str, rcpt_to: list[str]) -> Path:
        """Persist one message atomically (tmp + fsync + rename + fsync of the directory)."""
        name = f"{time.time_ns()}.{os.getpid()}_{uuid.uuid4().hex[:12]}.torpor"
        envelope = (
            f"X-Torpor-Envelope-From: {mail_from}\r\nX-Torpor-Envelope-To: {', '.join(rcpt_to)}\r\n"
        ).encode()
        tmp = self.root / "tmp" / name
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, envelope + data)
            os.fsync(fd)
        finally:
            os.close(fd)
        final = self.root / "new" / name
        os.rename(tmp, final)
        dfd = os.open(self.root / "new", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return final

    def messages(self) -> Iterator[StoredMessage]:
        """Every delivered message (``new/`` and ``cur/``; never the half-written ``tmp/``)."""
        parser = BytesHeaderParser(policy=default_policy)
        for sub in ("new", "cur"):
            for path in sorted((self.root / sub).iterdir()):
                with path.open("rb") as f:
                    msg = parser.parse(f)
                yield StoredMessage(
                    path=path,
                    message_id=str(msg.get("Message-ID", "")).strip(),
                    subject=str(msg.get("Subject", "")),
                    mail_from=str(msg.get("X-Torpor-Envelope-From", "")),
                    rcpt_to=tuple(
                        a.strip()
                        for a in str(msg.get("X-Torpor-Envelope-To", "")).split(",")
                        if a.strip()
                    ),
                )

    def find(self, message_id: str) -> list[StoredMessage]:
        """Messages carrying exactly this Message-ID."""
        return [m for m in self.messages() if m.message_id == message_id]


class _MaildirHandler:
    """aiosmtpd handler: store the message, then (only then) answer 250."""

    def __init__(self, store: MailStore):
        self.store = store

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        data = envelope.original_content or envelope.content
        raw = data.encode() if isinstance(data, str) else bytes(data or b"")
        self.store.add(raw, mail_from=str(envelope.mail_from), rcpt_to=list(envelope.rcpt_tos))
        return "250 Message accepted for delivery"


class SMTPServer:
    """An aiosmtpd server on ``host`` (loopback) and a random free port, in a daemon thread."""

    def __init__(self, maildir: Path | str, host: str = "127.0.0.1", port: int = 0):
        self.store = MailStore(maildir)
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> SMTPServer:
        loop = asyncio.new_event_loop()
        handler = _MaildirHandler(self.store)

        def factory() -> SMTP:
            # A fixed hostname: aiosmtpd would otherwise resolve the FQDN (slow, needs DNS).
            return SMTP(handler, hostname="repo-agent.torpor.localhost", ident="torpor-smtp")

        server = loop.run_until_complete(loop.create_server(factory, self.host, self.port))
        self.port = int(server.sockets[0].getsockname()[1])
        self._loop, self._server = loop, server
        self._thread = threading.Thread(
            target=loop.run_forever, daemon=True, name=f"smtp-{self.port}"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return

        async def _close() -> None:
            server.close()
            await server.wait_closed()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(_close(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._loop = self._server = self._thread = None

    def __enter__(self) -> SMTPServer:
        return self.start() if self._loop is None else self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


_SERVERS: dict[str, SMTPServer] = {}
_LOCK = threading.Lock()


def ensure_server(maildir: Path | str) -> SMTPServer:
    """The running server for ``maildir`` in this process, started on first use."""
    key = str(Path(maildir).resolve())
    with _LOCK:
        srv = _SERVERS.get(key)
        if srv is None:
            srv = _SERVERS[key] = SMTPServer(key).start()
        return srv


def stop_servers() -> None:
    """Stop every server this process started."""
    with _LOCK:
        for srv in _SERVERS.values():
            srv.stop()
        _SERVERS.clear()
