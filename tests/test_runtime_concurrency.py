"""Concurrent async primitives: ids numbered in call order must not depend on timing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import torpor

CHARGED: list[str] = []


def _charge(customer: str, idempotency_key: str) -> dict[str, str]:
    CHARGED.append(customer)
    return {"charged": customer}


@torpor.workflow(name="concurrency.same_ids")
async def same_ids(run: torpor.Run, customers: list[str]) -> Any:
    async def one(c: str) -> Any:
        await asyncio.sleep(0)
        return await run.aeffect("charge", _charge, c)

    return await asyncio.gather(*[one(c) for c in customers])


@torpor.workflow(name="concurrency.distinct_ids")
async def distinct_ids(run: torpor.Run, customers: list[str]) -> Any:
    async def one(c: str) -> Any:
        await asyncio.sleep(0)
        return await run.aeffect(f"charge:{c}", _charge, c)

    return await asyncio.gather(*[one(c) for c in customers])


@torpor.workflow(name="concurrency.sequential")
async def sequential(run: torpor.Run, customers: list[str]) -> Any:
    return [await run.aeffect("charge", _charge, c) for c in customers]


def test_concurrent_calls_sharing_an_id_are_refused_before_any_effect(
    runtime: torpor.Runtime,
) -> None:
    CHARGED.clear()
    with pytest.raises(
        torpor.NonDeterminismError, match="step id 'charge' is used from two concurrent"
    ):
        runtime.run("concurrency.same_ids", ["alice", "bob"], run_id="same")
    # The run is untouched apart from what the first call recorded; the second never ran.
    assert CHARGED.count("bob") == 0


def test_distinct_ids_and_sequential_reuse_are_fine(runtime: torpor.Runtime) -> None:
    CHARGED.clear()
    res = runtime.run("concurrency.distinct_ids", ["alice", "bob", "carol"], run_id="d")
    assert res.outcome == "succeeded"
    assert sorted(CHARGED) == ["alice", "bob", "carol"]
    CHARGED.clear()
    res = runtime.run("concurrency.sequential", ["alice", "bob"], run_id="s")
    assert (res.outcome, CHARGED) == ("succeeded", ["alice", "bob"])
