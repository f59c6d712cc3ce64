"""Issue 34's console items, over plain HTTP against a real ``torpor console`` process:

- content with bidirectional or invisible characters (U+202E, U+2066, a zero-width space) is
  shown escaped, and the approval and artifact pages are flagged (item 5);
- a refused request — another site's ``Origin``, no CSRF token, a GET to an action,
  ``text/plain``, no session, a wrong password — is written to the audit log with its origin
  (item 6);
- an artifact under review whose stored bytes were altered gives a page that says what is wrong
  and offers no decision, not a bare 500 (item 7).
"""

from __future__ import annotations

import hashlib
import json

import pytest

import console_flows  # noqa: F401  (registers the workflows)
from console_kit import ConsoleEnv, Http, csrf_of, path_of

pytestmark = pytest.mark.proc  # a console server process

TRICK = (
    "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-ok = True\n"
    "+ok = False \u202e# admin only\u2066 x\u200b\n"
)


def _ship(env: ConsoleEnv, run_id: str, diff: str) -> tuple[str, list[str]]:
    with env.runtime() as rt:
        assert rt.run("console.ship", {"diff": diff}, run_id=run_id).status == "waiting"
    with env.client() as c:
        ((aid, hashes),) = c.pending_approvals(run_id).items()
    return aid, hashes


def test_bidi_and_invisible_characters_are_escaped_and_the_page_flagged(
    console: ConsoleEnv,
) -> None:
    aid, hashes = _ship(console, "bidi-1", TRICK)
    http = Http(console.url)
    assert http.login() == 303
    status, _, page = http.get(path_of("bidi-1") + "/approval?id=" + aid)
    assert status == 200, page
    assert 'id="hidden-warning"' in page and "invisible or bidi characters" in page
    assert "U+200B, U+202E, U+2066" in page
    for ch in ("\u202e", "\u2066", "\u200b"):
        assert ch not in page  # never raw: the reviewer sees what the bytes are
    assert page.count('class="hidden-char"') == 3
    assert 'id="decision-form"' in page  # flagged, still decidable: the bytes are as bound
    status, _, art = http.get(f"{path_of('bidi-1')}/artifacts/{hashes[0]}")
    assert status == 200 and "invisible or bidi characters" in art and "\u202e" not in art


def test_refused_requests_are_in_the_audit_log_with_their_origin(console: ConsoleEnv) -> None:
    aid, hashes = _ship(console, "audit-1", "--- a/y\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n")
    http = Http(console.url)
    assert http.login() == 303
    token = csrf_of(http.get(path_of("audit-1") + "/approval?id=" + aid)[2])
    url = path_of("audit-1") + "/approve"
    form = {"approval_id": aid, "hashes": ",".join(hashes)}
    before = console.audit.read_text().count("\n") if console.audit.exists() else 0
    tries = [
        http.post(url, {**form, "csrf": token}, headers={"Origin": "http://evil.example"}),
        http.post(url, form),
        http.get(url),
        http.request("POST", url, headers={"Content-Type": "text/plain"}),
        Http(console.url).post(url, {**form, "csrf": token}),
        Http(console.url).login(password="not it"),
    ]
    codes = [t if isinstance(t, int) else t[0] for t in tries]
    assert codes == [403, 403, 405, 403, 401, 401], codes
    lines = console.audit.read_text().splitlines()[before:]
    refused = [json.loads(x) for x in lines if json.loads(x)["result"] == "refused"]
    assert [r["status"] for r in refused] == codes, refused
    assert refused[0]["origin"] == "http://evil.example" and "another site" in refused[0]["reason"]
    assert refused[0]["user"] == "alice" and refused[0]["run_id"] == "audit-1"
    assert refused[2]["method"] == "GET" and refused[3]["content_type"] == "text/plain"
    assert refused[4]["user"] == "-" and "not logged in" in refused[4]["reason"]
    assert refused[5]["path"] == "/login" and "wrong password" in refused[5]["reason"]
    assert all(r["address"] == "127.0.0.1" for r in refused)
    with console.client() as c:
        assert [m.kind for m in c.inbox("audit-1")] == []  # and nothing was done


def test_an_altered_artifact_under_review_says_what_is_wrong(console: ConsoleEnv) -> None:
    aid, hashes = _ship(console, "tamper-1", "--- a/z\n+++ b/z\n@@ -1 +1 @@\n-a\n+c\n")
    blob = console.home / "artifacts" / "sha256" / hashes[0][:2] / hashes[0]
    assert blob.exists()
    blob.write_bytes(b"--- a/z\n+++ b/z\n@@ -1 +1 @@\n-a\n+rm -rf /\n")
    assert hashlib.sha256(blob.read_bytes()).hexdigest() != hashes[0]
    http = Http(console.url)
    assert http.login() == 303
    status, _, page = http.get(path_of("tamper-1") + "/approval?id=" + aid)
    assert status == 200, page
    assert "does not match its hash" in page and "altered or removed" in page, page
    assert 'id="decision-form"' not in page and "You cannot decide here" in page
    assert "rm -rf" not in page  # the altered bytes are not shown as the bound content
    status, _, art = http.get(f"{path_of('tamper-1')}/artifacts/{hashes[0]}")
    assert status == 200 and "does not match its hash" in art
    status, _, raw = http.get(f"{path_of('tamper-1')}/artifacts/{hashes[0]}/raw")
    assert status == 409 and "does not match its hash" in raw
