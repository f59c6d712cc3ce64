"""Logged-in sessions, their CSRF tokens, and the login throttle (no web framework here).

A session lives in the console's memory only: the browser holds a random 256-bit token in an
``HttpOnly``, ``SameSite=Strict`` cookie; the server keeps the person's name and the session's
CSRF token under the token's sha256 (a memory dump does not yield usable cookies). Restarting
the console logs everyone out. A session ends after :attr:`Sessions.idle_s` without a request,
after :attr:`Sessions.max_age_s` in all, or at logout.

Every state-changing request must carry the session's CSRF token (a form field or the
``X-CSRF-Token`` header htmx sends), compared in constant time (the synchronizer-token pattern;
the cookie's ``SameSite=Strict`` and an ``Origin`` check are further layers, not the defence).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class Session:
    """One logged-in person: ``user`` is the authenticated name."""

    user: str
    csrf: str
    created_at: float
    seen_at: float
    #: Messages for the next page this person sees: ``(kind, text)``, kind ok | error.
    flash: list[tuple[str, str]] = field(default_factory=list)

    def pop_flash(self) -> list[tuple[str, str]]:
        out, self.flash = self.flash, []
        return out

    def csrf_ok(self, given: str | None) -> bool:
        """Whether ``given`` is this session's CSRF token (constant time)."""
        return bool(given) and hmac.compare_digest(self.csrf.encode(), (given or "").encode())


@dataclass
class Sessions:
    """The console's sessions, by the sha256 of their cookie token. Thread-safe."""

    idle_s: float = 8 * 3600
    max_age_s: float = 24 * 3600
    clock: Callable[[], float] = time.monotonic
    _by_digest: dict[str, Session] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def create(self, user: str) -> tuple[str, Session]:
        """A new session for ``user``: ``(cookie token, session)``."""
        token = secrets.token_urlsafe(32)
        now = self.clock()
        s = Session(user=user, csrf=secrets.token_urlsafe(32), created_at=now, seen_at=now)
        with self._lock:
            self._by_digest[_digest(token)] = s
        return token, s

    def get(self, token: str | None) -> Session | None:
        """The live session of a cookie token (None: absent, unknown or expired)."""
        if not token:
            return None
        key = _digest(token)
        now = self.clock()
        with self._lock:
            s = self._by_digest.get(key)
            if s is None:
                return None
            if now - s.seen_at > self.idle_s or now - s.created_at > self.max_age_s:
                del self._by_digest[key]
                return None
            s.seen_at = now
            return s

    def drop(self, token: str | None) -> None:
        if token:
            with self._lock:
                self._by_digest.pop(_digest(token), None)


@dataclass
class Throttle:
    """Refuses logins for a key (a name, an address) after ``limit`` failures within
    ``window_s``, until the window passes: slows password guessing to a crawl."""

    limit: int = 5
    window_s: float = 300.0
    clock: Callable[[], float] = time.monotonic
    _failures: dict[str, list[float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def blocked(self, key: str) -> bool:
        now = self.clock()
        with self._lock:
            recent = [t for t in self._failures.get(key, []) if now - t < self.window_s]
            if recent:
                self._failures[key] = recent
            else:
                self._failures.pop(key, None)
            return len(recent) >= self.limit

    def failed(self, key: str) -> None:
        with self._lock:
            self._failures.setdefault(key, []).append(self.clock())

    def succeeded(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)


__all__ = ["Session", "Sessions", "Throttle"]
