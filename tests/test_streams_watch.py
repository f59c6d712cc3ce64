"""``torpor watch RUN`` (issue 40) in a real process: it prints the reply as it is written —
the part before a wait, then, once the run goes on, the next — and ends when the run does.
On PostgreSQL every connection of the watching process is terminated by the server while it
waits (``pg_terminate_backend``): it reads on from where it was, printing nothing twice."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

import streams_kit  # noqa: F401  (registers the workflows)
import torpor
from conftest import HANG_S, ROOT

pytestmark = pytest.mark.proc

APP = "torpor-watch-test"


def _until(what: str, cond: object) -> None:
    deadline = time.monotonic() + HANG_S
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, what  # a hang guard
        time.sleep(0.02)


def test_watch_prints_the_reply_as_written_and_reads_on_after_a_lost_connection(
    store_url: str,
) -> None:
    postgres = store_url.startswith("postgres")
    url = store_url + ("&" if "?" in store_url else "?") + f"application_name={APP}"
    with torpor.Runtime(store_url) as rt:
        assert rt.run("streams.kit.gated", None, run_id="watch-1").status == "waiting"
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        db = url if postgres else store_url
        proc = subprocess.Popen(
            [sys.executable, "-m", "torpor.cli", "--db", db, "watch", "watch-1"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.extend(iter(lambda: proc.stdout.read(1), "")))  # type: ignore[union-attr]
        reader.start()
        try:
            _until("the first part printed", lambda: "before the signal" in "".join(out))
            if postgres:
                import psycopg

                with psycopg.connect(store_url, autocommit=True) as c:
                    killed = c.execute(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE application_name = %s",
                        (APP,),
                    ).fetchone()
                assert killed and killed[0] >= 1
            torpor.Client(rt.store).signal("watch-1", "more")
            assert rt.resume("watch-1").outcome == "succeeded"
            assert proc.wait(HANG_S) == 0, proc.stderr.read()  # type: ignore[union-attr]
        finally:
            if proc.poll() is None:
                proc.kill()
            reader.join(HANG_S)
    assert "".join(out) == "before the signal\nafter the signal\n"
