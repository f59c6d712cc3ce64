"""The host's end of the guest agent's channel: a QEMU virtio-serial port on a unix socket.

Framing (the guest's side is ``guest/agent.sh``): a request is one header line, then the raw
bytes it announces; a reply is a line ``R <rid> <kind> <fields...>`` and the raw bytes its
fields announce. ``rid`` is random per request: the host skips everything before the line that
carries it, so a reply meant for a host that died (the guest finished a command after its
host was killed) is never taken for this one's, and no command can forge a reply — its output
was written before the rid existed.
"""

from __future__ import annotations

import base64
import secrets
import socket
import time
from pathlib import Path

from ..errors import SandboxGoneError


def b64(value: str | bytes) -> str:
    raw = value.encode() if isinstance(value, str) else value
    return base64.b64encode(raw).decode() or "-"


class Channel:
    """One connection to a guest agent. Methods raise SandboxGoneError when the socket closes
    or a deadline passes (the caller kills the VM)."""

    def __init__(self, path: Path, connect_timeout_s: float):
        deadline = time.monotonic() + connect_timeout_s
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(path))
                break
            except OSError as exc:
                sock.close()
                if time.monotonic() > deadline:
                    raise SandboxGoneError(f"agent socket {path}: {exc}") from None
                time.sleep(0.02)
        self._sock = sock
        self._buf = bytearray()

    def close(self) -> None:
        self._sock.close()

    def request(
        self, header: str, payload: bytes = b"", *, deadline: float
    ) -> tuple[str, list[str]]:
        """Send ``VERB rid header-rest`` + payload; return (kind, fields) of the reply. ``header``
        is the verb and its tokens with ``{rid}`` where the rid goes."""
        rid = secrets.token_hex(8)
        verb, _, rest = header.partition(" ")
        line = f"{verb} {rid} {rest}".rstrip() + "\n"
        self._send(line.encode() + payload, deadline)
        marker = f"R {rid} ".encode()
        while True:
            at = self._buf.find(marker)
            if at != -1 and (at == 0 or self._buf[at - 1 : at] == b"\n"):
                end = self._buf.find(b"\n", at)
                if end != -1:
                    reply = self._buf[at + len(marker) : end].decode()
                    del self._buf[: end + 1]
                    kind, *fields = reply.split(" ")
                    return kind, fields
            self._fill(deadline)

    def read_exact(self, n: int, *, deadline: float) -> bytes:
        while len(self._buf) < n:
            self._fill(deadline)
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _send(self, data: bytes, deadline: float) -> None:
        self._sock.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            self._sock.sendall(data)
        except (TimeoutError, OSError) as exc:
            raise SandboxGoneError(f"agent channel: {type(exc).__name__}: {exc}") from None

    def _fill(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SandboxGoneError("agent did not answer in time")
        self._sock.settimeout(left)
        try:
            chunk = self._sock.recv(1 << 16)
        except TimeoutError:
            raise SandboxGoneError("agent did not answer in time") from None
        except OSError as exc:
            raise SandboxGoneError(f"agent channel: {exc}") from None
        if not chunk:
            raise SandboxGoneError("agent channel closed (the VM stopped)")
        self._buf += chunk
