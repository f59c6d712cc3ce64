"""Sessions (issue 46) in one process, on both backends: turns answered in order with their
dispositions, continue-as-new carrying the ledger, the inbox's rules."""

from __future__ import annotations

from pathlib import Path

import pytest

import torpor
from sessions_kit import Listener, drive, session_agent
from torpor.errors import BadInputError, SessionNotFoundError
from torpor.sessions import Sessions, segment_run_id

LISTENER = Listener(watch="INC-40213")
AGENT = session_agent("sess.roll", LISTENER, segment_turns=3, budget_tokens=600)

FILLER = (
    "please note the weather report for the coastal stations today, rain then wind, "
    "cloudy in the afternoon, the usual small talk about the harbour and the boats"
)


def test_a_session_rolls_over_segments_without_losing_a_ledger_fact(store_url: str) -> None:
    rt = torpor.Runtime(store_url)
    sessions = Sessions(torpor.Client(rt.store))
    sessions.start("ann", AGENT)
    LISTENER.seen.clear()
    sessions.send("ann", "the incident we work on is INC-40213, remember it")
    drive(rt, sessions, "ann")
    for i in range(7):
        sessions.send("ann", f"turn {i}: {FILLER} {i}")
        drive(rt, sessions, "ann")
    s = sessions.get("ann")
    assert (s.segment, s.turns) == (3, 8)  # 3 + 3 + 2 turns
    inbox = sessions.inbox("ann")
    assert [m.status for m in inbox] == ["handled"] * 8
    assert [m.turn for m in inbox] == list(range(1, 9))
    assert inbox[0].reply == "ok: the incident we work on is INC-40213, remember it"
    assert [g.first_turn for g in sessions.segments("ann")] == [1, 4, 7]
    # The fact was compacted into segment 1's ledger, carried into 2's and then 3's: each
    # segment's own ledger holds it, and the last model call's context still had it.
    for seg in (1, 2, 3):
        texts = [r.data["text"] for r in rt.store.ledger(segment_run_id("ann", seg))]
        assert any("INC-40213" in t for t in texts), (seg, texts)
    assert "INC-40213" in LISTENER.seen[-1]
    mem = sessions.memory("ann")
    assert any("INC-40213" in f["text"] for f in mem["facts"])
    # Segment 3's history is short: it starts from the carried memory, not 8 turns.
    assert rt.store.get_run(segment_run_id("ann", 3)).status == "waiting"
    rt.close()


def test_messages_sent_while_asleep_are_taken_in_order_once(store_url: str) -> None:
    rt = torpor.Runtime(store_url)
    client = torpor.Client(rt.store)
    sessions = Sessions(client)
    sessions.start("bo", AGENT)
    drive(rt, sessions, "bo")
    first = sessions.send("bo", "one", message_id="m1")
    again = sessions.send("bo", "one", message_id="m1")
    assert first.new and not again.new and again.message.seq == 1
    sessions.send("bo", "two")
    sessions.send("bo", "three")
    sessions.send("bo", "four")  # segment 1 (3 turns) ends before it: segment 2 takes it
    drive(rt, sessions, "bo")
    inbox = sessions.inbox("bo")
    assert [(m.text, m.status, m.turn) for m in inbox] == [
        ("one", "handled", 1),
        ("two", "handled", 2),
        ("three", "handled", 3),
        ("four", "handled", 4),
    ]
    assert inbox[3].run_id == segment_run_id("bo", 2)
    # Segment 1 ended with "four" buffered: its record refuses it there (the run's own
    # disposition), and segment 2 answered it from the session's inbox.
    refused = [
        e.payload
        for e in rt.store.read_events(segment_run_id("bo", 1))
        if e.type == "message_refused"
    ]
    assert [p.message_id for p in refused] == [inbox[3].message_id]
    rt.close()


def test_supersede_and_bad_input(store_url: str) -> None:
    rt = torpor.Runtime(store_url)
    sessions = Sessions(torpor.Client(rt.store))
    sessions.start("cy", AGENT)
    drive(rt, sessions, "cy")
    sessions.send("cy", "draft one")
    sessions.send("cy", "final version", supersede=True)
    drive(rt, sessions, "cy")
    got = [(m.text, m.status) for m in sessions.inbox("cy")]
    assert got == [("draft one", "superseded"), ("final version", "handled")]
    with pytest.raises(BadInputError, match="needs some text"):
        sessions.send("cy", "  ")
    with pytest.raises(SessionNotFoundError, match="no session named 'zz'"):
        sessions.send("zz", "hello")
    with pytest.raises(BadInputError, match="session name 'a/b'"):
        sessions.start("a/b", AGENT)
    rt.close()


def test_a_superseded_message_gets_no_turn(store_url: str) -> None:
    rt = torpor.Runtime(store_url)
    sessions = Sessions(torpor.Client(rt.store))
    sessions.start("dee", AGENT)
    drive(rt, sessions, "dee")
    LISTENER.seen.clear()
    sessions.send("dee", "draft one")
    sessions.send("dee", "final version", supersede=True)
    drive(rt, sessions, "dee")
    assert len(LISTENER.seen) == 1 and "draft one" not in LISTENER.seen[0]
    rt.close()


def test_the_session_cli(db_url: str) -> None:
    import json

    from typer.testing import CliRunner

    from torpor.cli import app

    def cli(*args: str) -> str:
        r = CliRunner().invoke(app, ["--db", db_url, "session", *args], env={"COLUMNS": "200"})
        assert r.exit_code == 0, r.output
        return r.stdout

    assert "started: segment 1" in cli("start", "fay", "--agent", "test_sessions:AGENT")
    rt = torpor.Runtime(db_url)
    sessions = Sessions(torpor.Client(rt.store))
    drive(rt, sessions, "fay")
    assert "message #1 sent" in cli("send", "fay", "hi there", "--as", "ann")
    drive(rt, sessions, "fay")
    (row,) = json.loads(cli("ls", "--json"))
    assert (row["name"], row["turns"], row["run_status"]) == ("fay", 1, "waiting")
    shown = json.loads(cli("show", "fay", "--json"))
    assert [(m["sender"], m["status"], m["reply"]) for m in shown["inbox"]] == [
        ("ann", "handled", "ok: hi there")
    ]
    assert "ok: hi there" in cli("show", "fay")
    bad = CliRunner().invoke(app, ["--db", db_url, "session", "start", "g", "--agent", "x"])
    assert isinstance(bad.exception, BadInputError) and "MODULE:ATTR" in str(bad.exception)
    rt.close()


def test_the_docs_example_runs_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import runpy
    import sys

    from conftest import ROOT

    argv = sys.argv
    sys.argv = ["sessions_example.py", str(tmp_path)]
    try:
        runpy.run_path(str(ROOT / "docs" / "sessions_example.py"), run_name="__main__")
    finally:
        sys.argv = argv
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "1 handled turn 1 noted: my order is A-1042",
        "2 handled turn 2 noted: ship it to Lyon",
        "3 handled turn 3 noted: what was my order?",
        "segment 2, 3 turns, run session:ada:2: waiting",
    ]
    assert '--8<-- "docs/sessions_example.py"' in (ROOT / "docs" / "sessions.md").read_text()


def test_client_session_handle(db_url: str) -> None:
    rt = torpor.Runtime(db_url)
    client = torpor.Client(rt.store)
    Sessions(client).start("gus", AGENT)
    drive(rt, Sessions(client), "gus")
    handle = client.session("gus")
    handle.send("hello")
    drive(rt, Sessions(client), "gus")
    assert [(m.status, m.reply) for m in handle.inbox()] == [("handled", "ok: hello")]
    assert handle.info().turns == 1
    rt.close()


class Flaky:
    """Answers like the listener, but fails the call whose latest message says EXPLODE."""

    model_id = "flaky"

    def __init__(self) -> None:
        self.inner = Listener()

    def complete(self, messages, tools=()):  # type: ignore[no-untyped-def]
        if "EXPLODE" in (self.inner.complete(messages, tools).message.content or ""):
            raise RuntimeError("the model broke")
        return self.inner.complete(messages, tools)


FLAKY = session_agent("sess.flaky", Flaky(), segment_turns=50)


def test_a_failed_segment_does_not_end_its_session(store_url: str) -> None:
    """A turn whose segment fails gets ``rejected``; the next message starts a new segment
    (not left pending forever), which answers it."""
    rt = torpor.Runtime(store_url)
    sessions = Sessions(torpor.Client(rt.store))
    sessions.start("fay", FLAKY)
    drive(rt, sessions, "fay")
    sessions.send("fay", "hello")
    drive(rt, sessions, "fay")
    sessions.send("fay", "please EXPLODE now")
    drive(rt, sessions, "fay")
    assert sessions.client.state(segment_run_id("fay", 1)).outcome == "failed"
    sent = sessions.send("fay", "are you there")
    assert sent.run_id == segment_run_id("fay", 2)
    drive(rt, sessions, "fay")
    inbox = sessions.inbox("fay")
    assert [m.status for m in inbox] == ["handled", "rejected", "handled"]
    assert inbox[-1].reply == "ok: are you there"
    assert [g.first_turn for g in sessions.segments("fay")] == [1, 2]
    rt.close()
