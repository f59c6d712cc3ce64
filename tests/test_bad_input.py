"""Bad input gets a clean error (issue 16, item 4; G10).

- ``torpor signal --payload`` with NaN, 100,000-deep nesting or a lone surrogate: one line
  naming the option, exit 2, nothing posted.
- Names anyone can record (step ids, artifact names, signal names, approvers) are printed by
  the CLI with terminal control sequences and Rich markup neutralised.
- A hand-edited checkpoint is not trusted (the state is the fold of the history) and a run row
  whose status disagrees with its history is reported by ``torpor doctor``, naming the run
  and what disagrees — on both backends.
- An artifact hash that is not a sha256 is refused before any path is built or file opened.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import torpor
from torpor.cli import main
from torpor.errors import CorruptRecordError
from torpor.history import fold
from torpor.store import open_store
from torpor.store.codec import DIGEST_MARK


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@torpor.workflow(name="bad.wait")
def wait_flow(run: torpor.Run, _: Any) -> Any:
    for i in range(3):
        run.step(f"s{i}", lambda i=i: i)
    return run.wait_for("go")


def test_signal_payloads_json_cannot_hold_are_one_line_errors(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rt = torpor.Runtime(db_url)
    try:
        assert rt.run(wait_flow, None, run_id="r1").status == "waiting"
    finally:
        rt.close()
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    cases = {
        '{"x": NaN}': "NaN is not JSON data",
        '{"x": [1, -Infinity]}': "-Infinity is not JSON data",
        f"@{deep}": "nested too deeply",
        '{"k": ["\\ud800"]}': "$.k[0] holds a lone surrogate",
    }
    for payload, why in cases.items():
        code, out, err = _cli(capsys, "--db", db_url, "signal", "r1", "go", "--payload", payload)
        assert code == 2, (payload, out, err)
        assert err.startswith("error: --payload") and err.count("\n") == 1, (payload, err)
        assert why in err, (payload, err)
    store = open_store(db_url)
    try:
        assert store.pending_inbox("r1") == []  # nothing was posted
    finally:
        store.close()
    code, _, err = _cli(capsys, "--db", db_url, "signal", "r1", "go", "--payload", '{"ok": 1}')
    assert code == 0, err


def test_a_rejoin_with_another_input_is_refused_not_dropped(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``start --run-id`` of an existing run rejoins it; with an input other than the one it
    was started with, that new input used to be dropped without a word."""
    base = ("--db", db_url, "start", "bad.wait", "--import", __name__, "--run-id", "r1")
    code, _, err = _cli(capsys, *base, "--input", '{"n": 1}')
    assert code == 0, err
    code, _, err = _cli(capsys, *base, "--input", '{"n": 1}')  # the same input: a rejoin
    assert code == 0, err
    code, _, err = _cli(capsys, *base)  # no input: a rejoin
    assert code == 0, err
    code, out, err = _cli(capsys, *base, "--input", '{"n": 2}')
    assert code != 0 and err.count("\n") == 1, (out, err)
    assert "--input: run 'r1' exists and was started with another input" in err, err
    store = open_store(db_url)
    try:
        assert store.load("r1").input == {"n": 1}  # nothing of the second start recorded
    finally:
        store.close()


ESC = "\x1b[2J\x1b]0;owned\x07"  # clear the screen; set the terminal's title
MARKUP = "[bold red]alarm[/bold red]"


@torpor.workflow(name="bad.names")
def names_flow(run: torpor.Run, _: Any) -> Any:
    run.step(f"step{ESC}{MARKUP}", lambda: 1)
    run.artifact(f"art{ESC}{MARKUP}", b"data")
    return run.wait_for("go")


def test_recorded_names_are_printed_inert(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    rt = torpor.Runtime(db_url)
    try:
        assert rt.run(names_flow, None, run_id="r1").status == "waiting"
        torpor.Client(rt.store).signal("r1", f"sig{ESC}{MARKUP}\u202e", {"v": f"x{ESC}"})
    finally:
        rt.close()
    for cmd in (
        ["show", "r1"],
        ["events", "r1"],
        ["artifacts", "r1"],
        ["ls"],
        ["show", "r1", "--json"],
        ["events", "r1", "--json"],
    ):
        code, out, err = _cli(capsys, "--db", db_url, *cmd)
        assert code == 0, (cmd, err)
        printed = out + err
        for raw in ("\x1b", "\x07", "\u202e"):
            assert raw not in printed, (cmd, raw, printed)
        if cmd[0] != "ls":
            shown = "u001b[2J" if "--json" in cmd else "x1b[2J"
            assert shown in printed, (cmd, printed)  # shown, as an escape
        if cmd[0] == "show" and "--json" not in cmd:
            assert MARKUP in printed, printed  # markup printed as text, not interpreted
    code, _, err = _cli(capsys, "--db", db_url, "show", f"no{ESC}")
    assert code == 1 and "\x1b" not in err and "x1b" in err, err


def _sql(url: str, sql: str, params: tuple[Any, ...]) -> None:
    if url.startswith("sqlite"):
        import sqlite3

        conn = sqlite3.connect(url.split("://", 1)[1][1:])
        conn.execute(sql, params)
        conn.commit()
        conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.replace("?", "%s"), params)


def test_a_hand_edited_checkpoint_or_run_row_is_named(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rt = torpor.Runtime(store_url)
    try:
        assert rt.run(wait_flow, None, run_id="r1").status == "waiting"
    finally:
        rt.close()
    store = open_store(store_url)
    try:
        whole = fold(store.read_events("r1"))
        # A hand edit of the checkpoint: the open wait's step claims a fifth attempt (the next
        # execution's append was refused: "attempt 1 of step 'wait:go' is not above 5").
        edited = whole.model_copy(deep=True)
        edited.steps["wait:go"].attempt = 5
        edited.steps_completed = 99
        body = edited.model_dump_json(exclude_defaults=True)
        _sql(
            store_url,
            "UPDATE runs SET checkpoint = ?, checkpoint_seq = ? WHERE run_id = ?",
            (body + DIGEST_MARK + "0" * 32, whole.seq, "r1"),
        )
        loaded = store.load("r1")
        assert loaded.steps["wait:go"].attempt == 1 and loaded.steps_completed == 3
        assert loaded.model_dump() == whole.model_dump()
    finally:
        store.close()
    code, out, _ = _cli(capsys, "--db", store_url, "doctor")
    assert code == 1
    assert "run r1: the checkpoint does not match its digest" in out, out

    # The run carries on from its history.
    rt = torpor.Runtime(store_url)
    try:
        torpor.Client(rt.store).signal("r1", "go", {"v": 1})
        res = rt.resume("r1")
        assert res.outcome == "succeeded" and res.result == {"v": 1}, res
    finally:
        rt.close()

    # A hand edit of the run row's status: doctor names the run and both sides.
    _sql(store_url, "UPDATE runs SET status = 'pending', outcome = NULL WHERE run_id = ?", ("r1",))
    code, out, _ = _cli(capsys, "--db", store_url, "doctor", "--json")
    assert code == 1
    problems = [f for f in json.loads(out) if not f["ok"]]
    assert problems[0]["what"] == "run r1", problems
    assert "says pending but its history says finished/succeeded" in problems[0]["detail"]


def test_an_artifact_hash_that_is_not_a_hash_opens_nothing(tmp_path: Path) -> None:
    from torpor.artifacts import ArtifactStore

    root = tmp_path / "artifacts"
    store = ArtifactStore(str(root))
    for bad in ("../../../../etc/passwd", "A" * 64, "ab" * 31, "0" * 63 + "/", ""):
        with pytest.raises(CorruptRecordError, match="is not a sha256"):
            store.get(bad)
        with pytest.raises(CorruptRecordError, match="is not a sha256"):
            store.exists(bad)
    assert not root.exists()  # not even the folder was made


def test_a_history_with_a_hole_is_refused_not_shown_in_part(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rt = torpor.Runtime(store_url)
    try:
        assert rt.run(wait_flow, None, run_id="r1").status == "waiting"
    finally:
        rt.close()
    code, out, _ = _cli(capsys, "--db", store_url, "events", "r1", "--json")
    assert code == 0 and len(json.loads(out)) == 7
    _sql(store_url, "DELETE FROM events WHERE run_id = ? AND seq = ?", ("r1", 3))
    for cmd in (["events", "r1", "--json"], ["show", "r1"]):
        code, out, err = _cli(capsys, "--db", store_url, *cmd)
        assert code == 1 and out == "", (cmd, out)
        assert err.startswith("error: run 'r1': event seq 3 is missing") and "doctor" in err, err
    # The tail too: the run row records seq 7 (its wait), the history now ends at 5.
    _sql(store_url, "DELETE FROM events WHERE run_id = ? AND seq > ?", ("r1", 5))
    code, _, err = _cli(capsys, "--db", store_url, "events", "r1", "--after", "3")
    assert code == 1 and "event seq 6 is missing" in err, err
