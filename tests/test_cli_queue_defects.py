"""``torpor queue`` / ``schedule`` / ``start`` as an adversarial review found them: read-only
listings create nothing, huge or tiny numbers are one-line errors, a workflow name with terminal
escapes is refused, a repeated start of a queued run only returns it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import torpor
from test_cli_schedule import IMP, flows, session  # noqa: F401  (the fixture)
from torpor.store import open_store

#: Real subprocesses (CLI runs, interpreters): the default tier, not the fast one.
pytestmark = pytest.mark.proc


def test_listings_create_no_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sub/t.db"
    res = session(tmp_path, ["--db", url, "queue", "ls"], ["--db", url, "schedule", "ls"])
    for code, _out, err in res:
        assert code != 0 and "nothing was created" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "sub").exists()


def test_listings_create_no_tables_on_postgres(tmp_path: Path, pg_url: str) -> None:
    res = session(tmp_path, ["--db", pg_url, "queue", "ls"], ["--db", pg_url, "schedule", "ls"])
    assert all(code != 0 and "nothing was created" in err for code, _, err in res), res
    with pytest.raises(torpor.errors.TorporError):
        open_store(pg_url, read_only=True).close()  # still no tables there


BIG = "99999999999999999999999"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["queue", "set", "q", "--rate", f"{BIG}/1"], "rate_limit must be an integer from 1"),
        (["queue", "set", "q", "--rate", "1/1e300"], "period of at most"),
        # (past 64 bits: refused as the option is parsed, issue 35)
        (["queue", "set", "q", "--concurrency", BIG], "'--concurrency': 9999"),
        (["queue", "set", "q", "--per-key", BIG], "'--per-key': 9999"),
        (["queue", "set", "q", "--key-rate", "1/0.0000001"], "below a millisecond"),
        (["start", "cliq.hold", "--queue", "q", "--priority", f"-{BIG}", *IMP], "priority"),
        (["schedule", "add", "n1", "wf\x1b]0;PWNED\x07\x1b[2J", "--cron", "@daily"], "not valid"),
        (["schedule", "add", "n1", "w" * 100_000, "--cron", "@daily"], "not valid"),
    ],
)
def test_out_of_bounds_numbers_and_names_are_one_line_errors(
    flows: Path,  # noqa: F811
    args: list[str],
    fragment: str,
) -> None:
    ((code, out, err),) = session(flows, args)
    assert code == 2 and err.startswith("error: ") and fragment in err, (code, out, err)
    assert len(err.splitlines()) == 1 and "\x1b" not in err + out and len(err) < 400, err


def test_a_repeated_start_of_a_queued_run_only_returns_it(flows: Path) -> None:  # noqa: F811
    start = ["start", "cliq.hold", *IMP, "--json"]
    res = session(
        flows,
        ["queue", "set", "q", "--concurrency", "1"],
        [*start, "--queue", "q", "--run-id", "C"],
        [*start, "--run-id", "C"],
        [*start, "--run-id", "D", "--start-at", "2030-01-01T00:00:00Z"],
        [*start, "--run-id", "D"],
        ["show", "D", "--json"],
    )
    assert [r[0] for r in res] == [0] * 6, res
    assert json.loads(res[2][1])["status"] == "pending"  # not executed: a worker starts it
    assert json.loads(res[4][1])["status"] == "pending"
    shown = json.loads(res[5][1])
    assert shown["not_running"] == "delayed until 2030-01-01 00:00:00 UTC", shown


PARK = """
import torpor


@torpor.workflow("cliq.park")
def park(run: torpor.Run, inp: object) -> object:
    run.step("look", lambda: inp)
    run.block("waiting for more budget")
    return "unreachable"
"""


def test_a_reopened_queued_run_is_left_to_workers(tmp_path: Path) -> None:
    (tmp_path / "cliq_park.py").write_text(PARK)
    imp = ["--import", "cliq_park"]
    res = session(
        tmp_path,
        ["queue", "set", "q", "--concurrency", "1"],
        ["start", "cliq.park", *imp, "--queue", "q", "--run-id", "P"],
        ["worker", *imp, "--until-idle", "--max-seconds", "20", "--poll", "0.05"],
        ["budget", "P", "--steps", "100", "--as", "alice"],
        ["show", "P", "--json"],
    )
    assert [r[0] for r in res[:4]] == [0, 0, 0, 0], res
    assert "torpor worker --import cliq_park" in res[3][1], res[3][1]
    assert json.loads(res[4][1])["run"]["status"] == "pending", res[4][1]
