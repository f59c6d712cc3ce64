"""The console as a newcomer reads it, in Debian's Chromium at 1280x800 (issue 36 item 6):
the evidence is a list, one artifact a line (name, version, hash prefix, link); after a
decision the page says what must happen next; a long run's page stays short (its history and
long tables start collapsed, their counts in their summaries); and no page scrolls sideways —
the Waits table's Status column included. Checked by counting rows and by the bounding boxes of
named regions, never by pixels of a screenshot."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

import console_flows  # noqa: F401  (registers the workflows)
import torpor
from console_kit import CHROMIUM, PASSWORD, ConsoleEnv, path_of

pytestmark = pytest.mark.slow  # a real browser and a console process

WAIT_MS = 60_000
WIDTH, HEIGHT = 1280, 800
DIFF = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old\n+new\n"
LONG = "a_rather_long_name_without_any_break_" * 4


@torpor.workflow("layout.long")
def long_run(run: torpor.Run, n: int) -> Any:
    """Many steps and artifacts (as the flagship has), then a wait with a long id and reason."""
    for i in range(n):
        run.step(f"step_{i}_{LONG}", lambda i=i: i)
    for i in range(12):
        run.artifact(f"patch/{LONG}{i}.py", f"patch {i}\n", media_type="text/x-diff")
    return run.wait_for(f"go_{LONG}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
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
    ctx = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    ctx.set_default_timeout(WAIT_MS)
    pg = ctx.new_page()
    yield pg
    ctx.close()


def login(page: Page, env: ConsoleEnv, then: str) -> None:
    page.goto(env.url + then)
    page.fill("input[name=user]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#who")).to_have_text("alice")


def fits(page: Page, what: str) -> None:
    """No horizontal scroll: the document is no wider than the viewport."""
    page.wait_for_load_state("load")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= WIDTH, f"{what}: the page is {width} px wide at a {WIDTH} px viewport"


def inside(page: Page, selector: str) -> dict[str, float]:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, f"{selector} is not displayed"
    assert box["x"] >= 0 and box["x"] + box["width"] <= WIDTH, f"{selector} sticks out: {box}"
    return box


def test_a_long_run_page_fits_and_stays_short(console: ConsoleEnv, page: Page) -> None:
    rid = "layout-long"
    with console.runtime() as rt:
        assert rt.run("layout.long", 60, run_id=rid).status == "waiting"
    with console.client() as c:
        n_steps = len(c.steps(rid))
    assert n_steps > 60
    login(page, console, path_of(rid))
    fits(page, "run page")
    # The Waits table, its Status column included, is within the viewport.
    inside(page, "#waits table")
    inside(page, "#waits th:last-child")
    expect(page.locator("#waits th:last-child")).to_have_text("Status")
    inside(page, "#waits tbody tr td:last-child")
    # Evidence: one list item per artifact, each within the viewport, with its link.
    items = page.locator("#evidence-artifacts li")
    expect(items).to_have_count(12)
    for i in range(12):
        inside(page, f"#evidence-artifacts li:nth-child({i + 1})")
    link = re.compile(re.escape(f"{path_of(rid)}/artifacts/") + "[0-9a-f]{64}$")
    expect(items.first.locator("a")).to_have_attribute("href", link)
    # Collapsed: 60+ steps and the history do not stretch the page.
    expect(page.locator("#steps-details")).not_to_have_attribute("open", "")
    expect(page.locator("#steps-details > summary")).to_contain_text(f"{n_steps} steps")
    expect(page.locator("#history-details")).not_to_have_attribute("open", "")
    assert page.locator("#history-details tr.ev").count() > 25  # there, folded
    visible_rows = page.locator("#history-details tr.ev:visible").count()
    assert visible_rows == 0
    history = inside(page, "#timeline")
    assert history["height"] < HEIGHT  # a heading and a summary line, not thousands of px
    total = page.evaluate("document.documentElement.scrollHeight")
    assert total < 4 * HEIGHT, f"the run page is {total} px tall"
    # Opened on demand: every step row is there.
    page.click("#steps-details > summary")
    expect(page.locator("#steps tbody tr")).to_have_count(n_steps)
    fits(page, "run page with the steps opened")
    page.goto(console.url + "/runs")
    fits(page, "runs list")
    page.goto(console.url + f"{path_of(rid)}/events")
    fits(page, "events page")


def test_after_a_decision_the_page_says_what_happens_next(console: ConsoleEnv, page: Page) -> None:
    rid = "layout-next"
    with console.runtime() as rt:
        assert rt.run("console.ship", {"diff": DIFF}, run_id=rid).status == "waiting"
    login(page, console, path_of(rid))
    fits(page, "run page")
    page.click("a.review")
    fits(page, "approval page")
    inside(page, "#decision-form")
    page.click("#approve")
    flash = page.locator(".flash.ok")
    expect(flash).to_contain_text("What happens next")
    expect(flash).to_contain_text(f"torpor resume {rid}")
    after = page.locator("#after-decision")
    expect(after).to_contain_text("must pick the run up")
    inside(page, "#after-decision")
    fits(page, "run page after the decision")
