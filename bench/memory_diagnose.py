"""Where planted facts are lost (issue 30): one uninterrupted run of the planted-fact world
(:mod:`bench.memory_world`) in this process, its context at model call ``--at`` (default: the
last) captured, and every required fact not in that context put in one place:

- ``summary``: all its probes are in the running summary's lines — the context builder cut
  them (budget);
- ``ledger``: in the ledger's live fact records (not ``unit`` records), not in the summary —
  extracted, then dropped from the summary (trimmed, or ranked out);
- ``superseded``: only in fact records a later record superseded (supersession took it);
- ``unit``: only in a ``unit`` record's text or body (the turn is searchable, no fact record
  holds it: not extracted);
- ``absent``: in no record (never extracted, or clipped before the record was made).

    uv run python bench/memory_diagnose.py --turns 500 --budget 6000 --phrasing dev

Markdown on stdout (counts per place and kind, then each lost fact); ``--json`` writes them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

NAME = "bench.memory_diagnose"
WHERE = ("summary", "ledger", "superseded", "unit", "absent")


def _texts(messages: Any) -> list[str]:
    out = []
    for m in messages:
        out.append(m.content)
        out += [json.dumps(c.arguments) for c in m.tool_calls]
    return out


def diagnose(turns: int, budget: int, family: str, seed: int, at: int | None) -> dict[str, Any]:
    spec = f"{turns}:{seed}:{family}"
    os.environ["MEMORY_WORLD"] = spec
    import torpor
    from bench import memory_agent as ma
    from bench.memory_world import haystack
    from torpor.agents import working

    world = ma.world_of(spec)
    capture = at if at is not None else len(world.turns) - 1
    holder: dict[str, Any] = {}
    original = working.WorkingMemory.conversation

    def conversation(self: Any, *a: Any, **k: Any) -> Any:
        holder["wm"] = self
        return original(self, *a, **k)

    working.WorkingMemory.conversation = conversation  # type: ignore[method-assign]
    got: dict[str, Any] = {}

    def hook(turn: int, messages: Any) -> None:
        if turn != capture or got:
            return
        wm = holder["wm"]
        store = wm.ctx.run.journal.store
        rows = store.ledger(wm.ctx.run.run_id, upto=wm.compactions)
        got.update(
            messages=list(messages),
            summary="\n".join(x.shown() for x in wm.summary.lines),
            lines=[(x.score, x.weight, x.pinned, x.shown()) for x in wm.summary.lines],
            sections=dict(wm.pending.sections) if wm.pending else {},
            rows=[r.data for r in rows],
        )

    ma.ON_CALL.append(hook)
    t0 = time.perf_counter()
    with (
        tempfile.TemporaryDirectory() as d,
        torpor.Runtime(f"sqlite:///{d}/x.db") as rt,
        contextlib.suppress(Exception),  # the capture is what counts
    ):
        rt.run(ma.make_agent(NAME, budget), {"world": spec}, run_id="r")
    took = time.perf_counter() - t0
    working.WorkingMemory.conversation = original  # type: ignore[method-assign]
    text = haystack(_texts(got["messages"]))
    required = world.required(capture)
    gone = {k for r in got["rows"] for k in r.get("supersedes", [])}
    facts = [r for r in got["rows"] if r["kind"] != "unit"]
    live = haystack([r["text"] for r in facts if r["key"] not in gone])
    dead = haystack([r["text"] for r in facts if r["key"] in gone])
    units = haystack(
        [r["text"] + "\n" + r.get("body", "") for r in got["rows"] if r["kind"] == "unit"]
    )
    summary = haystack([got["summary"]])
    lost = []
    for f in required:
        if f.kept(text):
            continue
        where = next(
            (w for w, h in zip(WHERE, (summary, live, dead, units), strict=False) if f.kept(h)),
            "absent",
        )
        lost.append(
            {
                "id": f.id,
                "kind": f.kind,
                "place": f.place,
                "turn": f.turn,
                "where": where,
                "template": f.template,
                "cue_free": f.cue_free,
                "missing": [str(p) for p in f.probes if not p.found_in(text)],
                "statement": f.statement[:240],
            }
        )
    return {
        "spec": spec,
        "budget": budget,
        "at": capture,
        "required": len(required),
        "kept": len(required) - len(lost),
        "seconds": round(took, 1),
        "records": len(got["rows"]),
        "fact_records": len(facts),
        "by_where": dict(Counter(x["where"] for x in lost)),
        "by_kind": dict(Counter(x["kind"] for x in lost)),
        "by_place": dict(Counter(x["place"] for x in lost)),
        "by_kind_where": dict(Counter(f"{x['kind']}/{x['where']}" for x in lost)),
        "by_place_where": dict(Counter(f"{x['place']}/{x['where']}" for x in lost)),
        "lost": lost,
        "sections": got["sections"],
        "system": got["messages"][0].content if got["messages"] else "",
        "lines": got["lines"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phrasing", choices=("dev", "heldout"), default="dev")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--turns", type=int, default=500)
    ap.add_argument("--budget", type=int, default=6000)
    ap.add_argument("--at", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--quiet", action="store_true", help="counts only, not each lost fact")
    a = ap.parse_args()
    out = diagnose(a.turns, a.budget, a.phrasing, a.seed, a.at)
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    print(
        f"{out['spec']} budget {out['budget']} at turn {out['at']}: kept {out['kept']}/"
        f"{out['required']} ({out['seconds']} s, {out['records']} records, "
        f"{out['fact_records']} facts)"
    )
    for k in ("by_where", "by_kind", "by_place", "by_kind_where", "by_place_where"):
        print(k, json.dumps(out[k], sort_keys=True))
    if not a.quiet:
        for x in out["lost"]:
            print(
                f"- {x['kind']}/{x['place']}/{x['where']} t{x['turn']} {x['template']}: missing "
                f"{x['missing']} | {x['statement'][:160]!r}"
            )


if __name__ == "__main__":
    main()
