"""The console's security and actions over plain HTTP, against a real ``torpor console`` process
(the browser tests drive the same pages in Chromium): no anonymous access, CSRF and origin
checks, login throttling, security headers, downloads that cannot render, and every action
recorded with the person who took it. Also the pieces under it: the users file, the store's
counts and storage figures (both backends), the diff view."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import time
from pathlib import Path

import pytest

import console_flows  # noqa: F401  (registers the workflows)
import torpor
from console_kit import PASSWORD, ConsoleEnv, Http, csrf_of, path_of
from torpor.cli import main
from torpor.config import Settings
from torpor.console import routes
from torpor.console.users import Users
from torpor.console.views import looks_like_diff, parse_diff
from torpor.errors import InboxError, KeyringError, UsersFileError

DIFF = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old\n+new\n"


def _ship(env: ConsoleEnv, run_id: str, **inp: str) -> None:
    with env.runtime() as rt:
        res = rt.run("console.ship", {"diff": DIFF, **inp}, run_id=run_id)
    assert res.status == "waiting", res


def _aid(env: ConsoleEnv, run_id: str) -> tuple[str, list[str]]:
    with env.client() as c:
        ((aid, hashes),) = c.pending_approvals(run_id).items()
    return aid, hashes


def _inbox(env: ConsoleEnv, run_id: str) -> list[str]:
    with env.client() as c:
        return [m.kind for m in c.inbox(run_id)]


# ------------------------------------------------------------------------ pieces


def test_users_file_hashes_verifies_and_refuses_bad_lines(
    tmp_path: Path, torpor_home: Path
) -> None:
    path = tmp_path / "cfg" / "users"
    Users(path, {}).with_user("alice", PASSWORD).save()
    assert path.stat().st_mode & 0o777 == 0o600
    text = path.read_text()
    assert PASSWORD not in text and "alice scrypt$15$8$1$" in text
    users = Users.load(path)
    assert users.verify("alice", PASSWORD)
    assert not users.verify("alice", PASSWORD + "!")
    assert not users.verify("mallory", PASSWORD)  # unknown: refused, at the same cost
    with pytest.raises(UsersFileError, match="at least 10"):
        users.with_user("bob", "short")
    with pytest.raises(UsersFileError, match="not a valid approver name"):
        users.with_user("<script>", PASSWORD)
    path.write_text(text + "bob plaintext-password\n")
    with pytest.raises(UsersFileError, match=r"users:4: not a password hash"):
        Users.load(path)
    with pytest.raises(UsersFileError, match="no console users file"):
        Users.load(tmp_path / "none")
    # Whoever can write TORPOR_HOME could log in as anyone: a users file there is refused.
    with pytest.raises(KeyringError, match="inside TORPOR_HOME"):
        Settings.from_env().console_users_path(torpor_home / "users")


def test_add_user_and_a_console_without_users_refuses_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    users = tmp_path / "cfg" / "users"

    def cli(*args: str) -> int:
        with pytest.raises(SystemExit) as done:
            main(["console", "--users", str(users), *args])
        return int(done.value.code or 0)

    assert cli() == 1
    assert "no console users file" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.StringIO(PASSWORD + "\n"))
    assert cli("--add-user", "bob", "--password-stdin") == 0
    assert "bob may log in" in capsys.readouterr().out
    assert Users.load(users).verify("bob", PASSWORD)
    # A delegate whose key does not exist is refused before anything is served.
    assert cli("--delegate", "nobody@ops") == 1
    assert "no private key for the console's delegate 'nobody@ops'" in capsys.readouterr().err


def test_store_counts_filters_and_storage(store_url: str) -> None:
    with torpor.Runtime(store_url) as rt:
        rt.run("console.ship", {"diff": DIFF}, run_id="s-1")
        rt.run("console.gate", None, run_id="s-2")
        rt.run("console.park", None, run_id="s-3")
        client = torpor.Client(rt.store)
        counts = {(c.status, c.outcome, c.attention): c.count for c in client.counts()}
        assert counts == {("waiting", None, False): 2, ("finished", "blocked", False): 1}
        assert [r.run_id for r in client.runs(workflow="console.gate")] == ["s-2"]
        assert client.runs(attention=True) == []
        assert len(client.runs(attention=False)) == 3
        st = client.storage("s-1")
        assert st.events == client.get("s-1").last_seq
        assert st.history_bytes > 100 and st.checkpoint_bytes > 0
        client.signal("s-2", "go", {"x": 1})
        st2 = client.storage("s-2")
        assert st2.inbox_messages == 1 and st2.inbox_bytes > 0


def test_diff_view_cuts_files_and_lines() -> None:
    text = (
        "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n ctx\n-old\n+new\n"
        "--- a/b.py\n+++ b/b.py\n@@ -1 +1,2 @@\n-x\n+y\n+z\n"
    )
    files = parse_diff(text)
    assert [(f.new, f.added, f.removed) for f in files] == [("b/a.py", 1, 1), ("b/b.py", 2, 1)]
    assert [line.kind for line in files[0].lines] == [
        "file", "file", "file", "hunk", "ctx", "del", "add"
    ]  # fmt: skip
    assert looks_like_diff("patch", "application/octet-stream", text)
    assert not looks_like_diff("notes", "text/plain", "just text\n+++ not a diff")


# ------------------------------------------------------------------------ security


@pytest.mark.proc
def test_no_anonymous_access(console: ConsoleEnv) -> None:
    _ship(console, "anon-1")
    http = Http(console.url)
    status, headers, _ = http.get(path_of("anon-1"))
    assert status == 303 and headers["location"] == "/login?next=%2Fruns%2Fanon-1"
    status, headers, _ = http.get("/runs-live", headers={"HX-Request": "true"})
    assert status == 401 and headers["hx-redirect"] == "/login"
    aid, hashes = _aid(console, "anon-1")
    form = {"approval_id": aid, "hashes": ",".join(hashes), "csrf": "x", "name": "go"}
    for path, _ in routes.ACTIONS:
        status, _, body = http.post(path.replace("{run_id}", "anon-1"), form)
        assert status == 401 and "not logged in" in body, path
    assert _inbox(console, "anon-1") == []


@pytest.mark.proc  # the console fixture is a server process
def test_wrong_passwords_are_throttled(console: ConsoleEnv) -> None:
    http = Http(console.url)
    for _ in range(5):
        assert http.login("dave", "wrong password!") == 401
    assert http.login("dave", PASSWORD) == 429  # even the right one, for a while
    assert Http(console.url).login("alice") == 303  # another person is not affected


@pytest.mark.proc  # the console fixture is a server process
def test_csrf_token_and_origin_are_checked(console: ConsoleEnv) -> None:
    _ship(console, "csrf-1")
    aid, hashes = _aid(console, "csrf-1")
    http = Http(console.url)
    assert http.login() == 303
    status, _, page = http.get(path_of("csrf-1") + "/approval?id=" + aid)
    assert status == 200 and f"sha256:{hashes[0]}" in page
    token = csrf_of(page)
    form = {"approval_id": aid, "hashes": ",".join(hashes)}
    url = path_of("csrf-1") + "/approve"
    for bad in ({}, {"csrf": ""}, {"csrf": token[:-2] + "xx"}):
        status, _, body = http.post(url, {**form, **bad})
        assert status == 403 and "no valid CSRF token" in body, bad
    status, _, body = http.post(
        url, {**form, "csrf": token}, headers={"Origin": "http://evil.example"}
    )
    assert status == 403 and "another site" in body
    assert _inbox(console, "csrf-1") == []
    status, headers, _ = http.post(url, {**form, "csrf": token})
    assert status == 303 and headers["location"] == path_of("csrf-1")
    assert _inbox(console, "csrf-1") == ["decision"]
    # The login form has its own token: a login posted from elsewhere is refused.
    status, _, body = Http(console.url).post("/login", {"user": "alice", "password": PASSWORD})
    assert status == 403 and "CSRF" in body


@pytest.mark.proc  # the console fixture is a server process
def test_headers_hosts_and_downloads(console: ConsoleEnv) -> None:
    _ship(console, "dl-1", diff="<html><script>alert(1)</script></html>")
    http = Http(console.url)
    status, headers, _ = http.get("/login")
    assert status == 200
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    assert "httponly" in headers["set-cookie"].lower()
    assert "samesite=strict" in headers["set-cookie"].lower()
    status, _, _ = http.get("/login", headers={"Host": "evil.example"})
    assert status == 400  # DNS rebinding: only the hosts it is reached by
    assert http.login() == 303
    session = next(v for k, v in http.cookies.items() if k == "torpor_console")
    assert len(session) >= 40
    sha = hashlib.sha256(b"<html><script>alert(1)</script></html>").hexdigest()
    status, headers, body = http.get(f"{path_of('dl-1')}/artifacts/{sha}/raw")
    assert status == 200 and body == "<html><script>alert(1)</script></html>"
    assert headers["content-type"] == "application/octet-stream"
    assert headers["content-disposition"].startswith("attachment;")
    status, _, _ = http.get(f"{path_of('dl-1')}/artifacts/{'0' * 64}")
    assert status == 404
    status, _, _ = http.post("/logout", {"csrf": csrf_of(http.get("/runs")[2])})
    assert status == 303
    assert http.get("/runs")[0] == 303  # the session is gone


# ------------------------------------------------------------------------ actions


def _act(http: Http, run_id: str, action: str, form: dict[str, str]) -> str:
    """POST an action from the run page's token; returns the flash text shown after it."""
    token = csrf_of(http.get(path_of(run_id))[2])
    status, headers, _ = http.post(f"{path_of(run_id)}/{action}", {**form, "csrf": token})
    assert status == 303, (action, status)
    _, _, page = http.get(headers["location"])
    start = page.index('class="flash')
    return page[start : page.index("</p>", start)]


@pytest.mark.proc  # the console fixture is a server process
def test_every_action_is_recorded_with_the_person(console: ConsoleEnv) -> None:
    with console.runtime() as rt:
        rt.run("console.gate", None, run_id="act-signal")
        rt.run("console.gate", None, run_id="act-cancel")
        mail = rt.run("console.mail", {"to": "ops@example.org"}, run_id="act-resolve")
        assert mail.outcome == "unresolved"
        rt.run("console.park", None, run_id="act-retry")
        rt.run("console.park", None, run_id="act-budget")
    http = Http(console.url)
    assert http.login("bob") == 303
    with console.client() as c:
        wait_id = c.state("act-signal").wait.wait_id  # type: ignore[union-attr]
    said = _act(
        http, "act-signal", "signal", {"name": "", "wait_id": wait_id, "payload": '{"n": 7}'}
    )
    assert "waiting for it" in said
    bad = _act(http, "act-cancel", "signal", {"name": "go", "payload": "{not json"})
    assert "refused: payload is not valid JSON" in bad
    assert "cancel requested" in _act(http, "act-cancel", "cancel", {"reason": "superseded"})
    refused = _act(
        http, "act-resolve", "resolve", {"key": "act-resolve/send", "verdict": "applied"}
    )
    assert "refused: say how you know" in refused
    done = _act(
        http,
        "act-resolve",
        "resolve",
        {"key": "act-resolve/send", "verdict": "applied", "reason": "in the mail log",
         "result": '{"id": 1}'},
    )  # fmt: skip
    assert "resolved as applied" in done
    assert "reopened" in _act(http, "act-retry", "retry", {"step": "", "reason": "fixed"})
    assert "budget set" in _act(http, "act-budget", "budget", {"tokens": "5000"})
    _ship(console, "act-revoke")
    aid, hashes = _aid(console, "act-revoke")
    decided = {"approval_id": aid, "hashes": ",".join(hashes), "comment": "ok"}
    assert f"approved {aid} as bob" in _act(http, "act-revoke", "approve", decided)
    again = _act(http, "act-revoke", "approve", decided)
    assert "refused:" in again and "already decided" in again
    revoked = _act(http, "act-revoke", "revoke", {"approval_id": aid, "reason": "wrong branch"})
    assert f"revoked {aid}" in revoked

    with console.runtime() as rt:
        assert rt.resume("act-signal").result == {"n": 7}
        assert rt.resume("act-cancel").outcome == "cancelled"
        assert rt.resume("act-resolve").outcome == "succeeded"
        rt.resume("act-retry")
        rt.resume("act-budget")
        assert rt.resume("act-revoke").outcome != "succeeded"
    with console.client() as c:

        def payloads(run_id: str, type_: str) -> list[dict]:
            return [e.payload.model_dump() for e in c.events(run_id) if e.type == type_]

        (sig,) = payloads("act-signal", "signal_received")
        assert sig["signal_id"].startswith("console:bob:")
        assert payloads("act-cancel", "cancel_requested")[0]["by"] == "bob"
        (verdict,) = [
            p for p in payloads("act-resolve", "effect_reconciled") if p["by"] != "engine"
        ]
        assert (verdict["by"], verdict["verdict"], verdict["reason"]) == (
            "bob", "applied", "in the mail log"
        )  # fmt: skip
        assert payloads("act-retry", "run_reopened")[0]["by"] == "bob"
        assert payloads("act-budget", "run_reopened")[0]["by"] == "bob"
        assert c.state("act-budget").budget.tokens == 5000
        assert [(p["by"], p["reason"]) for p in payloads("act-revoke", "approval_revoked")] == [
            ("bob", "wrong branch")
        ]
        assert not [e for e in c.events("act-revoke") if e.type == "effect_intended"]
    audit = [json.loads(x) for x in console.audit.read_text().splitlines()]
    mine = [(a["user"], a["action"], a["result"][:7]) for a in audit if a["user"] == "bob"]
    assert ("bob", "signal", "refused") in mine and ("bob", "resolve", "refused") in mine
    for action in ("signal", "cancel", "resolve", "retry", "budget", "approve", "revoke"):
        assert ("bob", action, "done") in mine, action


def test_an_approval_that_timed_out_takes_no_decision(db_url: str) -> None:
    """A request whose wait timed out stays `requested` in the record but is no longer
    pending: nobody (the console included) can decide on it, and its successor is the one
    asked about."""
    with torpor.Runtime(db_url) as rt:
        rt.run("console.revise", {"text": "notes", "first_timeout_s": 0.2}, run_id="to-1")
        client = torpor.Client(rt.store)
        ((old, _),) = client.pending_approvals("to-1").items()
        deadline = client.state("to-1").wait.deadline_ms  # type: ignore[union-attr]
        while rt.store.now_ms() <= deadline:
            time.sleep(0.02)
        assert rt.resume("to-1").status == "waiting"
        ((new, _),) = client.pending_approvals("to-1").items()
        assert new != old and client.state("to-1").approvals[old].status == "requested"
        with pytest.raises(InboxError, match="takes no decision any more"):
            client.decide("to-1", old, "approve", "alice")
        assert [m.kind for m in client.inbox("to-1")] == ["refused"]  # recorded, not sent
