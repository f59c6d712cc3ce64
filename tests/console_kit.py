"""A real console for the tests: ``torpor console`` in a subprocess on a loopback port, with its
own store, users file, delegate key and keyring; and a small HTTP client with cookies.

One console serves a whole test module (starting one costs about a second); each test makes
runs with ids of its own. Tests point their own process at the console's store and keyring with
:meth:`ConsoleEnv.use` (after the autouse ``torpor_home`` fixture isolated them).

Also a pytest plugin (``pytest_plugins`` in ``conftest.py``): the fixtures ``console_env`` (the
module's console) and ``console`` (that console, with this test process pointed at it), so test
files ask for them instead of defining them (importing fixtures trips ruff F811).
"""

from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import torpor
from torpor.config import Settings
from torpor.console.users import Users
from torpor.keys import generate

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "correct horse battery staple"
DELEGATE = "console@ops"
#: Debian's chromium: the browser tests never use a browser build Playwright downloads.
CHROMIUM = os.environ.get("TORPOR_CHROMIUM", "/usr/bin/chromium")
#: Where the browser tests save screenshots of the main pages (gitignored; see the README).
SCREENSHOTS = ROOT / "tests" / "artifacts" / "console"


@dataclass
class ConsoleEnv:
    root: Path
    url: str
    proc: subprocess.Popen[str]

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def config(self) -> Path:
        return self.root / "config"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.home}/torpor.db"

    @property
    def audit(self) -> Path:
        return self.root / "audit.jsonl"

    def env(self) -> dict[str, str]:
        """The environment of the console and of every process a test starts against it."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("TORPOR_") or k == "TORPOR_TEST_DATABASE_URL"
        }
        env.update(
            TORPOR_HOME=str(self.home),
            TORPOR_CONFIG_DIR=str(self.config),
            TORPOR_KEYRING=str(self.config / "keyring"),
            TORPOR_SIGNING_KEY="test-signing-key",
            PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "src"), str(ROOT / "tests")]),
            PYTHONUNBUFFERED="1",
        )
        return env

    def use(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Point this test process at the console's store, keys and keyring."""
        for k, v in self.env().items():
            if k.startswith("TORPOR_"):
                monkeypatch.setenv(k, v)

    def runtime(self) -> torpor.Runtime:
        return torpor.Runtime(settings=Settings.from_env(self.db_url))

    def client(self) -> torpor.Client:
        return torpor.Client(settings=Settings.from_env(self.db_url))


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    out: list[str] = []
    t = threading.Thread(target=lambda: out.append(proc.stdout.readline() if proc.stdout else ""))
    t.start()
    t.join(timeout)
    return out[0] if out else ""


@contextmanager
def running_console(
    root: Path, *, users: tuple[str, ...] = ("alice", "bob", "carol", "dave")
) -> Iterator[ConsoleEnv]:
    """Start ``torpor console`` for ``users`` (password :data:`PASSWORD`), signing decisions
    with the delegate key :data:`DELEGATE`, which the keyring lets sign for alice and bob."""
    config = root / "config"
    (config / "keys").mkdir(parents=True, mode=0o700)
    _, public = generate(config, DELEGATE)
    (config / "keyring").write_text(f"{DELEGATE} delegate-for=alice,bob {public}\n")
    table = Users(config / "console-users", {})
    for name in users:
        table = table.with_user(name, PASSWORD)
    table.save()
    env = ConsoleEnv(root, "", None)  # type: ignore[arg-type]
    cmd = [sys.executable, "-m", "torpor.cli", "console", "--port", "0", "--poll", "1"]
    cmd += ["--delegate", DELEGATE, "--audit-log", str(env.audit)]
    proc = subprocess.Popen(
        cmd, cwd=root, env=env.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = _read_line(proc, 60)
        m = re.search(r"on (http://\S+/)", line)
        if m is None:
            proc.kill()
            raise AssertionError(f"the console did not start: {line!r} {proc.stderr.read()!r}")
        env.url, env.proc = m.group(1).rstrip("/"), proc
        yield env
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Http:
    """A plain HTTP client with cookies that follows no redirect (tests look at them)."""

    def __init__(self, base: str):
        parts = urllib.parse.urlsplit(base)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.cookies: dict[str, str] = {}

    def request(
        self,
        method: str,
        path: str,
        form: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], str]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        h = {"Host": f"{self.host}:{self.port}", **(headers or {})}
        if self.cookies:
            h["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form)
            h["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=body, headers=h)
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
        for k, v in resp.getheaders():
            if k.lower() == "set-cookie":
                name, _, rest = v.partition("=")
                value = rest.split(";")[0].strip('"')
                if "max-age=0" in v.lower() or not value:
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = value
        headers_out = {k.lower(): v for k, v in resp.getheaders()}
        conn.close()
        return resp.status, headers_out, text

    def get(self, path: str, **kw: Any) -> tuple[int, dict[str, str], str]:
        return self.request("GET", path, **kw)

    def post(self, path: str, form: dict[str, str], **kw: Any) -> tuple[int, dict[str, str], str]:
        return self.request("POST", path, form=form, **kw)

    def login(self, user: str = "alice", password: str = PASSWORD) -> int:
        _, _, page = self.get("/login")
        token = csrf_of(page)
        status, _, _ = self.post("/login", {"csrf": token, "user": user, "password": password})
        return status


def csrf_of(page: str) -> str:
    """The CSRF token of the first form on a page."""
    m = re.search(r'name="csrf" value="([^"]+)"', page)
    assert m is not None, page[:2000]
    return m.group(1)


def path_of(run_id: str) -> str:
    return "/runs/" + urllib.parse.quote(run_id, safe="")


@pytest.fixture(scope="module")
def console_env(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleEnv]:
    """One console for the whole test module (its folder named after the module)."""
    name = request.module.__name__.rpartition(".")[2].removeprefix("test_")
    with running_console(tmp_path_factory.mktemp(name.replace("_", "-"))) as env:
        yield env


@pytest.fixture
def console(
    console_env: ConsoleEnv, torpor_home: Path, monkeypatch: pytest.MonkeyPatch
) -> ConsoleEnv:
    """The module's console, with this test process pointed at its store, keys and keyring."""
    console_env.use(monkeypatch)
    return console_env
