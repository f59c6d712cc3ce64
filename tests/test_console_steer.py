"""The console talks to a running agent (issue 39), over plain HTTP against a real ``torpor
console`` process: a steering box, a reply instead of a decision, and approve with edit — an
editor prefilled with the proposed arguments, the diff and the edit's sha256 shown before
anything is signed, and a submission whose bytes are not the reviewed ones refused."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest

import torpor
from console_kit import ConsoleEnv, Http, csrf_of, path_of
from torpor import Agent, CodePlanner, PlanView, Tools

pytestmark = pytest.mark.proc  # the console fixture is a server process

RAN: list[dict[str, Any]] = []
tools = Tools()


@tools.tool(policy="effect", requires_approval=lambda a: a["env"] == "prod")
def deploy(env: str, version: str, idempotency_key: str) -> dict[str, Any]:
    """Deploy a version."""
    RAN.append({"env": env, "version": version})
    return {"deployed": version}


def _plan(view: PlanView) -> Any:
    if view.steps:
        return None
    args = {"env": "prod", "version": "2.0"}
    return [torpor.ProposedStep(call_id="d1", tool="deploy", args=args)]


agent = Agent("test.console.steer", goal="ship", tools=tools, planner=CodePlanner(_plan))


def _flash(http: Http, run_id: str) -> str:
    _, _, page = http.get(path_of(run_id))
    return html.unescape(" ".join(re.findall(r'class="flash [^"]*"[^>]*>(.*?)</p>', page, re.S)))


def _hidden(page: str, name: str) -> str:
    m = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert m is not None, (name, page[:3000])
    return html.unescape(m.group(1))


def test_steer_respond_and_approve_an_edit_from_the_console(console: ConsoleEnv) -> None:
    RAN.clear()
    with console.runtime() as rt:
        for rid in ("c-edit", "c-reply"):
            assert rt.run(agent, {}, run_id=rid).wait_kind == "approval"
    http = Http(console.url)
    assert http.login("alice") == 303

    # Steering: the box on the run page; the message is in the run's inbox, from alice.
    _, _, page = http.get(path_of("c-edit"))
    assert 'id="steer-form"' in page
    status, _, _ = http.post(
        path_of("c-edit") + "/steer", {"csrf": csrf_of(page), "text": "ship 2.1, not 2.0"}
    )
    assert status == 303
    assert "steering message" in _flash(http, "c-edit")
    with console.client() as c:
        [msg] = [m for m in c.inbox("c-edit") if m.kind == "steer"]
        assert msg.body["by"] == "alice" and msg.message_id.startswith("console:alice:")
        aid = next(iter(c.pending_approvals("c-edit")))

    # Approve with edit: the editor holds the proposed arguments; the diff comes first.
    _, _, page = http.get(path_of("c-edit") + f"/approval?id={aid}")
    m = re.search(r'<textarea name="edited"[^>]*>(.*?)</textarea>', page, re.S)
    assert m is not None, page[:3000]
    proposed = html.unescape(m.group(1))
    assert json.loads(proposed)["args"] == {"env": "prod", "version": "2.0"}
    edited = proposed.replace('"2.0"', '"2.1"')
    form = {"csrf": csrf_of(page), "approval_id": aid, "hashes": _hidden(page, "hashes")}
    status, _, review = http.post(path_of("c-edit") + "/edit", {**form, "edited": edited})
    assert status == 200, review[:2000]
    assert '+    "version": "2.1"' in html.unescape(review)
    sha = _hidden(review, "edited_sha256")
    assert sha in review  # the hash the decision signs, shown
    # Bytes other than the reviewed ones under that hash: refused, nothing sent.
    swapped = {**form, "edited": edited.replace("2.1", "9.9"), "edited_sha256": sha}
    http.post(path_of("c-edit") + "/approve-edited", swapped)
    assert "not the one whose diff you reviewed" in _flash(http, "c-edit")
    good = {**form, "edited": _hidden(review, "edited"), "edited_sha256": sha}
    http.post(path_of("c-edit") + "/approve-edited", good)
    assert "approved the edit" in _flash(http, "c-edit")

    # Respond: a reply instead of a decision.
    with console.client() as c:
        raid, hashes = next(iter(c.pending_approvals("c-reply").items()))
    _, _, page = http.get(path_of("c-reply") + f"/approval?id={raid}")
    assert 'id="respond-form"' in page
    reply = {"csrf": csrf_of(page), "approval_id": raid, "hashes": ",".join(hashes)}
    http.post(path_of("c-reply") + "/respond", {**reply, "reply": "staging first, please"})
    assert "replied to" in _flash(http, "c-reply")

    with console.runtime() as rt:
        assert rt.resume("c-edit").outcome == "succeeded"
        assert rt.resume("c-reply").outcome == "succeeded"
    assert RAN == [{"env": "prod", "version": "2.1"}]  # the edit ran; the reply ran nothing
    with console.client() as c:
        [d] = [e.payload for e in c.events("c-edit") if e.type == "approval_decided"]
        assert (d.approver, d.delegate, d.edited) == ("alice", "console@ops", sha)  # type: ignore[attr-defined]
        settled = [e.payload for e in c.events("c-reply") if e.type == "tool_call_settled"]
        assert settled[0].observation["reply"] == "staging first, please"  # type: ignore[attr-defined]
