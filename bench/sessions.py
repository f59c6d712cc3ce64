"""Sessions (issue 46): how fast a sleeping session wakes, and what it costs while it sleeps.

**Wake**: from ``Sessions.send`` returning to the first model call of the turn starting (the
model writes the wall-clock time it was called), with one idle worker process holding nothing
for the session. Measured for sessions that have already handled 1, 1,000 and 100,000 turns,
and — interleaved in the same run, by the same worker — the signal wake of a plain run
(``run.wait_for("go")`` then a step that stamps the time; as bench/wake_latency.py).

How the sessions are built: the 1-turn and 1,000-turn sessions by real turns (send, then the
segment runs in this process until it sleeps; 200 turns per segment, so 1,000 turns are five
segments and the sixth waits). The 100,000-turn one: 99,000 handled messages bulk-inserted by
SQL into its inbox (``session_messages``) and 495 ``session_segments`` rows, then 1,000 real
turns as above, then its turn count set to 100,000 — its *current* segment is real, the older
segments' runs are not built (they are finished runs a wake never reads: retention archives
them).

**Idle footprint**: for each session, its rows (session, inbox, segments, the current
segment's events) and bytes (``Store.run_storage`` of the current segment: history,
checkpoint, inbox), and whether anything is held: the segment's lease (none) and its status.

    uv run python bench/sessions.py [--wakes 30] [--backends sqlite,postgres] [--big 100000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import WorkerProcs, load_module, percentile, save, table, write_module
from wake_latency import store_url

MODULE = """
import re, time
import torpor
from torpor.messages import Message, ModelResponse, TokenUsage
from torpor.sessions import SessionAgent

STAMPS = {stamps!r}


def stamp(tag):
    with open(STAMPS, "a") as f:
        f.write(f"{{tag}} {{time.time()!r}}\\n")


class Stamp:
    model_id = "stamp"

    def complete(self, messages, tools=()):
        said = re.findall(r"user: (.*)", "\\n".join(m.content for m in messages))
        last = said[-1] if said else "?"
        if last.startswith("wake-"):
            stamp(last)
        return ModelResponse(message=Message(role="assistant", content="ok"),
                             usage=TokenUsage(input_tokens=10, output_tokens=2), model="stamp")


agent = torpor.Agent("bench.session", goal="talk", tools=torpor.Tools(),
                     planner=torpor.ReActPlanner(Stamp()))
chat = SessionAgent(agent, segment_turns=200)


@torpor.workflow(name="bench.session.plain")
def plain(run, n):
    for i in range(n):
        run.wait_for("go")
        run.step(f"s{{i}}", stamp, f"plain-{{i}}")
    return n
"""


def drive(rt: Any, sessions: Any, name: str) -> None:
    while True:
        cur = sessions.get(name).run_id
        rt.resume(cur)
        if sessions.get(name).run_id == cur:
            return


def bulk_fill(store: Any, name: str, messages: int, segments: int) -> None:
    """``messages`` handled inbox rows and ``segments`` segment rows, by SQL (one statement
    each: a recursive series), before the session's real turns."""
    d = store.driver
    series = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :k) "
    with d.transaction() as cur:
        d.execute(
            cur,
            series + "INSERT INTO session_messages (session, seq, message_id, sender, text, "
            "sent_at_ms, status, run_id, turn, reply, reason, disposed_at_ms) "
            "SELECT :s, i, :s || '-bulk-' || i, 'user', 'an old message ' || i, 0, 'handled', "
            "'session:' || :s || ':0', i, 'ok', NULL, 0 FROM n",
            {"s": name, "k": messages},
        )
        d.execute(
            cur,
            series + "INSERT INTO session_segments (session, segment, run_id, first_turn, "
            "started_at_ms) SELECT :s, -i, 'session:' || :s || ':old' || i, 1 + (i - 1) * 200, "
            "0 FROM n",
            {"s": name, "k": segments},
        )


def build(rt: Any, sessions: Any, mod: Any, name: str, turns: int, big: int) -> None:
    sessions.start(name, mod.chat)
    drive(rt, sessions, name)
    real = min(turns, 1000)
    if turns > real:
        bulk_fill(rt.store, name, turns - real, (turns - real) // 200)
    for i in range(real):
        sessions.send(name, f"turn {i} of the conversation")
        drive(rt, sessions, name)
    if turns > real:
        d = rt.store.driver
        with d.transaction() as cur:
            d.execute(
                cur, "UPDATE sessions SET turns = :t WHERE name = :s", {"t": turns, "s": name}
            )


def footprint(rt: Any, sessions: Any, name: str) -> dict[str, Any]:
    s = sessions.get(name)
    rec = rt.store.get_run(s.run_id)
    st = rt.store.run_storage(s.run_id)
    d = rt.store.driver
    with d.read() as cur:
        (msgs,) = d.fetchone(
            cur, "SELECT COUNT(*) FROM session_messages WHERE session = :s", {"s": name}
        )
        (segs,) = d.fetchone(
            cur, "SELECT COUNT(*) FROM session_segments WHERE session = :s", {"s": name}
        )
        (lease,) = d.fetchone(
            cur, "SELECT lease_owner FROM runs WHERE run_id = :r", {"r": s.run_id}
        )
    return {
        "turns": s.turns,
        "segment": s.segment,
        "inbox_rows": int(msgs),
        "segment_rows": int(segs),
        "segment_events": int(rec.last_seq),
        "segment_bytes": int(st.total_bytes),
        "status": rec.status,
        "lease_owner": lease,
    }


def wait_stamp(stamps: Path, tag: str, deadline: float) -> float:
    while True:
        for line in stamps.read_text().splitlines():
            if line.startswith(tag + " "):
                return float(line.split()[1])
        if time.monotonic() > deadline:
            raise RuntimeError(f"no stamp {tag!r}")
        time.sleep(0.0005)


def measure(backend: str, sizes: list[int], wakes: int, idle_s: float) -> dict[str, Any]:
    import torpor
    from torpor.sessions import Sessions

    with tempfile.TemporaryDirectory(prefix="torpor-sessions-") as d:
        tmp = Path(d)
        stamps = tmp / "stamps"
        stamps.touch()
        modname = write_module(tmp, "bench_sessions_wf", MODULE.format(stamps=str(stamps)))
        load_module(tmp, modname)
        mod = sys.modules[modname]
        with store_url(backend, tmp) as url:
            rt = torpor.Runtime(url)
            client = torpor.Client(rt.store)
            sessions = Sessions(client)
            built: dict[int, float] = {}
            for n in sizes:
                t0 = time.perf_counter()
                build(rt, sessions, mod, f"s{n}", n, max(sizes))
                built[n] = time.perf_counter() - t0
            idle = {n: footprint(rt, sessions, f"s{n}") for n in sizes}
            plain_id = rt.start("bench.session.plain", wakes, run_id="plain")
            workers = WorkerProcs(url, tmp, modname, concurrency=1)
            workers.start(1, gated=False)
            lat: dict[str, list[float]] = {"plain": [], **{str(n): [] for n in sizes}}
            try:
                for i in range(wakes):
                    for key in ["plain", *map(str, sizes)]:  # interleaved, the same worker
                        deadline = time.monotonic() + 60
                        if key == "plain":
                            while client.get(plain_id).status != "waiting":
                                time.sleep(0.002)
                        else:
                            while (
                                rt.store.get_run(sessions.get(f"s{key}").run_id).status != "waiting"
                            ):
                                time.sleep(0.002)
                        time.sleep(idle_s)  # the worker is idle, blocked waiting for a wakeup
                        t0 = time.time()
                        if key == "plain":
                            client.signal(plain_id, "go", i, message_id=f"go-{i}")
                            tag = f"plain-{i}"
                        else:
                            tag = f"wake-{key}-{i}"
                            sessions.send(f"s{key}", tag)
                        lat[key].append((wait_stamp(stamps, tag, deadline) - t0) * 1000)
            finally:
                workers.stop()
                rt.close()
    return {
        "wake": {
            k: {
                "n": len(v),
                "p50_ms": percentile(v, 50),
                "p99_ms": percentile(v, 99),
                "max_ms": max(v),
            }
            for k, v in lat.items()
        },
        "idle": {str(n): v for n, v in idle.items()},
        "build_s": {str(n): v for n, v in built.items()},
    }


def report(results: dict[str, Any]) -> str:
    rows = []
    for backend, r in results.items():
        if "error" in r:
            rows.append([backend, "error", r["error"], "", "", "", "", "", ""])
            continue
        plain = r["wake"]["plain"]
        for key, w in r["wake"].items():
            idle = r["idle"].get(key, {})
            rows.append(
                [
                    backend,
                    "plain run (signal)" if key == "plain" else f"session, {int(key):,} turns",
                    w["n"],
                    f"{w['p50_ms']:.1f}",
                    f"{w['p99_ms']:.1f}",
                    f"{w['p99_ms'] / plain['p99_ms']:.2f}x",
                    idle.get("inbox_rows", ""),
                    idle.get("segment_events", ""),
                    idle.get("segment_bytes", ""),
                ]
            )
    return table(
        [
            "backend",
            "wake of",
            "wakes",
            "p50 ms",
            "p99 ms",
            "p99 vs plain",
            "inbox rows",
            "segment events",
            "segment bytes",
        ],
        rows,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wakes", type=int, default=30, help="wakes per session size and backend")
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--sizes", default="1,1000,100000", help="turns handled before the wakes")
    ap.add_argument("--idle", type=float, default=0.05, help="idle time before each wake (s)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    results: dict[str, Any] = {}
    for backend in args.backends.split(","):
        results[backend] = measure(backend, sizes, args.wakes, args.idle)
        save("sessions", {"results": results, "args": vars(args)})  # (each backend as it ends)
    print("Session wake, message sent -> first model call of the turn (one idle worker)\n")
    print(report(results))
    for backend, r in results.items():
        for n, f in r["idle"].items():
            print(f"{backend} idle session after {int(n):,} turns: {f}")
    path = save("sessions", {"results": results, "args": vars(args)})
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
