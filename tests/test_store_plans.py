"""The queries whose cost must not grow with the store (issue 48; ``bench/scale.py`` measures
them on a million runs) use their indexes: ``EXPLAIN QUERY PLAN`` on SQLite, ``EXPLAIN`` with
sequential scans disabled on PostgreSQL (a tiny table would otherwise be scanned whatever the
indexes), on a small store. A plan that reads every run (``SCAN runs``, ``Seq Scan on runs``)
or sorts them all for a page fails."""

from __future__ import annotations

import re
from typing import Any

import pytest

from torpor.history import RunStarted
from torpor.store import open_store

pytestmark = pytest.mark.fast

QUERIES = ("list_runs", "get_run", "claim_next", "wake_run", "insert_inbox")

DEFAULTS: dict[str, Any] = {
    "limit": 50, "run_id": "r", "now_ms": 1, "owner": "o", "ttl_ms": 1, "exclude": "[]",
    "message_id": "m", "kind": "signal", "body": "{}", "top_k": 8, "skip_queues": "[]",
}  # fmt: skip


def plans(url: str) -> dict[str, str]:
    s = open_store(url)
    out = {}
    try:
        with s.driver.transaction() as cur:
            if not url.startswith("sqlite"):
                s.driver.execute(cur, "SET LOCAL enable_seqscan = off", {})
            for name in QUERIES:
                sql = s.q[name]
                params = {p: DEFAULTS.get(p) for p in re.findall(r"(?<!:):(\w+)", sql)}
                prefix = "EXPLAIN QUERY PLAN " if url.startswith("sqlite") else "EXPLAIN "
                rows = s.driver.fetchall(cur, prefix + sql, params)
                out[name] = "\n".join(str(r[-1]) for r in rows)
    finally:
        s.close()
    return out


def test_the_scale_queries_use_their_indexes(store_url: str) -> None:
    p = plans(store_url)
    if store_url.startswith("sqlite"):
        for name in QUERIES:
            assert not re.search(r"^SCAN (runs|r)$", p[name], re.M), (name, p[name])
        # ls: the newest page walks runs_newest and stops; no sort of every run
        assert "USING INDEX runs_newest" in p["list_runs"]
        assert "TEMP B-TREE FOR ORDER BY" not in p["list_runs"]
        # claim: each arm of the candidates an index search; the waiting runs found by due
        # time and by lease, not all visited
        assert "runs_dispatch (status=? AND wake_at_ms<?)" in p["claim_next"], p["claim_next"]
        assert "USING INDEX runs_held" in p["claim_next"], p["claim_next"]
    else:
        for name in QUERIES:
            assert "Seq Scan on runs" not in p[name], (name, p[name])
        assert "runs_newest" in p["list_runs"], p["list_runs"]


def test_postgres_store_sessions_never_jit_compile(store_url: str) -> None:
    """JIT off on every store connection (pooled and a thread's appender): on a million-run
    store the claim's cost estimate passes ``jit_above_cost`` and compiling it took 113-174 ms
    of a 0.1 ms execution (``bench/pg_plans.py``). Here the threshold is forced to 0, so a
    session with JIT on compiles this claim (the control, where the server has a provider)."""
    if store_url.startswith("sqlite"):
        pytest.skip("PostgreSQL's JIT")
    s = open_store(store_url)
    sql = s.q["claim_next"]
    params = {p: DEFAULTS.get(p) for p in re.findall(r"(?<!:):(\w+)", sql)}
    params["accept"] = '{"w": ["1"]}'

    def jit_lines(jit: str | None) -> list[str] | None:
        with s.driver.transaction() as cur:
            if jit:
                s.driver.execute(cur, f"SET LOCAL jit = {jit}", {})
            elif s.driver.fetchone(cur, "SHOW jit", {}) != ("off",):
                return None
            if jit and not s.driver.fetchone(cur, "SELECT pg_jit_available()", {})[0]:
                return None  # no provider: nothing to control
            s.driver.execute(cur, "SET LOCAL jit_above_cost = 0", {})
            rows = s.driver.fetchall(cur, "EXPLAIN (ANALYZE) " + sql, params)
            return [str(r[0]) for r in rows if str(r[0]).startswith("JIT")]

    try:
        assert jit_lines(None) == []  # the store's session: no JIT whatever the cost
        control = jit_lines("on")
        assert control is None or control, "JIT forced on did not compile: the check is blind"
        assert s.driver.fetch_one("SHOW jit", {}) == ("off",)  # the appender connection
    finally:
        s.close()


def test_next_timer_is_an_ordered_walk_that_stops(store_url: str) -> None:
    """An idle worker's ``next_wake_at`` (with its ``accept``) walks runs_dispatch in deadline
    order and stops at the first timer: a min() over every waiting run read 100,000 of them on
    each poll (130-170 ms on the scale bench's PostgreSQL store, ``bench/pg_plans.py``)."""
    s = open_store(store_url)
    try:
        with s.driver.transaction() as cur:
            sqlite = store_url.startswith("sqlite")
            if not sqlite:
                s.driver.execute(cur, "SET LOCAL enable_seqscan = off", {})
                s.driver.execute(cur, "SET LOCAL enable_bitmapscan = off", {})
            sql = s.q["next_wake_at"]
            params = {"accept": '{"w": ["1"]}', "now_ms": 1}
            prefix = "EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN "
            plan = "\n".join(str(r[-1]) for r in s.driver.fetchall(cur, prefix + sql, params))
    finally:
        s.close()
    if sqlite:
        assert "runs_dispatch (status=? AND wake_at_ms>?)" in plan, plan
        assert "TEMP B-TREE" not in plan and not re.search(r"SCAN runs$", plan, re.M), plan
    else:
        assert re.search(r"Limit.*\n.*Index Scan using runs_dispatch", plan), plan
        assert "Seq Scan on runs" not in plan, plan


def _plan(s: Any, sqlite: bool, name: str, params: dict[str, Any], off: tuple[str, ...]) -> str:
    with s.driver.transaction() as cur:
        if not sqlite:
            for setting in off:  # a tiny table would be scanned whatever the indexes
                s.driver.execute(cur, f"SET LOCAL {setting} = off", {})
        prefix = "EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN "
        rows = s.driver.fetchall(cur, prefix + s.q[name], params)
    return "\n".join(str(r[-1]) for r in rows)


def test_the_attention_page_walks_its_partial_index(store_url: str) -> None:
    """``ls --attention`` walks runs_attention (migration 0022: the runs needing attention
    alone) in page order and stops at the page; through runs_newest it read every run of a
    store where few need attention (317-366 ms on the scale bench's 1.1M-run PostgreSQL store,
    ``bench/pg_plans.py``). With a filter the walk still reads only runs needing attention."""
    sqlite = store_url.startswith("sqlite")
    s = open_store(store_url)
    try:
        for filt in ({}, {"status": "waiting"}, {"workflow": "w"}):
            params = {"status": None, "outcome": None, "workflow": None, "limit": 50, **filt}
            plan = _plan(s, sqlite, "list_runs_attention", params, ("enable_seqscan",))
            # never a walk of every run (runs_newest), nor a scan
            assert "runs_newest" not in plan and "Seq Scan on runs" not in plan, (filt, plan)
            assert not re.search(r"^SCAN runs$", plan, re.M), (filt, plan)
            if sqlite:
                assert "USING INDEX runs_attention" in plan, (filt, plan)
                assert "TEMP B-TREE" not in plan, (filt, plan)
            elif not filt:  # (with a status, PostgreSQL may search runs_dispatch by it)
                assert re.search(r"Limit.*\n.*Index Scan using runs_attention", plan), plan
                assert "Sort" not in plan, plan
    finally:
        s.close()


def test_the_attention_page_is_the_filtered_listing(store_url: str) -> None:
    """The attention query (its own SQL, for its index) lists what the general one does with
    ``attention=True``: the newest runs needing attention, under every other filter and the
    limit. (Which runs need attention is set on their rows here: the listing is under test,
    not how the engine records it — tests/test_stuck_runs.py covers that.)"""
    s = open_store(store_url)
    try:
        for i in range(12):
            s.create_run(f"r{i:02d}", RunStarted(workflow="wa" if i % 2 else "wb", version="1"))
        with s.driver.transaction() as cur:
            for sql in (
                "UPDATE runs SET created_at_ms = :base + CAST(substr(run_id, 2) AS integer)",
                "UPDATE runs SET attention = 'stuck: ' || run_id WHERE run_id IN "
                "('r01', 'r02', 'r03', 'r05', 'r08', 'r09', 'r11')",
                "UPDATE runs SET status = 'waiting' WHERE run_id IN ('r03', 'r04', 'r08')",
            ):
                s.driver.execute(cur, sql, {"base": 10**12})
        assert [r.run_id for r in s.list_runs(attention=True, limit=3)] == ["r11", "r09", "r08"]
        for filt in ({}, {"workflow": "wa"}, {"status": "pending"}, {"status": "waiting"}):
            for limit in (2, 50):
                every = s.list_runs(limit=100, **filt)  # type: ignore[arg-type]
                want = [r.run_id for r in every if r.attention][:limit]
                got = s.list_runs(attention=True, limit=limit, **filt)  # type: ignore[arg-type]
                assert [r.run_id for r in got] == want, (filt, limit)
                assert all(r.attention == f"stuck: {r.run_id}" for r in got)
        assert s.list_runs(attention=True, workflow="wb", limit=1)[0].run_id == "r08"
        assert len(s.list_runs(attention=False, limit=100)) == 5
    finally:
        s.close()


def test_the_next_delayed_start_is_an_ordered_walk_that_stops(store_url: str) -> None:
    """``next_wake_at``'s delayed starts walk runs_delayed (migration 0023: pending runs with a
    ``not_before_ms`` alone) in start order and stop at the first one ``accept`` takes: before,
    every pending run was read on each idle worker's poll (a queue's backlog)."""
    sqlite = store_url.startswith("sqlite")
    s = open_store(store_url)
    try:
        params = {"accept": '{"w": ["1"]}', "now_ms": 1}
        off = ("enable_seqscan", "enable_bitmapscan")
        plan = _plan(s, sqlite, "next_wake_at", params, off)
    finally:
        s.close()
    if sqlite:
        assert "runs_delayed (status=? AND not_before_ms>?)" in plan, plan
        assert "TEMP B-TREE" not in plan, plan
    else:
        assert re.search(r"Limit.*\n.*Index Scan using runs_delayed", plan), plan
        assert "Seq Scan on runs" not in plan, plan


def test_postgres_claims_are_planned_once_per_connection(store_url: str) -> None:
    """The claim runs on the thread's appender connection with a generic plan, prepared once:
    under PostgreSQL's default the claim's generic estimate came out above the custom plans' on
    a million-run store, so every claim was planned again (~1.5 ms of a 0.2 ms execution,
    ``bench/scale.py --backend postgres``). ``LIMIT`` is the number in the statement's text
    (one text per limit), so that plan is made for 16 runs, not a guessed tenth of them."""
    if store_url.startswith("sqlite"):
        pytest.skip("PostgreSQL's plan cache")
    s = open_store(store_url)
    try:
        for i in range(8):  # psycopg prepares a statement after its fifth use
            s.create_run(f"c{i}", RunStarted(workflow="w", version="1"))
            assert s.claim_next("o", 60_000, accept={"w": ["1"]}) is not None
        row = s.driver.fetch_one(  # on the appender connection, as the claims were
            "SELECT count(*), sum(generic_plans), sum(custom_plans) FROM pg_prepared_statements "
            "WHERE position('SKIP LOCKED' in statement) > 0",
            {},
        )
    finally:
        s.close()
    assert row is not None
    prepared, generic, custom = row
    assert prepared == 1, row  # one text: LIMIT 16 (no claim looked further)
    assert generic >= 3 and custom == 0, row
