"""The console's server-sent events (issue 40) against a real ``torpor console`` process:
the event stream needs a session like every page; it sends each item with its offset as the
event id and resumes after ``Last-Event-ID``; the run page draws the reply written so far.
In Chromium (Debian's, driven by Playwright as in tests/test_console_browser.py): the reply
grows on the page as the model streams it (no reload, no polling), a reload mid-reply shows
what was written, and the page's summary turns ``succeeded`` when the run ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import streams_kit  # noqa: F401  (registers the workflows)
from agent_kit import loopback, openai_reply, pieces
from conftest import HANG_S
from console_kit import CHROMIUM, PASSWORD, ConsoleEnv, Http, path_of

#: A real console process.
pytestmark = pytest.mark.proc

TEXT = " ".join(f"token{i}" for i in range(40)) + "."

WRITER = """
import sys, torpor, streams_kit
torpor.Runtime(sys.argv[1]).run("streams.kit.ask", {"url": sys.argv[2]}, run_id="chat-1")
"""


def _until(cond: Any) -> None:
    deadline = time.monotonic() + HANG_S
    while not cond():
        assert time.monotonic() < deadline, "a hang guard"
        time.sleep(0.02)


def _events(body: str) -> list[dict[str, Any]]:
    out = []
    for block in body.split("\n\n"):
        ev: dict[str, Any] = {}
        for line in block.splitlines():
            key, _, value = line.partition(": ")
            if key in ("id", "event", "data"):
                ev[key] = value
        if "event" in ev:
            ev["data"] = json.loads(ev["data"])
            out.append(ev)
    return out


def test_the_event_stream_needs_a_session_and_resumes_after_last_event_id(
    console: ConsoleEnv,
) -> None:
    with console.runtime() as rt:
        rt.run("streams.kit.deltas", 3, run_id="sse-1")
    http = Http(console.url)
    status, headers, _ = http.get(path_of("sse-1") + "/sse")
    assert status == 303 and headers["location"].startswith("/login")
    assert http.login() == 303
    status, headers, body = http.get(path_of("sse-1") + "/sse")
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    evs = _events(body)
    items = [e for e in evs if e["event"] == "item"]
    assert [int(e["id"]) for e in items] == [1, 2, 3, 4, 5, 6]
    assert [e["data"]["kind"] for e in items] == ["data", "end"] * 3
    assert evs[-1]["event"] == "done"
    _, _, again = http.get(path_of("sse-1") + "/sse", headers={"Last-Event-ID": "4"})
    assert [int(e["id"]) for e in _events(again) if e["event"] == "item"] == [5, 6]
    _, _, page = http.get(path_of("sse-1"))
    assert "delta 0 " in page and 'data-after="6"' in page and "live.js" in page


@pytest.mark.slow  # a real browser, as tests/test_console_browser.py
def test_the_reply_grows_in_chromium_and_a_reload_shows_what_was_written(
    console: ConsoleEnv, tmp_path: Path
) -> None:
    if not Path(CHROMIUM).exists():
        why = f"needs Debian's chromium at {CHROMIUM}: apt-get install -y chromium (.ci/run does)"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(why)
        pytest.skip(why)
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=60_000)  # generous: the suite runs on two busy cores

    words = pieces(TEXT)
    gates = {10: threading.Event(), 25: threading.Event()}

    def gate(i: int) -> None:
        if i in gates:
            gates[i].wait(HANG_S)

    with loopback("openai", lambda body: openai_reply(TEXT)) as api:
        api.gate = gate
        # The writer is a process of its own: one that knows no secret holds nothing back
        # (a process that knows one keeps the tail of a reply until the next delta: G12).
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, console.db_url, api.url], env=console.env()
        )
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM)
                page = browser.new_page()
                page.set_default_timeout(HANG_S * 1000)
                page.goto(console.url + "/runs")
                page.fill("input[name=user]", "alice")
                page.fill("input[name=password]", PASSWORD)
                page.click("button[type=submit]")
                expect(page.locator("#who")).to_have_text("alice")
                with console.client() as c:
                    _until(lambda: c.store.stream_items("chat-1", "reply"))
                page.goto(console.url + path_of("chat-1"))
                reply = page.locator("#reply-text")
                expect(reply).to_have_text("".join(words[:10]))
                gates[10].set()  # the model goes on: the page grows without a reload
                expect(reply).to_have_text("".join(words[:25]))
                page.reload()  # mid-reply: what was written is drawn with the page
                expect(reply).to_have_text("".join(words[:25]))
                gates[25].set()
                expect(reply).to_have_text(TEXT)
                expect(page.locator("#run-outcome")).to_have_attribute("data-outcome", "succeeded")
                browser.close()
            assert writer.wait(HANG_S) == 0
        finally:
            for g in gates.values():
                g.set()
            if writer.poll() is None:
                writer.kill()
