"""Runs recorded by an older torpor (``tests/fixtures/legacy/``, see ``legacy_flows.py``) are
migrated and resumed to their end by today's code, on both backends: every event still decodes
and folds, waiting runs take their signal, timer and approval, a run killed after an effect's
intent reconciles it, an unresolved run is settled by a person, and no effect recorded as
performed is performed again."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

import legacy_flows
import torpor
from torpor import serde
from torpor.store.postgres import MIGRATIONS as PG_MIGRATIONS

FIXTURES = Path(__file__).parent / "fixtures" / "legacy"
RUN_IDS = ("done", "sig", "sig-buffered", "sleepy", "appr", "unres", "failed", "crashed", "loop")


def _sqlite_url(home: Path) -> str:
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / "v1.sqlite", home / "torpor.db")
    return f"sqlite:///{home}/torpor.db"


def _postgres_url(url: str) -> str:
    dump = json.loads((FIXTURES / "v1-postgres.json").read_text())
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute((PG_MIGRATIONS / "0001_initial.sql").read_text())
        conn.execute(
            "CREATE TABLE torpor_schema "
            "(version integer PRIMARY KEY, applied_at_ms bigint NOT NULL)"
        )
        for table, data in dump.items():
            cols = ", ".join(data["columns"])
            marks = ", ".join(["%s"] * len(data["columns"]))
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", data["rows"])
    return url


@pytest.fixture(params=["sqlite", "postgres"])
def legacy_url(request: pytest.FixtureRequest, torpor_home: Path) -> str:
    if request.param == "sqlite":
        return _sqlite_url(torpor_home)
    return _postgres_url(str(request.getfixturevalue("pg_url")))


def test_legacy_runs_migrate_and_resume_to_their_end(legacy_url: str) -> None:
    assert legacy_flows.done is not None  # the workflows are registered
    with torpor.Runtime(legacy_url) as rt:
        client = torpor.Client(rt.store)
        # Every recorded event decodes and every history folds (states as recorded).
        for rid in RUN_IDS:
            assert client.events(rid), rid
        status = {rid: client.get(rid).status for rid in RUN_IDS}
        assert status["done"] == "finished" and status["sig"] == "waiting"
        assert client.state("done").outcome == "succeeded"
        assert client.state("done").result["total"] == 14
        assert client.state("failed").outcome == "failed"
        assert client.state("unres").outcome == "unresolved"
        assert client.state("crashed").effects_in_doubt() == ["crashed/charge"]

        # Waiting runs take what they wait for.
        client.signal("sig", "go", "now")
        assert rt.resume("sig").outcome == "succeeded"
        assert client.state("sig").result["answer"] == "now"
        res = rt.resume("sig-buffered")
        assert res.outcome == "succeeded", res
        assert res.result["answer"] == {"early": True}
        assert rt.resume("sleepy").outcome == "succeeded"
        client.decide("appr", None, "approve", "alice")
        assert rt.resume("appr").outcome == "succeeded"

        # A run killed after an effect's intent reconciles it (absent here), then performs it.
        assert rt.resume("crashed").outcome == "succeeded"
        verdicts = [e.payload for e in client.events("crashed") if e.type == "effect_reconciled"]
        assert [v.verdict for v in verdicts] == ["absent"]

        # The checkpointed loop continues from its checkpoint, not from the start.
        res = rt.resume("loop")
        assert (res.outcome, res.result) == ("succeeded", 60)

        # A person settles the unresolved effect; the run continues and succeeds.
        client.resolve("unres", "unres/pay", "applied", "alice", result={"paid": True})
        assert rt.resume("unres").outcome == "succeeded"

        # Finished runs stay as they were.
        assert rt.resume("done").outcome == "succeeded"
        assert rt.resume("failed").outcome == "failed"

    sent = Counter(e["key"] for e in legacy_flows.ledger_entries())
    # Effects recorded as performed before the migration are not performed again; the rest
    # exactly once.
    assert sent == Counter(
        {
            "sig/announce": 1,
            "sig-buffered/announce": 1,
            "sleepy/after": 1,
            "appr/publish": 1,
            "crashed/charge": 1,
            "loop/emit#3": 1,
            "loop/emit#4": 1,
        }
    )


def _same_plain(a: Any, b: Any) -> None:
    assert type(a) is type(b) and a == b, (a, b)
    if isinstance(a, dict):
        for k in a:
            _same_plain(a[k], b[k])
    elif isinstance(a, list):
        for x, y in zip(a, b, strict=True):
            _same_plain(x, y)


def test_legacy_values_read_back_as_recorded_and_compute_hashes_still_match(
    legacy_url: str,
) -> None:
    """The typed value encoding (issue 14) reads histories written before it: every recorded
    value (plain JSON then) reads back as itself, and every compute step's recorded input hash
    is today's hash of the same input, so recorded compute steps are still reused."""
    with torpor.Runtime(legacy_url) as rt:
        client = torpor.Client(rt.store)
        values = 0
        for rid in RUN_IDS:
            for e in client.events(rid):
                for name in ("result", "state", "input", "payload", "detail"):
                    v = getattr(e.payload, name, None)
                    if v is not None:
                        _same_plain(serde.decode(v), v)
                        values += 1
        assert values > 20
        hashes = {
            (e.run_id, e.payload.step_id): e.payload.input_hash  # type: ignore[attr-defined]
            for rid in ("done", "loop")
            for e in client.events(rid)
            if e.type == "step_completed"
            and e.payload.policy == "compute"  # type: ignore[attr-defined]
            and not e.payload.step_id.startswith("artifact:")  # type: ignore[attr-defined]
        }
    rows = [{"i": i, "v": i * i} for i in range(4)]  # legacy_flows.done's input of 4
    assert hashes == {
        ("done", "sum"): serde.hash_value([[rows], {}]),
        ("loop", "item"): serde.hash_value([[0], {}]),
        ("loop", "item#2"): serde.hash_value([[1], {}]),
        ("loop", "item#3"): serde.hash_value([[2], {}]),
    }
