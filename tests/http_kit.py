"""A real HTTP service on loopback for the effect tests (tests/test_effect_timeouts.py): it
counts every charge it receives, answers whether a key was charged (what ``reconcile`` asks),
and follows a per-key *script* that makes the client of an attempt hang before it sends, or
fail — so a test can make the first attempt of an effect hang past its timeout and count, at
the service, how many calls really arrived.

Kept small and free of test-only imports: an effect that runs in a child process imports this
module there.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torpor


class Service:
    """The service's memory: charges received (in order) and the scripts per key."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.charges: list[dict[str, Any]] = []
        self.scripts: dict[str, list[dict[str, Any]]] = {}
        self.released: dict[str, threading.Event] = {}
        self.url = ""

    def script(self, key: str, *steps: dict[str, Any]) -> None:
        """What the client's next attempts for ``key`` do before sending: ``{"hang_s": s}``
        (stuck before the request leaves), ``{"fail": True}`` (give up without sending),
        ``{"delay_s": s}`` (the service records the charge, then answers late), ``{"hold":
        True}`` (stuck before sending until :meth:`release`: a hang no load can shorten)."""
        with self.lock:
            self.scripts[key] = list(steps)

    def release(self, key: str) -> None:
        """Let the attempts of ``key`` held by a ``{"hold": True}`` step go on and send."""
        self._released(key).set()

    def _released(self, key: str) -> threading.Event:
        with self.lock:
            return self.released.setdefault(key, threading.Event())

    def count(self, key: str | None = None) -> int:
        with self.lock:
            return sum(1 for c in self.charges if key is None or c["key"] == key)


#: A hang guard only: a held attempt gives up waiting for its release after this long.
HOLD_GUARD_S = 300.0


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        svc = self.server.service
        url = urllib.parse.urlparse(self.path)
        key = urllib.parse.parse_qs(url.query).get("key", [""])[0]
        if url.path == "/script":  # the client asks what its attempt is to do
            with svc.lock:
                steps = svc.scripts.get(key) or []
                step = steps.pop(0) if steps else {}
            self._reply(200, step)
        elif url.path == "/charges":  # reconcile asks whether the key was charged
            with svc.lock:
                found = [c for c in svc.charges if c["key"] == key]
            self._reply(200, {"charges": found})
        elif url.path == "/hold":  # a held attempt waits here until the test releases it
            released = svc._released(key).wait(HOLD_GUARD_S)
            self._reply(200, {"released": released})
        else:
            self._reply(404, {"error": url.path})

    def do_POST(self) -> None:
        svc = self.server.service
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        with svc.lock:
            n = len(svc.charges) + 1
            svc.charges.append({"key": body["key"], "amount": body["amount"], "n": n})
        time.sleep(float(body.get("delay_s", 0)))
        self._reply(200, {"charge": n, "key": body["key"]})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    service: Service


@contextmanager
def running() -> Iterator[Service]:
    """A :class:`Service` listening on 127.0.0.1 (a free port) for the duration."""
    svc = Service()
    server = _Server(("127.0.0.1", 0), _Handler)
    server.service = svc
    svc.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield svc
    finally:
        server.shutdown()
        server.server_close()


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def charge(url: str, amount: int, idempotency_key: str) -> dict[str, Any]:
    """The effect: follow the service's script for this attempt, then POST the charge."""
    step = _get(f"{url}/script?key={urllib.parse.quote(idempotency_key)}")
    time.sleep(float(step.get("hang_s", 0)))
    if step.get("hold"):
        q = urllib.parse.quote(idempotency_key)
        with urllib.request.urlopen(f"{url}/hold?key={q}", timeout=HOLD_GUARD_S + 10) as r:
            r.read()
    if step.get("fail"):
        raise ConnectionError("the service refused the connection (nothing sent)")
    req = urllib.request.Request(
        f"{url}/charge",
        data=json.dumps(
            {"key": idempotency_key, "amount": amount, "delay_s": step.get("delay_s", 0)}
        ).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return dict(json.loads(r.read()))


def find_charge(call: torpor.EffectCall) -> torpor.Applied | torpor.Absent:
    """Reconcile: ask the service whether the key was charged (the URL is the first arg)."""
    url = call.args[0]
    found = _get(f"{url}/charges?key={urllib.parse.quote(call.idempotency_key)}")["charges"]
    return (
        torpor.Applied({"charge": found[0]["n"], "key": found[0]["key"]})
        if found
        else torpor.Absent()
    )


async def acharge(url: str, amount: int, idempotency_key: str) -> dict[str, Any]:
    """Async twin of :func:`charge`: the hang is an ``await`` (cancellable)."""
    import asyncio

    step = await asyncio.to_thread(_get, f"{url}/script?key={urllib.parse.quote(idempotency_key)}")
    await asyncio.sleep(float(step.get("hang_s", 0)))
    req = urllib.request.Request(
        f"{url}/charge",
        data=json.dumps({"key": idempotency_key, "amount": amount}).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return dict(json.loads(r.read()))
