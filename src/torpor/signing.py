"""What an approval decision signs, and the signature checks (DESIGN.md G6).

**Canonical bytes (version 1)** of a decision — what an approver's Ed25519 key signs — are the
ASCII bytes of::

    torpor-approval-decision-v1\\n{JSON}

where ``{JSON}`` is one JSON object with exactly these members, keys sorted, no whitespace
(``separators=(",", ":")``), non-ASCII characters escaped (``ensure_ascii``):

- ``run_id``, ``approval_id`` (strings): which run and which approval request;
- ``hashes``: the sorted list of the sha256 hex digests of the content decided on;
- ``decision``: ``"approve"`` or ``"deny"``;
- ``approver``: the person the decision is from;
- ``delegate``: the delegate key's name when a delegate (e.g. a web console) signed for that
  person, else ``""``;
- ``key``: the signing key's fingerprint (``SHA256:`` + unpadded base64 of the sha256 of its
  OpenSSH wire-format public key, as ``ssh-keygen -l`` prints it);
- ``decided_at_ms``: when, in milliseconds since the Unix epoch (the store's clock);
- ``comment``: the note recorded with the decision.

**Version 2** (issue 34 item 1; what torpor signs since) names the store and the request too,
so a decision is valid for exactly one request in one store (G16)::

    torpor-approval-decision-v2\n{JSON}

with the members of version 1 and two more: ``store``, the store's identity (32 hex digits,
``store_identity``, migration 0014, as pinned outside the database by the worker's host:
:mod:`torpor.marks`), and ``request``, the request's nonce (``approval_requested.nonce``: random,
made once when the request is recorded; another run, store, or a request recorded again has
another). A decision of version 1 (signed before) names
neither; workers refuse it, and the approval is decided again (see the CHANGELOG).

**Version 3** (issue 39: approve with edit) is version 2 with one more member, ``edited``: the
sha256 hex digest of the edited content the approver approved instead of the proposed one (the
UTF-8 bytes of the edited arguments, as delivered in ``approval_decided.edited_content``)::

    torpor-approval-decision-v3\n{JSON}

A decision without an edit is signed as version 2, as before. A reply (decision ``respond``)
is version 2 with the reply as its ``comment``: what the model is told is signed too.

The signature is Ed25519 (RFC 8032, "pure" Ed25519 over those bytes; 64 bytes), stored in
standard base64. Keys are OpenSSH ``ssh-ed25519`` keys (RFC 8709 wire format), so an existing
``~/.ssh/id_ed25519`` or ``ssh-agent`` can sign. The ``cryptography`` package does the
cryptography; it is imported only here, on first use.

The local single-user mode (``TORPOR_APPROVALS=hmac-local``) signs the earlier body — the
canonical JSON of ``run_id, approval_id, decision, approver, hashes, decided_at_ms``, and since
issue 34 ``store`` and ``request`` as above (one without them is decided again), and
``edited`` when there is an edit (issue 39), without a prefix — with HMAC-SHA256 (RFC 2104)
under one shared key. A shared key proves nothing about who decided: such decisions are
labelled "not attributable".
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Sequence
from typing import Any

#: Prefix of version 1 of the canonical bytes (domain separation: these bytes are never valid
#: as anything else a key might sign).
DOMAIN = b"torpor-approval-decision-v1\n"

#: Prefix of version 2 (the store and the request named too).
DOMAIN_V2 = b"torpor-approval-decision-v2\n"

#: Prefix of version 3 (an approval with edited content: its hash named too).
DOMAIN_V3 = b"torpor-approval-decision-v3\n"

#: Shortest HMAC key accepted in the local single-user mode, in bytes (HMAC-SHA256's output).
MIN_HMAC_KEY_BYTES = 32


def decision_bytes(
    run_id: str,
    approval_id: str,
    decision: str,
    approver: str,
    hashes: Sequence[str],
    decided_at_ms: int,
    *,
    delegate: str = "",
    key: str = "",
    comment: str = "",
    store: str = "",
    request: str = "",
    edited: str = "",
) -> bytes:
    """The canonical bytes an Ed25519 key signs: version 2 when ``store`` (the store's
    identity) is given, with ``request`` (the request's nonce), version 3 when ``edited`` (the
    sha256 of the edited content) is given too; else version 1 (see the module docstring)."""
    body: dict[str, Any] = {
        "run_id": run_id,
        "approval_id": approval_id,
        "hashes": sorted(hashes),
        "decision": decision,
        "approver": approver,
        "delegate": delegate,
        "key": key,
        "decided_at_ms": int(decided_at_ms),
        "comment": comment,
    }
    prefix = DOMAIN
    if store:
        body.update(store=store, request=request)
        prefix = DOMAIN_V2
        if edited:
            body["edited"] = edited
            prefix = DOMAIN_V3
    return prefix + json.dumps(body, sort_keys=True, separators=(",", ":")).encode("ascii")


def hmac_bytes(
    run_id: str,
    approval_id: str,
    decision: str,
    approver: str,
    hashes: Sequence[str],
    decided_at_ms: int,
    *,
    store: str = "",
    request: str = "",
    edited: str = "",
) -> bytes:
    """The bytes an HMAC decision signs (the body signed before keys per person; with the
    store's identity and the request's nonce when ``store`` is given, and the edited content's
    hash when there is an edit)."""
    body: dict[str, Any] = {
        "run_id": run_id,
        "approval_id": approval_id,
        "decision": decision,
        "approver": approver,
        "hashes": sorted(hashes),
        "decided_at_ms": decided_at_ms,
    }
    if store:
        body.update(store=store, request=request)
    if edited:
        body["edited"] = edited
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode()


def hmac_sign(key: bytes, data: bytes) -> str:
    """Hex HMAC-SHA256 (RFC 2104) of ``data``."""
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def hmac_verify(key: bytes, data: bytes, signature: str) -> bool:
    """Constant-time check of an HMAC-SHA256 hex signature."""
    return hmac.compare_digest(hmac_sign(key, data), signature)


def fingerprint(blob: bytes) -> str:
    """The OpenSSH fingerprint of a public key in wire format: ``SHA256:`` + unpadded base64
    of its sha256 (what ``ssh-keygen -l`` prints)."""
    digest = hashlib.sha256(blob).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def public_line(blob: bytes) -> str:
    """``ssh-ed25519 BASE64``: the OpenSSH text form of a public key in wire format."""
    return "ssh-ed25519 " + base64.b64encode(blob).decode()


def encode_signature(raw: bytes) -> str:
    """A 64-byte Ed25519 signature as stored in a decision (standard base64)."""
    return base64.b64encode(raw).decode()


def ed25519_verify(blob: bytes, data: bytes, signature: str) -> bool:
    """Whether ``signature`` (base64 of 64 bytes) is the Ed25519 signature (RFC 8032) of
    ``data`` by the public key ``blob`` (OpenSSH wire format). A malformed signature or key is
    False, never an exception."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_ssh_public_key

    try:
        raw = base64.b64decode(signature.encode("ascii"), validate=True)
        public = load_ssh_public_key(public_line(blob).encode())
    except (ValueError, binascii.Error, UnicodeEncodeError):
        return False
    if not isinstance(public, Ed25519PublicKey) or len(raw) != 64:
        return False
    try:
        public.verify(raw, data)
    except InvalidSignature:
        return False
    return True
