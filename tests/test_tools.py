"""Tools on their own: schema from type hints, validation errors as data, timeouts, retries
(transient errors; effects only when a retry cannot duplicate them), secrets and artifacts."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from torpor import ArtifactHash, EffectNotApplied, Retry, Secret, Tools, TransientError
from torpor.agents.tools import Vault
from torpor.errors import ToolArgsError, ToolTimeoutError, TorporError

FAST = Retry(attempts=3, initial=0.01, max_wait=0.02)


def test_schema_from_type_hints_and_validation_errors_as_data() -> None:
    tools = Tools()

    @tools.tool(policy="compute")
    def resize(
        image: ArtifactHash,
        width: int,
        height: int = 100,
        masks: list[ArtifactHash] | None = None,
        fencing_token: int = 0,
    ) -> dict[str, Any]:
        """Resize an image.

        Longer text that is not part of the description."""
        return {}

    t = tools["resize"]
    spec = t.spec()
    assert spec.description == "Resize an image."
    props = spec.parameters["properties"]
    assert set(props) == {"image", "width", "height", "masks"}  # engine params are not shown
    assert spec.parameters["required"] == ["image", "width"]
    assert props["image"]["x-artifact"] is True
    assert t.artifact_fields == {"image", "masks"}
    h1, h2 = "a" * 64, "b" * 64
    ok = t.validate({"image": h1, "width": "7", "masks": [h2, h1]})
    assert ok["width"] == 7 and t.artifact_hashes(ok) == [h1, h2]
    with pytest.raises(ToolArgsError) as info:
        t.validate({"image": "nope", "width": 1, "colour": "red"})
    obs = info.value.observation()
    assert {d["loc"] for d in obs["details"]} == {"image", "colour"}
    assert "nope" not in str(obs)  # inputs are never echoed (they may be secrets)
    with pytest.raises(ToolArgsError, match="JSON object"):
        t.validate(["not", "a", "dict"])


def test_registration_errors() -> None:
    tools = Tools()
    with pytest.raises(TorporError, match="only an effect has a reconcile"):
        tools.tool(lambda: None, name="x", reconcile=lambda c: None)
    with pytest.raises(TorporError, match="must be typed Secret"):

        @tools.tool(secrets={"token": lambda: "t"})
        def f(token: str) -> None: ...

    tools.tool(lambda: 1, name="dup")
    with pytest.raises(TorporError, match="already registered"):
        tools.tool(lambda: 2, name="dup")


def test_transient_errors_are_retried_with_backoff() -> None:
    tools = Tools()
    attempts: list[float] = []

    @tools.tool(retry=FAST)
    def flaky() -> str:
        attempts.append(time.monotonic())
        if len(attempts) < 3:
            raise TransientError("503")
        return "ok"

    @tools.tool(retry=FAST)
    def broken() -> str:
        attempts.append(time.monotonic())
        raise ValueError("a bug, not transient")

    assert tools["flaky"].invoke({}) == "ok" and len(attempts) == 3
    attempts.clear()
    with pytest.raises(ValueError):
        tools["broken"].invoke({})
    assert len(attempts) == 1


def test_effects_retry_only_when_that_cannot_duplicate_them() -> None:
    tools = Tools()
    calls: dict[str, int] = {"plain": 0, "keyed": 0, "refused": 0}

    @tools.tool(policy="effect", retry=FAST)
    def plain() -> None:
        calls["plain"] += 1
        raise ConnectionError("reset after sending?")

    @tools.tool(policy="effect", retry=FAST)
    def keyed(idempotency_key: str) -> str:
        calls["keyed"] += 1
        if calls["keyed"] < 2:
            raise ConnectionError("reset")
        return idempotency_key

    @tools.tool(policy="effect", retry=FAST)
    def refused() -> None:
        calls["refused"] += 1
        raise EffectNotApplied("429 before anything happened")

    with pytest.raises(ConnectionError):
        tools["plain"].invoke({})
    assert tools["keyed"].invoke({}, idempotency_key="k-1") == "k-1"
    with pytest.raises(EffectNotApplied):
        tools["refused"].invoke({})
    assert calls == {"plain": 1, "keyed": 2, "refused": 3}


def test_timeouts_sync_and_async() -> None:
    """A tool's timeout ends the call while its work is still going on: the work finishes only
    when the test says (``release``), after both timeouts were raised — order, not a budget."""
    tools = Tools()
    release = threading.Event()
    finished: list[str] = []

    @tools.tool(timeout=0.1, retry=None)
    def slow() -> str:
        release.wait(120)  # a hang guard
        finished.append("slow")
        return "late"

    @tools.tool(timeout=0.1, retry=None)
    async def aslow() -> str:
        while not release.is_set():
            await asyncio.sleep(0.01)
        finished.append("aslow")
        return "late"

    @tools.tool(timeout=1)
    async def quick(x: int) -> int:
        return x * 2

    try:
        with pytest.raises(ToolTimeoutError) as info:
            tools["slow"].invoke({})
        assert info.value.future is not None and not info.value.future.done()
        with pytest.raises(ToolTimeoutError):
            tools["aslow"].invoke({})
        assert finished == [], "a timeout waited for the work it gave up on"
    finally:
        release.set()
    assert tools["quick"].invoke({"x": 4}) == 8


def test_secrets_are_marked_provided_and_scrubbed() -> None:
    tools = Tools()

    @tools.tool(secrets={"api_key": lambda: "key-from-env-123"})
    def fetch(url: str, password: Secret, api_key: Secret) -> str:
        return f"{url} {password} {api_key}"

    t = tools["fetch"]
    assert t.secret_fields == {"password"}
    assert set(t.spec().parameters["properties"]) == {"url", "password"}
    assert t.spec().parameters["properties"]["password"]["writeOnly"] is True
    assert t.invoke({"url": "u", "password": "pw-xyz1"}) == "u pw-xyz1 key-from-env-123"

    vault = Vault(b"k1")
    marker = vault.redact("pw-xyz1")
    assert vault.reveal(marker) == "pw-xyz1"
    assert Vault(b"k1").reveal(marker) is None  # another process: only the hash is known
    assert Vault(b"k1", ["pw-xyz1"]).reveal(marker) == "pw-xyz1"  # matched by its hash
    assert Vault(b"k2").digest("pw-xyz1") != marker["$secret"]  # keyed: not a bare sha256
    scrubbed = vault.scrub({"msg": "login pw-xyz1 failed", "n": [1, "pw-xyz1"]})
    assert "pw-xyz1" not in str(scrubbed) and scrubbed["msg"].startswith("login [secret:")
