"""A message sent while a session's turn runs is handled next, exactly once, across a SIGKILL
of the process running the session (issue 46), and across a continue-as-new: with one turn
per segment, the message lands in segment 1's inbox while segment 1's only turn runs, the
process dies right after that turn's model call is recorded, and a new process finishes the
turn (the model is not asked again), hands over to segment 2, which answers the message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import torpor
from conftest import HANG_S, ROOT
from torpor.sessions import Sessions, segment_run_id

pytestmark = pytest.mark.proc

MODULE = r"""
import os
from sessions_kit import Listener, session_agent

agent = session_agent("sess.kill", Listener(log=os.environ["SESS_LOG"]), segment_turns=1)
"""

DRIVER = r"""
import os, signal, sys
import torpor, torpor.faults as F
import sessmod
from sessions_kit import drive
from torpor.sessions import Sessions

_point = F.point


def point(name, *args, **kwargs):
    if name == "model.recorded" and os.environ.get("SESS_KILL"):
        os.kill(os.getpid(), signal.SIGKILL)
    return _point(name, *args, **kwargs)


F.point = point
rt = torpor.Runtime(sys.argv[1])
drive(rt, Sessions(torpor.Client(rt.store)), "eve")
print("DRIVEN", flush=True)
"""


def _run(tmp: Path, url: str, **extra: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp), str(ROOT / "tests"), str(ROOT / "src")])
    env["SESS_LOG"] = str(tmp / "calls.jsonl")
    env.update(extra)
    return subprocess.Popen(
        [sys.executable, str(tmp / "driver.py"), url],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_message_sent_during_a_turn_is_handled_next_once_across_sigkill(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sessmod.py").write_text(MODULE)
    (tmp_path / "driver.py").write_text(DRIVER)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("SESS_LOG", str(log))
    monkeypatch.syspath_prepend(str(tmp_path))
    import sessmod  # registers the segment workflow in this process too

    client = torpor.Client(store_url)
    sessions = Sessions(client)
    sessions.start("eve", sessmod.agent)
    sessions.send("eve", "first BLOCK")
    a = _run(tmp_path, store_url, SESS_KILL="1")
    deadline = time.time() + HANG_S
    while not Path(str(log) + ".in-call").exists():
        assert a.poll() is None, a.communicate()
        assert time.time() < deadline
        time.sleep(0.02)
    sent = sessions.send("eve", "second")  # while turn 1 runs in process a
    assert sent.run_id == segment_run_id("eve", 1)
    Path(str(log) + ".go").touch()
    _, err = a.communicate(timeout=HANG_S)
    assert a.returncode == -9, err  # killed right after turn 1's model call was recorded
    assert [m.status for m in sessions.inbox("eve")] == ["pending", "pending"]

    b = _run(tmp_path, store_url)
    out, err = b.communicate(timeout=HANG_S)
    assert b.returncode == 0 and "DRIVEN" in out, err
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    # Each message answered by exactly one model call; turn 1's was not made again.
    assert [c["said"] for c in calls] == ["first BLOCK", "second"]
    assert calls[0]["pid"] == a.pid and calls[1]["pid"] == b.pid
    inbox = sessions.inbox("eve")
    assert [(m.text, m.status, m.turn, m.run_id) for m in inbox] == [
        ("first BLOCK", "handled", 1, segment_run_id("eve", 1)),
        ("second", "handled", 2, segment_run_id("eve", 2)),
    ]
    assert inbox[1].reply == "ok: second"
    s = sessions.get("eve")
    assert (s.segment, s.turns, s.run_id) == (3, 2, segment_run_id("eve", 3))
    client.close()


def test_session_ls_and_show_import_neither_the_engine_nor_the_agents(db_url: str) -> None:
    from sessions_kit import Listener, session_agent

    client = torpor.Client(db_url)
    Sessions(client).start("hal", session_agent("sess.light", Listener(), segment_turns=5))
    client.close()
    probe = (
        "import sys\nfrom torpor.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print('HEAVY=' + ','.join(m for m in ('torpor.engine', 'torpor.agents', "
        "'torpor.runtime') if m in sys.modules))"
    )
    for cmd in (["session", "ls"], ["session", "show", "hal"]):
        p = subprocess.run(
            [sys.executable, "-c", probe, "--db", db_url, *cmd],
            capture_output=True, text=True, timeout=HANG_S,
            env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
        assert "hal" in p.stdout and p.stdout.rstrip().endswith("HEAVY="), (cmd, p.stdout, p.stderr)


def test_the_console_shows_a_session_as_a_conversation_with_its_memory(
    tmp_path: Path, torpor_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from console_kit import Http, running_console
    from sessions_kit import Listener, drive, session_agent

    spec = session_agent("sess.console", Listener(), segment_turns=5)
    with running_console(tmp_path / "console") as env:
        env.use(monkeypatch)
        with env.runtime() as rt:
            sessions = Sessions(torpor.Client(rt.store))
            sessions.start("ivy", spec)
            drive(rt, sessions, "ivy")
            sessions.send("ivy", "remember <b>INC-7</b>")
            drive(rt, sessions, "ivy")
        http = Http(env.url)
        assert http.login() == 303
        status, _, body = http.get("/sessions/ivy")
        assert status == 200
        assert "remember &lt;b&gt;INC-7&lt;/b&gt;" in body  # escaped, never markup
        assert "agent: ok: remember &lt;b&gt;INC-7&lt;/b&gt;" in body
        assert 'id="memory"' in body and "session:ivy:1" in body
        assert http.get("/sessions/nobody")[0] == 404
