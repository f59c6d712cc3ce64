"""Generic plans on PostgreSQL's hot paths (issue 48): psycopg prepares a statement after its
fifth use on a connection (``prepare_threshold``), and PostgreSQL then plans it once with no
parameter values (a *generic* plan) when that plan's estimate is no worse than the custom
plans' average — ``plan_cache_mode = auto``, the default (PostgreSQL docs, "PREPARE": "the
first five executions are done with custom plans ... a generic plan is created and its
estimated cost is compared to the average custom-plan cost"). A filter such as
``:x IS NULL OR col = :x`` then cannot be simplified, and an index search may become a walk.

For each query the store runs on a hot path (claim, wake, ls, show, lease renew, append) this
builds the scale section's big store (:func:`scale.build`), ``PREPARE``s the store's own SQL
and ``EXECUTE``s it 6 times with real arguments (so the plan cache has decided), then
``EXPLAIN (ANALYZE, BUFFERS) EXECUTE`` under ``auto`` and again under ``force_custom_plan``,
each in a transaction rolled back. Reported: execution ms of each, whether ``auto`` chose the
generic plan, the index/scan lines of each plan.

    uv run python bench/pg_plans.py                          # 1,000,000 + 100,000
    uv run python bench/pg_plans.py --finished 100000 --waiting 10000

Results: ``bench/results/pg_plans.json`` and a table on stdout.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import pg_schema, save, table

_PARAM = re.compile(r"(?<![:\w]):(\w+)")


def _prepare(sql: str) -> tuple[str, list[str]]:
    """``sql`` with ``:name`` parameters as ``$n`` (first appearance order) and the names."""
    names: list[str] = []

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    return _PARAM.sub(sub, sql.strip().rstrip(";")), names


Case = tuple[str, Callable[[int], dict[str, Any]]]


def cases(store: Any, big: dict[str, Any]) -> dict[str, Case]:
    """query case -> (named query, arguments of its i-th execution)."""
    import torpor

    rt = torpor.Runtime(big["url"])
    try:
        rid = rt.start("bench.scale.done", 1)
        lease = rt.store.claim_next("plans", 600)
        assert lease is not None and lease.run_id == rid
        seq = rt.store.get_run(rid).last_seq
    finally:
        rt.close()
    now = store.now_ms()
    accept = '{"bench.scale.done": ["1"], "bench.scale.wait": ["1"]}'
    own = {"run_id": rid, "owner": "plans", "epoch": lease.epoch}
    waiters, shown = big["waiters"], big["shown"]
    ev = {"type": "step_completed", "step_id": "x", "at_ms": now, "v": 1, "payload": "{}",
          "effect_key": None}  # fmt: skip
    claim = {"owner": "o", "ttl_ms": 1000, "exclude": "[]", "skip_queues": "[]", "top_k": 8,
             "now_ms": now}  # fmt: skip
    filt = {"status": None, "outcome": None, "workflow": None, "attention": None, "limit": 50}
    return {
        "claim (any workflow)": ("claim_next", lambda i: {**claim, "accept": None}),
        "claim (a worker's accept)": ("claim_next", lambda i: {**claim, "accept": accept}),
        "wake_run": ("wake_run", lambda i: {"run_id": waiters[i % len(waiters)], "now_ms": now}),
        "insert_inbox (signal)": (
            "insert_inbox",
            lambda i: {
                "message_id": f"m{i}",
                "run_id": waiters[0],
                "kind": "signal",
                "body": "{}",
                "now_ms": now,
            },
        ),
        "ls (no filter)": ("list_runs", lambda i: filt),
        "ls --status waiting": ("list_runs", lambda i: {**filt, "status": "waiting"}),
        "ls --status finished": ("list_runs", lambda i: {**filt, "status": "finished"}),
        "ls --workflow": ("list_runs", lambda i: {**filt, "workflow": "bench.scale.wait"}),
        "ls --attention": ("list_runs", lambda i: {**filt, "attention": True}),
        "show: get_run": ("get_run", lambda i: {"run_id": shown}),
        "show: events_after": (
            "events_after",
            lambda i: {"run_id": shown, "after_seq": 0, "limit": 1000},
        ),
        "renew_lease": ("renew_lease", lambda i: {**own, "ttl_ms": 600_000}),
        "append_event": ("append_event", lambda i: {**own, **ev, "seq": seq + 1 + i}),
        "pending_inbox": ("pending_inbox", lambda i: {"run_id": waiters[0]}),
        "next_wake_at (accept)": ("next_wake_at", lambda i: {"accept": accept}),
    }


def _scan_lines(rows: list[str]) -> list[str]:
    keep = ("Scan", "Limit", "Sort", "Execution", "Planning", "JIT", "Timing")
    return [r.strip() for r in rows if any(k in r for k in keep)]


def sweep(url: str, big: dict[str, Any], executions: int = 6) -> dict[str, Any]:
    """Each case: ``auto`` vs ``force_custom_plan`` execution ms and plan lines."""
    import psycopg

    from torpor.store import open_store

    store = open_store(url)
    out: dict[str, Any] = {}
    try:
        todo = cases(store, big)
        q = store.q  # type: ignore[attr-defined]
        with psycopg.connect(url, cursor_factory=psycopg.ClientCursor) as conn:
            for n, (case, (name, args)) in enumerate(todo.items()):
                sql, names = _prepare(q[name])
                res: dict[str, Any] = {"query": name}
                for mode in ("auto", "force_custom_plan", "jit_off"):
                    stmt = f"s{n}_{mode[:4]}"
                    with conn.transaction(force_rollback=True), conn.cursor() as cur:
                        if mode == "jit_off":
                            cur.execute("SET LOCAL jit = off")
                        else:
                            cur.execute(f"SET LOCAL plan_cache_mode = {mode}")
                        cur.execute(f"PREPARE {stmt} AS {sql}")
                        ph = ", ".join(["%s"] * len(names))
                        call = f"EXECUTE {stmt}({ph})" if names else f"EXECUTE {stmt}"
                        for i in range(executions):
                            a = args(i)
                            cur.execute(call, [a[k] for k in names])
                        a = args(executions)
                        cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + call, [a[k] for k in names])
                        rows = [str(r[0]) for r in cur.fetchall()]
                        cur.execute(f"DEALLOCATE {stmt}")
                    ex = next(float(r.split()[-2]) for r in rows if "Execution Time" in r)
                    res[mode] = {
                        "exec_ms": ex,
                        "generic": any(re.search(r"\$\d", r) for r in rows),
                        "jit": any(r.startswith("JIT") for r in rows),
                        "plan": _scan_lines(rows),
                    }
                out[case] = res
                print(f"[pg_plans] {case}: auto {res['auto']['exec_ms']:.2f} ms "
                      f"(generic={res['auto']['generic']}), custom "
                      f"{res['force_custom_plan']['exec_ms']:.2f} ms, jit={res['auto']['jit']}, "
                      f"jit off {res['jit_off']['exec_ms']:.2f} ms", flush=True)  # fmt: skip
    finally:
        store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--finished", type=int, default=1_000_000)
    ap.add_argument("--waiting", type=int, default=100_000)
    args = ap.parse_args(argv)
    from scale import build

    with pg_schema() as url:
        big = build(url, args.finished, args.waiting, 8)
        print(f"[pg_plans] loaded in {big['load_s']:.0f} s", flush=True)
        res = sweep(url, big)
    rows = [
        [case, r["query"], f"{r['auto']['exec_ms']:.2f}", "yes" if r["auto"]["generic"] else "no",
         f"{r['force_custom_plan']['exec_ms']:.2f}", "yes" if r["auto"]["jit"] else "no",
         f"{r['jit_off']['exec_ms']:.2f}"]
        for case, r in res.items()
    ]  # fmt: skip
    heads = ["case", "query", "auto ms", "generic", "custom ms", "JIT", "jit=off ms"]
    print(table(heads, rows))
    for case, r in res.items():
        if r["auto"]["generic"]:
            print(f"\n{case}, generic plan:\n  " + "\n  ".join(r["auto"]["plan"]))
            print("custom plan:\n  " + "\n  ".join(r["force_custom_plan"]["plan"]))
    print(save("pg_plans", {"finished": args.finished, "waiting": args.waiting, "cases": res}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
