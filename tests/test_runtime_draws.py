"""Runtime-supplied values are recorded (issue 14): ``run.uuid()``, ``run.random()`` and
``run.now()`` are drawn once, recorded, and replayed — so a resumed run uses the id it drew
before the crash. A code change that adds a draw before an existing one is a divergence naming
both draws (nothing recorded), or takes the new path only for new runs under ``run.patched``:
never a silently different id."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

import torpor
from torpor.errors import NonDeterminismError

SEEN: list[dict[str, Any]] = []
SENT: list[str] = []


def send(order_id: str, idempotency_key: str) -> str:
    SENT.append(order_id)
    return order_id


@torpor.workflow(name="draws.basic", version="1")
def basic(run: torpor.Run, _: Any) -> dict[str, Any]:
    # A draw inside a step's function is the step's result (on replay the function does not
    # run): it is not recorded on its own, and the draws after it keep their ids.
    inner = run.step("inner", lambda: run.uuid())
    order = run.uuid()
    roll = run.random()
    at = run.now()
    other = run.uuid("other")
    SEEN.append({"inner": inner, "order": order, "roll": roll, "at": at, "other": other})
    run.wait_for("go")
    run.effect("charge", send, str(order))
    return {"order": str(order)}


def test_draws_are_recorded_once_and_replayed(store_url: str) -> None:
    SEEN.clear()
    SENT.clear()
    with torpor.Runtime(store_url) as rt:
        assert rt.run("draws.basic", None, run_id="d1").status == "waiting"
        time.sleep(0.02)  # the store clock moves on: a replayed now() must not
        client = torpor.Client(rt.store)
        client.signal("d1", "go")
    with torpor.Runtime(store_url) as rt:
        res = rt.resume("d1")
    assert res.outcome == "succeeded", res.reason
    first, replayed = SEEN
    assert first == replayed
    assert all(type(replayed[k]) is uuid.UUID for k in ("inner", "order", "other"))
    assert len({first["inner"], first["order"], first["other"]}) == 3
    assert 0.0 <= replayed["roll"] < 1.0 and isinstance(replayed["at"], float)
    assert abs(first["at"] - time.time()) < 60
    assert [str(first["order"])] == SENT and res.result == {"order": str(first["order"])}
    # One recorded event per draw, named after it.
    draws = [
        e.payload.step_id  # type: ignore[attr-defined]
        for e in torpor.Client(store_url).events("d1")
        if e.type == "step_completed"
        and e.payload.step_id in {"uuid", "random", "now", "uuid:other"}  # type: ignore[attr-defined]
    ]
    assert draws == ["uuid", "random", "now", "uuid:other"]


def _variant(name: str, new: str) -> None:
    """(Re)define workflow ``name``: ``order = run.uuid()`` preceded by the draw ``new`` (the
    code change), the same function either way."""

    @torpor.workflow(name=name, version="1")
    def flow(run: torpor.Run, _: Any) -> str:
        if new == "unnamed":
            trace = run.uuid()
        elif new == "named":
            trace = run.uuid("trace")
        elif new == "patched":
            trace = run.uuid() if run.patched("trace-id") else None
        else:
            trace = None
        order = run.uuid() if new != "named" else run.uuid("order")
        SEEN.append({"trace": trace, "order": order})
        run.wait_for("go")
        return str(order)


@pytest.mark.parametrize("new", ["unnamed", "named"])
def test_a_draw_added_before_an_existing_one_is_a_divergence_naming_both(
    store_url: str, new: str
) -> None:
    SEEN.clear()
    name = f"draws.added.{new}.{uuid.uuid4().hex[:6]}"
    if new == "unnamed":
        _variant(name, "none")
    else:

        @torpor.workflow(name=name, version="1")
        def old(run: torpor.Run, _: Any) -> str:
            order = run.uuid("order")
            SEEN.append({"order": order})
            run.wait_for("go")
            return str(order)

    with torpor.Runtime(store_url) as rt:
        assert rt.run(name, None, run_id="a1").status == "waiting"
        before = [e.seq for e in torpor.Client(rt.store).events("a1")]
        _variant(name, new)  # the code changes: a draw before the existing one
        with pytest.raises(NonDeterminismError) as info:
            rt.resume("a1")
        # Nothing written but the note of why the run cannot proceed.
        after = torpor.Client(rt.store).events("a1")
        assert [e.seq for e in after[: len(before)]] == before
        assert [e.type for e in after[len(before) :]] == ["attention_needed"]
    msg = str(info.value)
    if new == "unnamed":
        assert "trace = run.uuid()" in msg and "order = run.uuid()" in msg, msg
    else:
        assert "'uuid:trace'" in msg and "'uuid:order'" in msg, msg


def test_a_draw_added_under_run_patched_keeps_old_runs_on_their_ids(store_url: str) -> None:
    SEEN.clear()
    name = f"draws.patched.{uuid.uuid4().hex[:6]}"
    _variant(name, "none")
    with torpor.Runtime(store_url) as rt:
        assert rt.run(name, None, run_id="p-old").status == "waiting"
        old_order = SEEN[-1]["order"]
        _variant(name, "patched")
        assert rt.resume("p-old").status == "waiting"
        assert SEEN[-1] == {"trace": None, "order": old_order}  # the old path, the same id
        assert rt.run(name, None, run_id="p-new").status == "waiting"
        fresh = SEEN[-1]
        assert isinstance(fresh["trace"], uuid.UUID) and fresh["order"] != old_order
        client = torpor.Client(rt.store)
        client.signal("p-old", "go")
        res = rt.resume("p-old")
    assert (res.outcome, res.result) == ("succeeded", str(old_order))
