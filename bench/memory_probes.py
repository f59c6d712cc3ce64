"""Planted facts at their probe turns, over thousands of turns (issue 30): the fact ledger and
the ``recall`` section bring a fact back when a turn is about its subject.

    uv run python bench/memory_probes.py --phrasing heldout --turns 5000 --budgets 6000,16000

The world is the planted-fact world of ``bench/memory_facts.py`` (:mod:`bench.memory_world`,
written apart from any extractor), with probe turns added (:mod:`bench.memory_world.probes`:
the model's text of a filler turn names what a fact is about, in the world's own words, 30 to
1,500 turns after it was planted). One uninterrupted run per budget (the default working
memory, recall on); in the run's process a hook reads the context of every probe turn's model
call. Reported, per budget:

- **at their probe turn**: facts whose required probes (those the probe sentence does not
  itself hold) are in the context of that model call, per kind and per place;
- **last 40 in the plain next context**: of the 40 most recently planted facts still in force
  at the run's last model call, those in its context (the probe-free figure of issue 29);
- **cost per 1,000 turns**: wall time of the run, and of its ledger work (the records of each
  compaction: extraction, dedup, supersession) and its recall (the query and the section) as
  measured inside the run, with their share of the run's time; ledger rows and bytes.

Markdown on stdout; JSON to ``--json`` (default bench/results/memory_probes.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

NAME = "bench.memory_probes"
KINDS = ("identifier", "decision", "failed", "instruction", "commitment", "question")
PLACES = ("model", "tool", "operator")
LAST = 40


def _world(spec: str) -> tuple[Any, list[Any]]:
    from bench.memory_world import make_world
    from bench.memory_world.probes import with_probes

    turns, seed, family = spec.split(":")
    return with_probes(make_world(int(turns), int(seed), family), int(seed))


def child(argv: list[str]) -> None:
    """``URL BUDGET OUT``: the uninterrupted run with the probe hook; results to OUT."""
    url, budget, out = argv[0], int(argv[1]), Path(argv[2])
    import functools

    import torpor
    from bench import memory_agent as ma
    from bench.memory_world import haystack
    from torpor.agents import context_ledger as cl
    from torpor.agents import working

    spec = os.environ["MEMORY_WORLD"]
    world, probes = _world(spec)
    ma.world_of = functools.cache(lambda s: world)  # the world with its probe turns
    at = {p.turn: p for p in probes}
    at_turn = {p.fact_id: p.turn for p in probes}
    by_id = {f.id: f for f in world.facts}
    final = len(world.turns) - 2
    found: dict[str, bool] = {}
    plain: dict[str, Any] = {}
    spent = Counter[str]()

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t0

        return wrapper

    cl.LedgerCache.new_records = timed("ledger", cl.LedgerCache.new_records)  # type: ignore[method-assign]
    working.recall_section = timed("recall", working.recall_section)  # type: ignore[attr-defined]

    def texts(messages: Any) -> str:
        out = []
        for m in messages:
            out.append(m.content)
            out += [json.dumps(c.arguments) for c in m.tool_calls]
        return haystack(out)

    t_start = time.perf_counter()

    def hook(turn: int, messages: Any) -> None:
        if turn % 250 == 0:  # progress a long run can be read by (not the result)
            partial = {
                "turn": turn,
                "wall_s": time.perf_counter() - t_start,
                "ledger_s": spent["ledger"],
                "recall_s": spent["recall"],
                "probes": [{"id": k, "turn": at_turn[k], "kept": v} for k, v in found.items()],
            }
            out.with_suffix(".partial.json").write_text(json.dumps(partial))
        p = at.get(turn)
        if p is not None:
            text = texts(messages)
            found[p.fact_id] = all(x.found_in(text) for x in p.required)
        if turn == final:
            text = texts(messages)
            req = sorted(world.required(turn), key=lambda f: f.turn)[-LAST:]
            plain.update({f.id: f.kept(text) for f in req})

    ma.ON_CALL.append(hook)
    agent = ma.make_agent(NAME, budget)
    t0 = time.perf_counter()
    with torpor.Runtime(url) as rt:
        rt.run(agent, {"world": spec}, run_id="r")
    wall = time.perf_counter() - t0
    with torpor.Client(url) as c:
        ledger = c.ledger("r")
    rows = {
        "records": sum(1 for r in ledger if r.kind != "unit"),
        "units": sum(1 for r in ledger if r.kind == "unit"),
        "superseded": sum(1 for r in ledger if r.superseded_by),
        "text_bytes": sum(len(r.text.encode()) for r in ledger),
    }
    probed = [
        {"id": p.fact_id, "turn": p.turn, "kept": found.get(p.fact_id, False)} for p in probes
    ]
    facts = {f.id: {"kind": f.kind, "place": f.place, "turn": f.turn} for f in by_id.values()}
    out.write_text(
        json.dumps(
            {
                "wall_s": wall,
                "ledger_s": spent["ledger"],
                "recall_s": spent["recall"],
                "probes": probed,
                "facts": facts,
                "plain": plain,
                "rows": rows,
                "db_bytes": Path(url.removeprefix("sqlite:///")).stat().st_size,
            }
        )
    )


def measure(work: Path, turns: int, budget: int, family: str, seed: int) -> dict[str, Any]:
    spec = f"{turns}:{seed}:{family}"
    tag = f"{family}-{turns}-{budget}"
    out = work / f"{tag}.json"
    env = dict(os.environ, MEMORY_WORLD=spec, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'src'}")
    url = f"sqlite:///{work}/{tag}.db"
    proc = subprocess.run(
        [sys.executable, __file__, "child", url, str(budget), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=6 * 3600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"child {tag} ended {proc.returncode}:\n{proc.stderr[-3000:]}")
    data = json.loads(out.read_text())
    facts = data["facts"]
    probes = data["probes"]

    def cell(pick: list[dict[str, Any]]) -> dict[str, int]:
        return {"kept": sum(1 for p in pick if p["kept"]), "required": len(pick)}

    per = 1000 / turns
    return {
        "phrasing": family,
        "seed": seed,
        "turns": turns,
        "budget": budget,
        "probed": cell(probes),
        "kinds": {k: cell([p for p in probes if facts[p["id"]]["kind"] == k]) for k in KINDS},
        "places": {q: cell([p for p in probes if facts[p["id"]]["place"] == q]) for q in PLACES},
        "last40": {"kept": sum(data["plain"].values()), "required": len(data["plain"])},
        "wall_s_per_1000": data["wall_s"] * per,
        "ledger_s_per_1000": data["ledger_s"] * per,
        "recall_s_per_1000": data["recall_s"] * per,
        "ledger_share": data["ledger_s"] / data["wall_s"],
        "recall_share": data["recall_s"] / data["wall_s"],
        "rows": data["rows"],
        "rows_per_1000": {k: v * per for k, v in data["rows"].items()},
        "db_bytes": data["db_bytes"],
        "lost": [p for p in probes if not p["kept"]][:50],
    }


def _c(cell: dict[str, int]) -> str:
    if not cell["required"]:
        return "-"
    return f"{cell['kept']}/{cell['required']} ({cell['kept'] / cell['required']:.0%})"


def report(rows: list[dict[str, Any]], load: str) -> str:
    r0 = rows[0]
    lines = [
        f"## Facts at their probe turns (phrasing `{r0['phrasing']}`, seed {r0['seed']}; "
        f"load {load})",
        "",
        "| turns | budget | at probe turn | model text | tool output | operator | last 40 in "
        "plain next context |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = r["places"]
        lines.append(
            f"| {r['turns']:,} | {r['budget']:,} | {_c(r['probed'])} | {_c(p['model'])}"
            f" | {_c(p['tool'])} | {_c(p['operator'])} | {_c(r['last40'])} |"
        )
    lines += ["", "Per kind (at probe turn):", "", "| turns | budget | " + " | ".join(KINDS) + " |"]
    lines.append("|---|---|" + "---|" * len(KINDS))
    for r in rows:
        lines.append(
            f"| {r['turns']:,} | {r['budget']:,} | "
            + " | ".join(_c(r["kinds"][k]) for k in KINDS)
            + " |"
        )
    lines += [
        "",
        "Cost per 1,000 turns (inside the run; the run's own wall time is the baseline):",
        "",
        "| turns | budget | run s | ledger s (share) | recall s (share) | records | unit rows "
        "| ledger text KB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        k = r["rows_per_1000"]
        lines.append(
            f"| {r['turns']:,} | {r['budget']:,} | {r['wall_s_per_1000']:.1f}"
            f" | {r['ledger_s_per_1000']:.2f} ({r['ledger_share']:.1%})"
            f" | {r['recall_s_per_1000']:.2f} ({r['recall_share']:.1%})"
            f" | {k['records']:.0f} | {k['units']:.0f} | {k['text_bytes'] / 1024:.0f} |"
        )
    return "\n".join(lines)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phrasing", choices=("dev", "heldout"), default="heldout")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--turns", type=_ints, default=[5000])
    ap.add_argument("--budgets", type=_ints, default=[6000, 16000])
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "memory_probes.json")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    configs = [(t, b) for t in args.turns for b in args.budgets]
    load = "{:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
    tmpdir = tempfile.TemporaryDirectory(prefix="torpor-memory-probes-", dir="/var/tmp")
    with tmpdir as tmp, ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [
            pool.submit(measure, Path(tmp), t, b, args.phrasing, args.seed) for t, b in configs
        ]
        rows = [f.result() for f in futures]
    print(report(rows, load))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2:])
    else:
        main()
