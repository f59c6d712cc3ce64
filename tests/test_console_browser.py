"""The console in a real browser: Debian's Chromium (``/usr/bin/chromium``, installed by
``.ci/run``) driven by Playwright with ``executable_path`` set — never a browser build Playwright
downloads — against a real ``torpor console`` process.

The flagship waits for approval; a person logs in, opens the run, reads the combined patch and
approves it; a worker finishes the run; the page shows ``succeeded``, and the outside world has
one commit and one email. Also: a denial; a page whose content changed since it was drawn is
refused; a request without the CSRF token or without a session is refused; names containing
``<script>`` are text. Screenshots of the main pages go to ``tests/artifacts/console/``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

import console_flows  # noqa: F401  (registers the workflows)
from console_kit import (
    CHROMIUM,
    PASSWORD,
    ROOT,
    SCREENSHOTS,
    ConsoleEnv,
    path_of,
)

if str(ROOT) not in sys.path:  # the examples package lives at the repository root
    sys.path.insert(0, str(ROOT))
from examples.repo_agent import world

#: A real browser and real processes: the full suite runs these; the fast tier skips them.
pytestmark = pytest.mark.slow

#: Generous: the suite runs on two busy cores.
WAIT_MS = 60_000
DIFF = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old\n+new\n"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        # Never skipped in CI (CI=true): there a missing browser is a failure.
        why = f"needs Debian's chromium at {CHROMIUM}: apt-get install -y chromium (.ci/run does)"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(why)
        pytest.skip(why)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM)
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(WAIT_MS)
    pg = ctx.new_page()
    pg.dialogs: list[str] = []  # type: ignore[attr-defined]
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))  # type: ignore[attr-defined]
    yield pg
    ctx.close()


def shot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def login(page: Page, env: ConsoleEnv, user: str = "alice", then: str = "/runs") -> None:
    page.goto(env.url + then)
    expect(page.locator("input[name=user]")).to_be_visible()  # sent to the login form
    page.fill("input[name=user]", user)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#who")).to_have_text(user)


def _ship(env: ConsoleEnv, run_id: str, **inp: Any) -> list[str]:
    with env.runtime() as rt:
        assert rt.run("console.ship", {"diff": DIFF, **inp}, run_id=run_id).status == "waiting"
    with env.client() as c:
        ((_, hashes),) = c.pending_approvals(run_id).items()
    return hashes


def _inbox(env: ConsoleEnv, run_id: str) -> list[str]:
    with env.client() as c:
        return [m.kind for m in c.inbox(run_id)]


def test_flagship_approved_in_the_browser_then_a_worker_finishes_it(
    console: ConsoleEnv, page: Page, tmp_path: Path
) -> None:
    rid, workdir = "flagship-1", tmp_path / "work"
    agent = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.repo_agent",
            *("--run-id", rid, "--packages", "json"),
            *("--workdir", str(workdir), "--quiet"),
        ],
        cwd=ROOT,
        env=console.env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert agent.returncode == 2, agent.stderr + agent.stdout  # waiting for approval
    with console.client() as c:
        ((aid, (combined,)),) = c.pending_approvals(rid).items()
        patch = c.find_artifact(rid, "patch/combined")
    assert patch.sha256 == combined

    page.goto(console.url + "/runs")
    expect(page.locator("input[name=password]")).to_be_visible()
    shot(page, "login")
    login(page, console)
    expect(page.locator(f'tr[data-run-id="{rid}"] .status')).to_have_text("waiting")
    shot(page, "runs")
    page.click("a[data-show=person]")
    expect(page.locator(f'tr[data-run-id="{rid}"]')).to_contain_text("approval")
    page.click(f'tr[data-run-id="{rid}"] a')
    expect(page.locator("#run-status")).to_contain_text("waiting (approval")
    expect(page.locator("#approvals")).to_contain_text(f"sha256:{combined}")
    shot(page, "run-waiting")

    page.click("a.review")
    expect(page.locator("#decide-hash")).to_have_text(f"sha256:{combined}")
    expect(page.locator(".diff-file").first).to_be_visible()
    files = page.locator(".diff-file").count()
    assert files >= 1 and page.locator(".diff .l.add").count() >= files
    assert f"sha256:{combined}" in page.locator("#bound-hashes").inner_text()
    shot(page, "approval-review")
    page.fill("input[name=comment]", "read the whole patch")
    page.click("#approve")
    expect(page.locator(".flash.ok")).to_contain_text(f"approved {aid} as alice")
    assert _inbox(console, rid) == ["decision"]

    worker = subprocess.run(
        [
            sys.executable,
            "-m",
            "torpor.cli",
            "worker",
            "--import",
            "examples.repo_agent.workflow",
            "--until-idle",
            "--max-seconds",
            "240",
        ],
        cwd=ROOT,
        env=console.env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert worker.returncode == 0, worker.stderr + worker.stdout
    # The open page follows by polling: no reload.
    expect(page.locator("#run-outcome")).to_have_attribute("data-outcome", "succeeded")
    expect(page.locator("#run-grew")).to_be_visible()
    page.reload()
    for key in (f"{rid}/push", f"{rid}/email"):
        expect(page.locator(f'tr.effect[data-key="{key}"] .status')).to_have_text("observed")
    expect(page.locator("#approvals")).to_contain_text("approved by alice via delegate console@ops")
    report = world.world_report(rid, workdir)
    assert len(report["commits_with_key"]) == 1, report
    assert len(report["emails_with_message_id"]) == 1, report
    expect(page.locator("#run-result")).to_contain_text(report["commits_with_key"][0])
    shot(page, "run-succeeded")

    page.goto(f"{console.url}{path_of(rid)}/artifacts/{combined}")
    expect(page.locator("#artifact-sha256")).to_have_text(combined)
    expect(page.locator(".diff-file").first).to_be_visible()
    shot(page, "artifact-diff")
    with console.client() as c:
        (d,) = c.state(rid).approvals[aid].decisions
    assert (d.approver, d.delegate, d.scheme, d.comment) == (
        "alice", "console@ops", "ed25519", "read the whole patch"
    )  # fmt: skip


def test_deny_in_the_browser(console: ConsoleEnv, page: Page) -> None:
    rid = "deny-1"
    (sha,) = _ship(console, rid)
    login(page, console, "bob", then=path_of(rid))
    page.click("a.review")
    expect(page.locator("#decide-hash")).to_have_text(f"sha256:{sha}")
    page.fill("input[name=comment]", "not this week")
    page.click("#deny")
    expect(page.locator(".flash.ok")).to_contain_text("denied")
    with console.runtime() as rt:
        assert rt.resume(rid).outcome == "blocked"
    expect(page.locator("#run-outcome")).to_have_attribute("data-outcome", "blocked")
    page.reload()
    expect(page.locator("#approvals")).to_contain_text("denied by bob via delegate console@ops")
    expect(page.locator("a.review")).to_have_count(0)
    shot(page, "run-denied")


def test_a_page_whose_content_changed_is_refused(console: ConsoleEnv, page: Page) -> None:
    rid = "stale-1"
    with console.runtime() as rt:
        first = rt.run(
            "console.revise", {"text": "release notes", "first_timeout_s": 1}, run_id=rid
        )
    assert first.status == "waiting"
    with console.client() as c:
        ((old_aid, (old,)),) = c.pending_approvals(rid).items()
        deadline = c.state(rid).wait.deadline_ms  # type: ignore[union-attr]
    login(page, console, then=f"{path_of(rid)}/approval?id={old_aid}")
    expect(page.locator(".content pre.text")).to_have_text("release notes (revision 0)")
    expect(page.locator("#decide-hash")).to_have_text(f"sha256:{old}")

    # Nobody decided by the deadline: the run revises the document and asks again.
    while time.time() * 1000 <= deadline:
        time.sleep(0.05)
    with console.runtime() as rt:
        assert rt.resume(rid).status == "waiting"
    with console.client() as c:
        ((new_aid, (new,)),) = c.pending_approvals(rid).items()
    assert new != old

    page.click("#approve")  # on the page drawn before the change
    refused = page.locator(".flash.error")
    expect(refused).to_contain_text("content changed since you viewed it")
    expect(refused).to_contain_text(new_aid)
    assert _inbox(console, rid) == []  # nothing was sent
    with console.client() as c:
        assert c.pending_approvals(rid) == {new_aid: [new]}
    shot(page, "stale-refused")


def test_requests_without_csrf_token_or_session_are_refused(
    console: ConsoleEnv, page: Page
) -> None:
    rid = "forged-1"
    _ship(console, rid)
    login(page, console, then=path_of(rid))
    page.click("a.review")
    page.locator("#decision-form input[name=csrf]").evaluate("e => e.remove()")
    page.click("#approve")
    expect(page.locator("#refusal")).to_contain_text("no valid CSRF token: nothing was done")
    shot(page, "csrf-refused")
    assert _inbox(console, rid) == []

    page.go_back()
    page.reload()
    expect(page.locator("#decision-form")).to_be_visible()
    page.context.clear_cookies()  # logged out (the session cookie is gone)
    page.click("#approve")
    expect(page.locator("#refusal")).to_contain_text("not logged in: nothing was done")
    assert _inbox(console, rid) == []
    page.goto(console.url + path_of(rid))
    expect(page.locator("input[name=password]")).to_be_visible()


def _inert(page: Page) -> None:
    """Nothing a name or a content carried ran or became markup on this page."""
    assert page.evaluate("window.pwned") is None
    assert page.locator("img").count() == 0
    assert page.locator("b", has_text="bold?").count() == 0
    # Only the console's own scripts, from this origin: htmx, and the run page's live.js.
    srcs = page.locator("script").evaluate_all("els => els.map(e => e.getAttribute('src'))")
    assert srcs and set(srcs) <= {"/static/htmx.min.js", "/static/live.js"}, srcs
    assert page.dialogs == []  # type: ignore[attr-defined]


def test_script_in_names_and_content_is_inert(console: ConsoleEnv, page: Page) -> None:
    rid = 'xss<script><img src=x onerror="window.pwned=1">'
    name = "<script>window.pwned=2</script>"
    summary = "<b>bold?</b><script>window.pwned=3</script>"
    _ship(
        console, rid, name=name, summary=summary, diff=DIFF + "+<script>window.pwned=4</script>\n"
    )
    login(page, console)
    row = page.locator(".run-row").filter(has_text="xss<script>")
    with page.expect_response(lambda r: "/runs-live" in r.url):  # and after an htmx refresh
        expect(row.locator("a")).to_have_text(rid)
    expect(row.locator("a")).to_have_text(rid)
    _inert(page)
    row.locator("a").click()
    expect(page.locator("#run-id")).to_have_text(rid)
    expect(page.locator("#artifacts")).to_contain_text(name)
    expect(page.locator("#approvals")).to_contain_text(summary)
    _inert(page)
    shot(page, "xss-run")
    run_url = page.url
    page.click("a.review")
    expect(page.locator(".diff")).to_contain_text("+<script>window.pwned=4</script>")
    expect(page.locator(".summary")).to_have_text(summary)
    _inert(page)
    page.goto(run_url)
    page.locator("#artifacts a").filter(has_text=name).click()
    expect(page.locator("#artifact-name")).to_have_text(name)
    _inert(page)
