"""A TCP proxy in front of PostgreSQL that drops connections in the middle of a commit.

It reads the client side of the wire protocol just enough to see statements (simple ``Q``
queries; ``P``arse/``B``ind of the extended protocol, remembering prepared statement names) and
recognizes the ``COMMIT`` of a transaction that inserted into a chosen table — or, for a
statement sent outside ``BEGIN`` … ``COMMIT`` (autocommit), the ``S``ync that commits its
implicit transaction. When the fault plan says so, that commit is broken in one of two ways —
the two sides of an ambiguous commit:

- ``before``: the ``COMMIT`` is withheld and the backend is killed with
  ``pg_terminate_backend``: the transaction is rolled back, the client sees the connection die.
- ``after``: the ``COMMIT`` is forwarded, the server commits and answers; the answer is
  swallowed, the backend is killed with ``pg_terminate_backend`` and the client's connection
  closed: the transaction *landed*, the client sees the connection die exactly as before.

The client cannot tell the two apart from the error; only reading back can.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg

_SPECIAL_CODES = {80877103, 80877104, 80877102}  # SSLRequest, GSSENCRequest, CancelRequest


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("eof")
        buf += chunk
    return buf


class CommitDropProxy:
    """Listen on 127.0.0.1:<port>, forward to the server of ``url``.

    ``plan(n)`` is called for the n-th (from 1) commit of a transaction whose statements
    mention ``table_marker`` and returns ``"pass"``, ``"before"`` or ``"after"``.
    """

    def __init__(
        self, url: str, plan: Callable[[int], str], table_marker: str = "INSERT INTO events"
    ):
        self.url = url
        parts = urlsplit(url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        # A server reached through a Unix socket (``?host=/dir``, as pgserver's URLs are).
        sock_dir = dict(parse_qsl(parts.query)).get("host", "")
        self.upstream_unix = (
            f"{sock_dir}/.s.PGSQL.{parts.port or 5432}" if sock_dir.startswith("/") else None
        )
        self.plan = plan
        self.marker = table_marker
        self.faults: Counter[str] = Counter()
        self.commits = 0
        self._lock = threading.Lock()
        self._admin = psycopg.connect(url, autocommit=True)
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.port = self._srv.getsockname()[1]
        self._closing = False
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="pgproxy").start()

    def proxied_url(self) -> str:
        """``url`` through the proxy (TLS and GSS encryption off: the proxy reads the bytes)."""
        p = urlsplit(self.url)
        netloc = p.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self.port}"
        netloc_s = f"{netloc[0]}@{host}" if len(netloc) == 2 else host
        kept = [(k, v) for k, v in parse_qsl(p.query) if k != "host"]  # the proxy is the host
        q = urlencode([*kept, ("sslmode", "disable"), ("gssencmode", "disable")])
        return urlunsplit((p.scheme, netloc_s, p.path, q, p.fragment))

    def close(self) -> None:
        self._closing = True
        self._srv.close()
        for s in list(self._conns):
            _close(s)
        self._admin.close()

    # ------------------------------------------------------------------ plumbing

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._srv.accept()
            except OSError:
                return
            try:
                if self.upstream_unix is not None:
                    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    upstream.connect(self.upstream_unix)
                else:
                    upstream = socket.create_connection(self.upstream)
            except OSError:
                _close(client)
                continue
            self._conns += [client, upstream]
            conn = _Conn(self, client, upstream)
            threading.Thread(target=conn.client_to_server, daemon=True).start()
            threading.Thread(target=conn.server_to_client, daemon=True).start()

    def _decide(self) -> str:
        with self._lock:
            self.commits += 1
            action = self.plan(self.commits)
            self.faults[action] += 1
            return action

    def terminate(self, conn: _Conn) -> None:
        """``pg_terminate_backend`` on the backend serving ``conn`` (its pid, from the
        server's BackendKeyData at startup)."""
        with self._lock:
            if conn.backend_pid is not None:
                self._admin.execute("SELECT pg_terminate_backend(%s)", (conn.backend_pid,))


class _Conn:
    def __init__(self, proxy: CommitDropProxy, client: socket.socket, upstream: socket.socket):
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.stmts: dict[str, str] = {}
        self.tx: list[str] = []
        #: Inside an explicit BEGIN ... COMMIT; outside it, each extended-protocol statement
        #: runs in an implicit transaction that commits when its Sync is processed.
        self.in_tx = False
        self.swallow = threading.Event()
        #: The server process of this connection (BackendKeyData), to terminate it.
        self.backend_pid: int | None = None

    def client_to_server(self) -> None:
        try:
            # Startup: untyped messages (SSL/GSS requests answered by one byte, then startup).
            while True:
                head = _recv_exact(self.client, 8)
                length, code = struct.unpack("!ii", head)
                body = _recv_exact(self.client, length - 8)
                self.upstream.sendall(head + body)
                if code not in _SPECIAL_CODES:
                    break
            while True:
                head = _recv_exact(self.client, 5)
                kind = head[:1]
                (length,) = struct.unpack("!i", head[1:])
                body = _recv_exact(self.client, length - 4)
                if kind == b"Q" and self._on_query(body[:-1].decode(errors="replace")):
                    continue
                if kind == b"P":
                    name, rest = body.split(b"\0", 1)
                    text = rest.split(b"\0", 1)[0].decode(errors="replace")
                    self.stmts[name.decode()] = text
                    self.tx.append(text)
                elif kind == b"B":
                    stmt = body.split(b"\0", 2)[1].decode()
                    self.tx.append(self.stmts.get(stmt, ""))
                elif kind == b"S" and not self.in_tx and self._on_commit():
                    continue  # an autocommit statement's commit, dropped before the server
                self.upstream.sendall(head + body)
        except (OSError, ConnectionError):
            pass
        finally:
            _close(self.upstream)

    def _on_query(self, text: str) -> bool:
        """Handle a simple query; True when the proxy consumed it (the commit was dropped)."""
        verb = text.strip().split(None, 1)[0].upper() if text.strip() else ""
        if verb == "BEGIN":
            self.tx = []
            self.in_tx = True
            return False
        if verb == "ROLLBACK":
            self.tx = []
            self.in_tx = False
            return False
        if verb != "COMMIT":
            self.tx.append(text)
            return False
        self.in_tx = False
        return self._on_commit()

    def _on_commit(self) -> bool:
        """A commit point (COMMIT, or the Sync of an autocommit statement) of the statements
        in ``tx``; True when the proxy consumed it (the commit was dropped)."""
        touched = any(self.proxy.marker in t for t in self.tx)
        self.tx = []
        if not touched:
            return False
        action = self.proxy._decide()
        if action == "before":
            self.proxy.terminate(self)  # rolls the open transaction back
            return True
        if action == "after":
            self.swallow.set()  # the server's answer will be dropped (see server_to_client)
        return False

    def server_to_client(self) -> None:
        try:
            # Startup answers, message by message until ReadyForQuery: learn the backend's pid
            # (a Unix-socket connection has no client port to find it by).
            while True:
                head = _recv_exact(self.upstream, 5)
                (length,) = struct.unpack("!i", head[1:])
                body = _recv_exact(self.upstream, length - 4)
                if head[:1] == b"K":
                    self.backend_pid = struct.unpack("!i", body[:4])[0]
                self.client.sendall(head + body)
                if head[:1] in (b"Z", b"E"):
                    break
            while True:
                data = self.upstream.recv(65536)
                if not data:
                    break
                if self.swallow.is_set():
                    # The commit's answer: it landed. Kill the backend, never tell the client.
                    self.proxy.terminate(self)
                    break
                self.client.sendall(data)
        except (OSError, ConnectionError):
            pass
        finally:
            _close(self.client)
            _close(self.upstream)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()
