"""Planted facts an agent still has after a kill and a resume (issue 29), however they are
phrased and wherever they were said:

    uv run python bench/memory_facts.py                      # 50, 500 turns; budgets 6k, 16k
    uv run python bench/memory_facts.py --phrasing heldout   # the figure that counts
    uv run python bench/memory_facts.py --quick              # 50 and 200 turns

The world (:mod:`bench.memory_world`, written apart from any extractor) plants six kinds of
fact (identifiers, decisions, failed approaches, operator instructions, commitments, open
questions) in the model's text, in operator messages and inside long realistic tool outputs,
most without the cue words a summarizer keys on; ``--phrasing`` picks the family of templates,
vocabulary and output shapes (``dev`` to iterate on, ``heldout`` for the figure), ``--seed``
the inputs. The agent (:mod:`bench.memory_agent`) is a scripted ReAct agent with torpor's
default working memory at each budget.

For each (turns, budget): a run is SIGKILLed at the checkpoint before a random turn K in the
last quarter (TORPOR_FAULTS), a fresh process resumes it, and the context of its first model
call is captured; a second run on another database goes uninterrupted to that turn and its
context is captured too. A fact planted before that call (an operator message of that turn
included) and not superseded by then is kept when all its probes are in the context (the
texts as sent and with JSON escapes decoded). Reported: kept/required per kind, per place
(model text / tool output / operator message) and for the cue-free facts; the context's
tokens against the budget; the transcript's tokens (every model message, tool result and
operator message up to that turn, what a replayed conversation would send); whether the
resumed context equals the uninterrupted one. Markdown on stdout; JSON to ``--json``
(default bench/results/memory_facts.json, not committed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

NAME = "bench.memory_facts"
KINDS = ("identifier", "decision", "failed", "instruction", "commitment", "question")
PLACES = ("model", "tool", "operator")


# ------------------------------------------------------------------ the child process


def child(argv: list[str]) -> None:
    """``MODE URL BUDGET CAPTURE_TURN OUT``: ``build`` runs until its fault kills it;
    ``straight`` runs and dies by SIGKILL once it has captured the context of model call
    CAPTURE_TURN; ``resume`` resumes and dies once it has captured its first call's."""
    mode, url, budget, capture, out = argv[0], argv[1], int(argv[2]), int(argv[3]), Path(argv[4])
    import torpor
    from bench import memory_agent as ma

    def hook(turn: int, messages: Any) -> None:
        if mode == "resume" or (mode == "straight" and turn == capture):
            dumped = [m.model_dump(mode="json") for m in messages]
            out.write_text(json.dumps({"turn": turn, "messages": dumped}))
            os.kill(os.getpid(), signal.SIGKILL)

    ma.ON_CALL.append(hook)
    agent = ma.make_agent(NAME, budget)
    with torpor.Runtime(url) as rt:
        if mode == "resume":
            rt.resume("r")
        else:
            rt.run(agent, {"world": os.environ["MEMORY_WORLD"]}, run_id="r")


def _spawn(args: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(
        [sys.executable, __file__, "child", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode != -signal.SIGKILL:
        raise SystemExit(
            f"child {args} ended {proc.returncode}, not by SIGKILL:\n{proc.stderr[-3000:]}"
        )


# ------------------------------------------------------------------ scoring


def _texts(messages: list[Any]) -> list[str]:
    out = []
    for m in messages:
        out.append(m.content)
        out += [json.dumps(c.arguments) for c in m.tool_calls]
    return out


def transcript_tokens(world: Any, before: int) -> int:
    """Tokens of every model message, tool result and operator message up to model call
    ``before``: what a replayed conversation would send."""
    from bench.memory_agent import tools
    from torpor.agents.models import Message, ToolCall
    from torpor.memory import estimate_request

    msgs = [Message.system(world.goal)]
    for t in world.turns[: before + 1]:
        if t.operator:
            msgs.append(Message.user(t.operator))
        if t.index == before:
            break
        call = ToolCall(id=f"t{t.index}", name=t.tool, arguments=dict(t.args))
        msgs.append(Message(role="assistant", content=t.say, tool_calls=[call]))
        body = t.raises if t.raises is not None else json.dumps(t.output, sort_keys=True)
        msgs.append(Message.tool_result(call.id, body))
    return estimate_request(msgs, tools.specs())


def _cell(facts: list[Any], kept: set[str]) -> dict[str, int]:
    return {"kept": sum(1 for f in facts if f.id in kept), "required": len(facts)}


def measure(work: Path, turns: int, budget: int, family: str, seed: int) -> dict[str, Any]:
    from bench.memory_agent import tools, world_of
    from bench.memory_world import haystack
    from torpor.agents.models import Message
    from torpor.memory import estimate_request

    spec = f"{turns}:{seed}:{family}"
    world = world_of(spec)
    kill_at = random.Random(f"kill:{spec}:{budget}").randint(max(2, turns * 3 // 4), turns - 2)
    env = dict(os.environ, MEMORY_WORLD=spec, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'src'}")
    tag = f"{family}-{turns}-{budget}"
    url = f"sqlite:///{work}/{tag}.db"
    _spawn(
        ["build", url, str(budget), "-1", "-"],
        {**env, "TORPOR_FAULTS": f"crash:checkpoint.saved@{kill_at}"},
    )
    resumed_out = work / f"{tag}-resumed.json"
    _spawn(["resume", url, str(budget), "-1", str(resumed_out)], env)
    resumed = json.loads(resumed_out.read_text())
    at = resumed["turn"]
    straight_out = work / f"{tag}-straight.json"
    _spawn(
        [
            "straight",
            f"sqlite:///{work}/{tag}-straight.db",
            str(budget),
            str(at),
            str(straight_out),
        ],
        env,
    )
    straight = json.loads(straight_out.read_text())
    messages = [Message.model_validate(m) for m in resumed["messages"]]
    text = haystack(_texts(messages))
    required = world.required(at)
    kept = {f.id for f in required if f.kept(text)}
    straight_msgs = [Message.model_validate(m) for m in straight["messages"]]
    straight_text = haystack(_texts(straight_msgs))
    superseded = [
        f for f in world.facts if f.kind == "instruction" and f.turn <= at and f not in required
    ]
    ctx = estimate_request(messages, tools.specs())
    full = transcript_tokens(world, at)
    return {
        "phrasing": family,
        "seed": seed,
        "turns": turns,
        "budget": budget,
        "killed_at_checkpoint": kill_at,
        "resumed_at_turn": at,
        "kept": len(kept),
        "required": len(required),
        "kept_share": len(kept) / len(required) if required else 1.0,
        "kinds": {k: _cell([f for f in required if f.kind == k], kept) for k in KINDS},
        "places": {p: _cell([f for f in required if f.place == p], kept) for p in PLACES},
        "cue_free": _cell([f for f in required if f.cue_free], kept),
        "with_cue_words": _cell([f for f in required if not f.cue_free], kept),
        "uninterrupted_kept": sum(1 for f in required if f.kept(straight_text)),
        "resumed_equals_uninterrupted": resumed["messages"] == straight["messages"],
        "superseded_still_present": sum(1 for f in superseded if f.kept(text)),
        "superseded": len(superseded),
        "context_tokens": ctx,
        "transcript_tokens": full,
        "context_share": ctx / full,
        "budget_share": ctx / budget,
        "templates": dict(Counter(f.template for f in required if f.id not in kept)),
        "lost": [
            {
                "id": f.id,
                "place": f.place,
                "turn": f.turn,
                "template": f.template,
                "statement": f.statement[:300],
                "missing": [str(p) for p in f.probes if not p.found_in(text)],
            }
            for f in required
            if f.id not in kept
        ],
    }


# ------------------------------------------------------------------ the report


def _c(cell: dict[str, int]) -> str:
    return f"{cell['kept']}/{cell['required']}" if cell["required"] else "-"


def report(rows: list[dict[str, Any]]) -> str:
    fam = rows[0]["phrasing"]
    lines = [
        f"## Planted facts in the next context after SIGKILL + resume (phrasing `{fam}`, "
        f"seed {rows[0]['seed']})",
        "",
        "| turns | budget | resumed at | kept | model text | tool output | operator | cue-free "
        "| context tokens (of budget) | transcript tokens | context / transcript | resumed == "
        "uninterrupted |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = r["places"]
        lines.append(
            f"| {r['turns']} | {r['budget']:,} | {r['resumed_at_turn']}"
            f" | {r['kept']}/{r['required']} ({r['kept_share']:.0%})"
            f" | {_c(p['model'])} | {_c(p['tool'])} | {_c(p['operator'])}"
            f" | {_c(r['cue_free'])} | {r['context_tokens']:,} ({r['budget_share']:.0%})"
            f" | {r['transcript_tokens']:,} | {r['context_share']:.1%}"
            f" | {'yes' if r['resumed_equals_uninterrupted'] else 'NO'} |"
        )
    lines += ["", "Per kind:", "", "| turns | budget | " + " | ".join(KINDS) + " |"]
    lines.append("|---|---|" + "---|" * len(KINDS))
    for r in rows:
        cells = " | ".join(_c(r["kinds"][k]) for k in KINDS)
        lines.append(f"| {r['turns']} | {r['budget']:,} | {cells} |")
    lines += [
        "",
        "Superseded instructions still in the context (not required): "
        + ", ".join(f"{r['superseded_still_present']}/{r['superseded']}" for r in rows)
        + "; uninterrupted run kept: "
        + ", ".join(f"{r['uninterrupted_kept']}/{r['required']}" for r in rows)
        + ".",
    ]
    return "\n".join(lines)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="50 and 200 turns")
    ap.add_argument("--phrasing", choices=("dev", "heldout"), default="dev")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--turns", type=_ints, default=None, help="e.g. 50,500")
    ap.add_argument("--budgets", type=_ints, default=[6000, 16000], help="tokens, e.g. 6000,16000")
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "memory_facts.json")
    ap.add_argument("--jobs", type=int, default=2, help="configurations measured at once")
    args = ap.parse_args()
    turns = args.turns or ([50, 200] if args.quick else [50, 500])
    configs = [(t, b) for t in turns for b in args.budgets]
    tmpdir = tempfile.TemporaryDirectory(prefix="torpor-memory-facts-", dir="/var/tmp")
    with tmpdir as tmp, ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [
            pool.submit(measure, Path(tmp), t, b, args.phrasing, args.seed) for t, b in configs
        ]
        rows = [f.result() for f in futures]
    text = report(rows)
    print(text)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2:])
    else:
        main()
