"""Runs with effects in every state, recorded by torpor's ``main`` before issue 28 (an effect's
intent and its observation in two appends; ``scripts/make_effects_fixture.py``), are read and
resumed to their end by today's code (the observation riding on the next append), on both
backends. The event format did not change: both writers' histories are the same events, so a
history that one wrote and the other continued folds as one (mixed-version workers are
tolerated; README, "When things go wrong")."""

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
from torpor.history import fold
from torpor.store.postgres import MIGRATIONS as PG_MIGRATIONS

FIXTURES = Path(__file__).parent / "fixtures" / "legacy"
NAME = "effects-v3"
RUN_IDS = ("done", "sig", "sleepy", "appr", "unres", "called", "intended", "acked", "loop")


def _sqlite_url(home: Path) -> str:
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / f"{NAME}.sqlite", home / "torpor.db")
    shutil.copy(FIXTURES / f"{NAME}-ledger.jsonl", home / "ledger.jsonl")
    return f"sqlite:///{home}/torpor.db"


def _value(v: Any) -> Any:
    return bytes.fromhex(v["$hex"]) if isinstance(v, dict) and set(v) == {"$hex"} else v


def _postgres_url(url: str, home: Path) -> str:
    """A fresh schema at the migrations the dump records, holding the dump's rows."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / f"{NAME}-postgres-ledger.jsonl", home / "ledger.jsonl")
    dump = json.loads((FIXTURES / f"{NAME}-postgres.json").read_text())
    applied = {int(v) for v, _ in dump["torpor_schema"]["rows"]}
    with psycopg.connect(url, autocommit=True) as conn:
        for f in sorted(PG_MIGRATIONS.glob("*.sql")):
            if int(f.name.split("_", 1)[0]) in applied:
                conn.execute(f.read_text())
        conn.execute(
            "CREATE TABLE torpor_schema "
            "(version integer PRIMARY KEY, applied_at_ms bigint NOT NULL)"
        )
        for table, data in dump.items():
            cols = ", ".join(data["columns"])
            marks = ", ".join(["%s"] * len(data["columns"]))
            rows = [[_value(v) for v in r] for r in data["rows"]]
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", rows)
    return url


@pytest.fixture(params=["sqlite", "postgres"])
def fixture_url(request: pytest.FixtureRequest, torpor_home: Path) -> str:
    if request.param == "sqlite":
        return _sqlite_url(torpor_home)
    return _postgres_url(str(request.getfixturevalue("pg_url")), torpor_home)


def _verdicts(client: torpor.Client, rid: str) -> list[str]:
    return [e.payload.verdict for e in client.events(rid) if e.type == "effect_reconciled"]  # type: ignore[attr-defined]


def test_effects_recorded_before_issue_28_fold_and_resume(fixture_url: str) -> None:
    assert legacy_flows.crashed is not None  # the workflows are registered
    with torpor.Runtime(fixture_url) as rt:
        client = torpor.Client(rt.store)
        # Every recorded history decodes and folds to the state the store loads.
        for rid in RUN_IDS:
            events = client.events(rid)
            assert events, rid
            assert fold(events).model_dump() == rt.store.load(rid).model_dump(), rid
        assert client.state("done").outcome == "succeeded"
        assert client.state("acked").outcome == "succeeded"
        assert _verdicts(client, "acked") == ["applied"]
        assert client.state("unres").outcome == "unresolved"
        assert client.state("called").effects_in_doubt() == ["called/charge"]
        assert client.state("intended").effects_in_doubt() == ["intended/charge"]
        assert client.state("loop").effects_in_doubt() == ["loop/emit#3"]
        assert {rid: client.get(rid).status for rid in ("sig", "sleepy", "appr")} == dict.fromkeys(
            ("sig", "sleepy", "appr"), "waiting"
        )

        # Intended and called (the world has it): reconciled applied, never called again.
        assert rt.resume("called").outcome == "succeeded"
        assert _verdicts(client, "called") == ["applied"]
        # Intended, never called: reconciled absent, then performed once.
        assert rt.resume("intended").outcome == "succeeded"
        assert _verdicts(client, "intended") == ["absent"]
        # Two observed, the third called but not observed: applied; the fourth performed.
        res = rt.resume("loop")
        assert (res.outcome, res.result) == ("succeeded", 60)
        assert _verdicts(client, "loop") == ["applied"]

        # Waiting runs take what they wait for, then perform their effect.
        client.signal("sig", "go", "now")
        assert rt.resume("sig").outcome == "succeeded"
        assert rt.resume("sleepy").outcome == "succeeded"
        client.decide("appr", None, "approve", "alice")
        assert rt.resume("appr").outcome == "succeeded"
        client.resolve("unres", "unres/pay", "applied", "alice", result={"paid": True})
        assert rt.resume("unres").outcome == "succeeded"
        assert rt.resume("done").outcome == "succeeded"

        # The histories old and new code wrote together still fold as one.
        for rid in RUN_IDS:
            events = client.events(rid)
            assert [e.seq for e in events] == list(range(1, len(events) + 1)), rid
            assert fold(events).model_dump() == rt.store.load(rid).model_dump(), rid
            assert fold(events).status == "finished", rid

    sent = Counter(e["key"] for e in legacy_flows.ledger_entries())
    # Every effect reached the world exactly once: before the recording ended or after.
    assert sent == Counter(
        {
            "done/send": 1,
            "called/charge": 1,
            "acked/charge": 1,
            "intended/charge": 1,
            "loop/emit": 1,
            "loop/emit#2": 1,
            "loop/emit#3": 1,
            "loop/emit#4": 1,
            "sig/announce": 1,
            "sleepy/after": 1,
            "appr/publish": 1,
        }
    )
