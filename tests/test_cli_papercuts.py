"""Small things the ``torpor`` command said badly or not at all, each one line now (in process,
through :func:`torpor.cli.main` and its one error boundary, against a real SQLite store)."""

from __future__ import annotations

import pytest

import streams_kit  # noqa: F401  (registers the workflows)
import torpor
from torpor.cli import main


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``torpor ARGS``: (exit code, stdout, stderr)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main(list(args))
    out, err = capsys.readouterr()
    code = done.value.code
    return (code if isinstance(code, int) else 1), out, err


def one_line(err: str, *fragments: str) -> None:
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for f in fragments:
        assert f in err, err


def test_watch_names_a_stream_the_run_does_not_have(
    runtime: torpor.Runtime, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert runtime.run("streams.kit.count", 2, run_id="w1").outcome == "succeeded"
    code, out, err = cli(capsys, "--db", db_url, "watch", "w1", "--stream", "nosuch")
    assert (code, out) == (2, "")
    one_line(err, "run 'w1' has no stream 'nosuch'", "its streams: progress")
    code, out, _ = cli(capsys, "--db", db_url, "watch", "w1", "--stream", "progress", "--json")
    assert code == 0 and out.count("\n") == 2  # the stream it has: both items


@torpor.workflow("papercuts.gate")
def gate(run: torpor.Run, inp: object) -> object:
    return run.wait_for("go")


def test_approve_with_no_approval_pending_says_what_the_run_is_doing(
    runtime: torpor.Runtime, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert runtime.run(gate, None, run_id="a1").status == "waiting"
    for extra in (["--edit", "-"], []):
        code, out, err = cli(capsys, "--db", db_url, "approve", "a1", "--as", "alice", *extra)
        assert (code, out) == (1, "")
        one_line(err, "run 'a1' has no approval pending (it is waiting for signal 'go')")


def test_fork_reports_a_seq_past_the_history_before_the_code_it_cannot_find(
    runtime: torpor.Runtime, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from torpor.history import RunStarted

    started = RunStarted(workflow="gone.flow", version="1", module="papercuts_no_such_module")
    assert runtime.store.create_run("f1", started)
    code, _, err = cli(capsys, "--db", db_url, "fork", "f1", "--at", "999")
    assert code == 2
    one_line(err, "run 'f1' has no event at seq 999: its history is seq 1..1")
    code, _, err = cli(capsys, "--db", db_url, "fork", "f1", "--at", "1")  # a good point: then
    one_line(err, "papercuts_no_such_module", "cannot be imported")  # the missing code
    assert code == 1
