"""Signed approval decisions (DESIGN.md G6): HMAC-SHA256 (RFC 2104) over the canonical JSON of
what was decided — run, approval, decision, approver, the exact content hashes and the time."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from . import serde


def decision_body(
    run_id: str,
    approval_id: str,
    decision: str,
    approver: str,
    hashes: list[str],
    decided_at_ms: int,
) -> dict[str, Any]:
    """The signed fields of a decision."""
    return {
        "run_id": run_id,
        "approval_id": approval_id,
        "decision": decision,
        "approver": approver,
        "hashes": sorted(hashes),
        "decided_at_ms": decided_at_ms,
    }


def sign(key: bytes, body: dict[str, Any]) -> str:
    """Hex HMAC-SHA256 of the canonical JSON of ``body``."""
    return hmac.new(key, serde.dumps(body).encode(), hashlib.sha256).hexdigest()


def verify(key: bytes, body: dict[str, Any], signature: str) -> bool:
    """Constant-time check of a signature."""
    return hmac.compare_digest(sign(key, body), signature)
