"""G16, issue 33 attacks 2 and 3: no rollback or restored copy makes an effect run twice.

The store is moved back through plain writes to its rows and files — a writer deletes the
history after the signed decision (both backends), an older copy of the SQLite file is put
back, a new store is made where the old one stood — and the run is resumed. Before issue 33
the effect ran again (its intent was gone with the history) and ``torpor doctor`` said ok. Now
the store is behind this host's high-water mark (outside the database, beside the keyring):
no effect runs, the run says why, doctor names it; ``torpor store accept-restore`` records a
person's decision, and the effect is reconciled with the outside world before it is called.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import runtime_kit as kit
import torpor
from torpor.cli import main as cli_main
from torpor.errors import StoreBehindMarkError


def push(sha: str, idempotency_key: str) -> dict[str, Any]:
    kit.ledger("effect", key=idempotency_key, sha=sha)
    return {"pushed": sha}


def find_push(call: torpor.EffectCall) -> torpor.Applied | torpor.Absent:
    hits = kit.ledger_entries("effect", key=call.idempotency_key)
    return torpor.Applied({"pushed": hits[-1]["sha"]}) if hits else torpor.Absent()


@torpor.workflow(name="g16.ship", version="1")
def ship(run: torpor.Run, content: str) -> Any:
    ref = run.artifact("patch", content)
    appr = run.approval("ship", [ref], summary="push the patch")
    return run.effect("push", push, ref.sha256, approval=appr, artifacts=[ref], reconcile=find_push)


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kit.use_ledger(tmp_path / "ledger.jsonl")
    monkeypatch.setenv("COLUMNS", "400")


def _sql(url: str, sql: str, params: tuple[Any, ...] = ()) -> None:
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.split("://", 1)[1][1:])
        conn.execute(sql, params)
        conn.commit()
        conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    try:
        cli_main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().out


def _approved_and_pushed(url: str) -> int:
    """Run to the approval, approve (alice's key), resume to the push: the seq of the decision."""
    with torpor.Runtime(url) as rt:
        assert rt.run(ship, "patch v1", run_id="r1").status == "waiting"
        torpor.Client(rt.store).decide("r1", None, "approve", "alice")
        res = rt.resume("r1")
        assert res.outcome == "succeeded", res
        events = rt.store.read_events("r1")
    assert len(kit.ledger_entries("effect")) == 1
    return next(e.seq for e in events if e.type == "approval_decided")


def _roll_back(url: str, seq: int) -> None:
    """A writer of the database rolls run r1 back to just after its signed decision."""
    _sql(url, "DELETE FROM events WHERE run_id = 'r1' AND seq > ?", (seq,))
    _sql(
        url,
        "UPDATE runs SET status = 'pending', outcome = NULL, last_seq = ?, checkpoint = NULL, "
        "checkpoint_seq = 0, lease_owner = NULL, wake_at_ms = NULL WHERE run_id = 'r1'",
        (seq,),
    )


def _refused_then_accepted(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with torpor.Runtime(url) as rt, pytest.raises(StoreBehindMarkError, match="accept-restore"):
        rt.resume("r1")
    assert len(kit.ledger_entries("effect")) == 1  # no effect ran again
    with torpor.Client(url) as c:
        assert "this host saw seq" in (c.get("r1").attention or "")  # said where people look
    code, out = _cli(capsys, "--db", url, "doctor")
    assert code == 1 and "high-water mark" in out and "accept-restore" in out, out
    # Still refused until a person decides, whoever resumes.
    with torpor.Runtime(url) as rt, pytest.raises(StoreBehindMarkError):
        rt.resume("r1")
    code, out = _cli(capsys, "--db", url, "store", "accept-restore", "--as", "alice")
    assert code == 0 and "accepted store" in out, out
    code, out = _cli(capsys, "--db", url, "doctor", "--json")
    hw = [f for f in json.loads(out) if f["what"] == "high-water mark"]
    assert hw and all(f["ok"] for f in hw), hw
    with torpor.Runtime(url) as rt:
        res = rt.resume("r1")
        assert res.outcome == "succeeded", res
        evs = rt.store.read_events("r1")
    # Reconciled before it was called: the push had reached the outside world already.
    assert len(kit.ledger_entries("effect")) == 1
    rec = [e for e in evs if e.type == "effect_reconciled"]
    assert rec and rec[-1].payload.verdict == "applied"  # type: ignore[attr-defined]


def test_a_rolled_back_history_runs_no_effect_until_accepted(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seq = _approved_and_pushed(store_url)
    _roll_back(store_url, seq)
    _refused_then_accepted(store_url, capsys)


def test_a_restored_older_copy_runs_no_effect_until_accepted(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = Path(db_url.split("://", 1)[1][1:])
    with torpor.Runtime(db_url) as rt:
        assert rt.run(ship, "patch v1", run_id="r1").status == "waiting"
        torpor.Client(rt.store).decide("r1", None, "approve", "alice")
        src, dst = sqlite3.connect(db), sqlite3.connect(tmp_path / "backup.db")
        src.backup(dst)  # last night's backup: the decision delivered, nothing pushed
        src.close()
        dst.close()
        assert rt.resume("r1").outcome == "succeeded"
    assert len(kit.ledger_entries("effect")) == 1
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    shutil.copyfile(tmp_path / "backup.db", db)  # restored
    _refused_then_accepted(db_url, capsys)


def test_a_store_recreated_where_another_stood_runs_nothing_until_accepted(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = Path(db_url.split("://", 1)[1][1:])
    with torpor.Runtime(db_url) as rt:
        assert rt.run(ship, "patch v1", run_id="r1").status == "waiting"
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    with torpor.Runtime(db_url) as rt, pytest.raises(StoreBehindMarkError, match="recreated"):
        rt.run(ship, "patch v2", run_id="r2")
    code, out = _cli(capsys, "--db", db_url, "doctor")
    assert code == 1 and "recreated or replaced" in out, out
    code, out = _cli(capsys, "--db", db_url, "store", "accept-restore", "--as", "alice")
    assert code == 0, out
    with torpor.Runtime(db_url) as rt:
        assert rt.resume("r2").status == "waiting"


def test_the_mark_is_outside_the_home_and_a_tampered_one_is_refused(
    db_url: str, torpor_home: Path
) -> None:
    with torpor.Runtime(db_url) as rt:
        assert rt.run(ship, "patch v1", run_id="r1").status == "waiting"
        marks = rt.settings.config_dir() / "marks"
    files = list(marks.glob("*.json"))
    assert len(files) == 1 and not files[0].is_relative_to(torpor_home)
    body = json.loads(files[0].read_text())
    assert body["runs"]["r1"][0] > 0
    body["runs"]["r1"][0] = 1  # lowered by someone without this host's key
    files[0].write_text(json.dumps(body))
    with torpor.Runtime(db_url) as rt, pytest.raises(torpor.errors.MarkError, match="verify"):
        rt.resume("r1")
