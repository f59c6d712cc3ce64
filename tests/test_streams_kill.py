"""The writer killed mid-stream (issue 40): a process streaming a model's reply (a real HTTP
stream from the loopback server of tests/agent_kit.py) is SIGKILLed after some of the reply
reached the store; a new execution retries the call as a call. The abandoned partial is
retracted before the retry writes anything (never interleaved), the shown text is the whole
reply once, the recorded result holds it, and a reader that followed the stream from before
the kill to the end saw every item once, in order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import streams_kit  # noqa: F401  (registers the workflows)
import torpor
from agent_kit import loopback, openai_reply, pieces
from conftest import HANG_S, ROOT
from torpor.streams import StreamReader, fold, shown

pytestmark = pytest.mark.proc

TEXT = " ".join(f"word{i}" for i in range(40)) + "."
#: The first answer stops after this many pieces until the writer was killed.
HELD_AT = 12

WRITER = """
import sys, torpor, streams_kit
torpor.Runtime(sys.argv[1]).run("streams.kit.ask", {"url": sys.argv[2]}, run_id="k1")
"""


def test_writer_killed_mid_stream_then_resumed(store_url: str, tmp_path: Path) -> None:
    held, killed = threading.Event(), threading.Event()

    def gate(i: int) -> None:
        if i == HELD_AT and not killed.is_set():
            held.set()
            killed.wait(HANG_S)  # the first answer hangs here until its client is dead

    with loopback("openai", lambda body: openai_reply(TEXT)) as api:
        api.gate = gate
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT / "src")])
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, store_url, api.url], env=env, cwd=tmp_path
        )
        seen: list[int] = []
        reader_store = torpor.store.open_store(store_url)
        try:
            assert held.wait(HANG_S), "the writer never reached the held piece"
            deadline = time.monotonic() + HANG_S
            while not reader_store.stream_items("k1", "reply"):  # flushed within 50 ms
                assert time.monotonic() < deadline, "no delta reached the store"
                time.sleep(0.01)
            follower = StreamReader(reader_store, "k1", "reply", poll_s=0.2)

            def follow() -> None:
                seen.extend(i.offset for i in follower)

            t = threading.Thread(target=follow)
            t.start()
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(HANG_S) == -signal.SIGKILL
            killed.set()
            with torpor.Runtime(store_url) as rt:
                res = rt.resume("k1")
                items = list(torpor.Client(rt.store).stream("k1"))
            t.join(HANG_S)
        finally:
            killed.set()
            if proc.poll() is None:
                proc.kill()
            reader_store.close()
    assert res.outcome == "succeeded" and res.result == TEXT
    assert len(api.requests) == 2  # the call was made again, as a call
    first, second = fold(items)
    assert first.state == "retracted" and TEXT.startswith(first.text) and first.text
    assert second.state == "ended" and second.text == TEXT
    retract = next(i.offset for i in items if i.kind == "retract")
    assert all(i.offset > retract for i in second.items)  # never interleaved
    assert shown(items) == TEXT
    assert seen == [i.offset for i in items]  # the follower: every item once, in order
    assert api.pieces_sent >= HELD_AT + len(pieces(TEXT))
