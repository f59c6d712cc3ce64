"""G16 / issue 34 item 1: a signed decision is valid for exactly one request in one store.

A person's decision for run r1 in staging, copied into production's run r1 (same workflow, same
content, so the same approval id and hashes) by a writer of production's database, performed
production's effect. Now the signed bytes name the store's identity and the request's seq
(:mod:`torpor.signing`, version 2): the copy is refused and recorded as refused, the run keeps
waiting, no effect happens; rewriting production's identity row to staging's does not help (the
worker's host pinned production's identity outside the database). A decision signed before
(version 1, naming neither) is refused and decided again.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import runtime_kit as kit
import torpor
from torpor import signing
from torpor.errors import StoreBehindMarkError
from torpor.keys import FileSigner


def push(sha: str, idempotency_key: str) -> dict[str, Any]:
    kit.ledger("effect", key=idempotency_key, sha=sha)
    return {"pushed": sha}


@torpor.workflow(name="g16d.ship", version="1")
def ship(run: torpor.Run, content: str) -> Any:
    ref = run.artifact("patch", content)
    appr = run.approval("ship", [ref], summary="push the patch")
    return run.effect("push", push, ref.sha256, approval=appr, artifacts=[ref])


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path) -> None:
    kit.use_ledger(tmp_path / "ledger.jsonl")


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


def _waiting(url: str) -> None:
    with torpor.Runtime(url) as rt:
        assert rt.run(ship, "patch v1", run_id="r1").status == "waiting"


def _staging_decision(tmp_path: Path) -> dict[str, Any]:
    """alice approves staging's r1; the decision message as it was posted there."""
    staging = f"sqlite:///{tmp_path / 'staging.db'}"
    _waiting(staging)
    with torpor.Client(staging) as c:
        c.decide("r1", None, "approve", "alice")
        [msg] = c.inbox("r1")
    return dict(msg.body)


def _refused(url: str) -> list[str]:
    with torpor.Runtime(url) as rt:
        assert rt.resume("r1").status == "waiting"
        st = rt.store.load("r1")
    assert kit.ledger_entries("effect") == []
    [info] = st.approvals.values()
    assert info.status == "requested"
    return info.refusals


def test_a_decision_copied_from_another_store_is_refused(store_url: str, tmp_path: Path) -> None:
    body = _staging_decision(tmp_path)
    _waiting(store_url)
    with torpor.Client(store_url) as prod:  # a writer of production's database
        prod.store.post_inbox("r1", "decision", body, message_id="copied")
    refusals = _refused(store_url)
    assert any("signed for store" in r and "copied from another store" in r for r in refusals)
    # The right person deciding in production goes through.
    with torpor.Client(store_url) as prod:
        prod.decide("r1", None, "approve", "alice")
    with torpor.Runtime(store_url) as rt:
        assert rt.resume("r1").outcome == "succeeded"
    assert len(kit.ledger_entries("effect")) == 1


def test_rewriting_the_identity_row_does_not_make_a_copy_valid(
    store_url: str, tmp_path: Path
) -> None:
    body = _staging_decision(tmp_path)
    _waiting(store_url)  # (this host pinned production's identity)
    _sql(store_url, "UPDATE store_identity SET store_id = ?", (body["store"],))
    with torpor.Client(store_url) as prod:
        prod.store.post_inbox("r1", "decision", body, message_id="copied")
    with torpor.Runtime(store_url) as rt, pytest.raises(StoreBehindMarkError, match="replaced"):
        rt.resume("r1")
    assert kit.ledger_entries("effect") == []


def test_a_decision_for_another_request_is_refused(db_url: str, torpor_home: Path) -> None:
    _waiting(db_url)
    with torpor.Client(db_url) as c:
        c.decide("r1", None, "approve", "alice")
        [msg] = c.inbox("r1")
        _sql(db_url, "DELETE FROM inbox")
        body = dict(msg.body)
    # The same decision re-signed (by alice's real key: the strongest attacker) for another
    # request of the same approval is refused by the nonce.
    key = torpor.Settings.from_env().config_dir() / "keys" / "alice"
    forged = {**body, "request": "another-request"}
    data = signing.decision_bytes(
        "r1", forged["approval_id"], "approve", "alice", forged["hashes"],
        forged["decided_at_ms"], key=forged["key"], comment="", store=forged["store"],
        request=forged["request"],
    )  # fmt: skip
    forged["signature"] = signing.encode_signature(FileSigner(key).sign(data))
    with torpor.Client(db_url) as c:
        c.store.post_inbox("r1", "decision", forged, message_id="other-request")
    assert any("another request" in r for r in _refused(db_url))


def test_a_decision_signed_before_is_decided_again(db_url: str) -> None:
    _waiting(db_url)
    with torpor.Client(db_url) as c:
        st = c.state("r1")
    [(aid, info)] = st.approvals.items()
    key = torpor.Settings.from_env().config_dir() / "keys" / "alice"
    signer = FileSigner(key)
    fp = signing.fingerprint(signer.blob)
    data = signing.decision_bytes("r1", aid, "approve", "alice", info.hashes, 1, key=fp)
    assert data.startswith(b"torpor-approval-decision-v1\n")
    body = {
        "approval_id": aid, "decision": "approve", "approver": "alice",
        "hashes": info.hashes, "decided_at_ms": 1, "scheme": "ed25519", "key": fp,
        "signature": signing.encode_signature(signer.sign(data)),
    }  # fmt: skip
    with torpor.Client(db_url) as c:
        c.store.post_inbox("r1", "decision", body, message_id="v1")
    assert any("decide again" in r for r in _refused(db_url))


def test_the_signed_bytes_name_the_store_and_the_request() -> None:
    v2 = signing.decision_bytes(
        "r1", "ship@abc", "approve", "alice", ["aa"], 1700000000000,
        key="SHA256:x", store="0f" * 16, request="n4",
    )  # fmt: skip
    head, _, body = v2.partition(b"\n")
    assert head == b"torpor-approval-decision-v2"
    assert json.loads(body)["store"] == "0f" * 16 and json.loads(body)["request"] == "n4"
    assert v2 != signing.decision_bytes(
        "r1", "ship@abc", "approve", "alice", ["aa"], 1700000000000,
        key="SHA256:x", store="0f" * 16, request="n5",
    )  # fmt: skip
