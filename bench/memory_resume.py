"""The working memory's resume and compaction cost (issue 17), on the long agent
(examples/long_agent); the planted-fact figures are bench/memory_facts.py's:

    uv run python bench/memory_resume.py            # resume 10 vs 1,000 turns
    uv run python bench/memory_resume.py --quick    # resume 10 vs 300 turns

1. **Resume cost.** Runs of 10 and of 1,000 turns, each killed right before its last model
   call; each resume is a fresh process whose first model call stamps the time and SIGKILLs
   (the history stays as built): wake (process spawn) to the first new model call, median of
   5, and the ratio.
2. **Compaction cost.** The 1,000-turn run uses a model summarizer (a scripted model that
   answers with the units' extractive lines; its usage is the estimate of what it was sent and
   what it answered): tokens spent summarizing per 1,000 turns, and the context tokens saved
   (transcript tokens minus context tokens, summed over the model calls).

Everything runs on SQLite files under a temporary directory, on this machine; results are
printed as Markdown and written to bench/results/memory_resume.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

BUDGET = 6000
NAME = "bench.memory"


# ------------------------------------------------------------------ the child process


def _summarizer_model() -> Any:
    from torpor.agents.models import Message, ModelResponse, TokenUsage
    from torpor.memory import estimate_request, estimate_text

    class EchoSummarizer:
        """Answers with the extractive lines it was given (the 'Turns:' part)."""

        model_id = "scripted-summarizer"

        def complete(self, messages: Any, tools: Any = ()) -> Any:
            body = messages[-1].content.split("Turns:\n", 1)[-1]
            text = "\n".join(f"- {line}" for line in body.splitlines() if line.strip())
            usage = TokenUsage(
                input_tokens=estimate_request(messages), output_tokens=estimate_text(text)
            )
            msg = Message(role="assistant", content=text)
            return ModelResponse(message=msg, usage=usage, model=self.model_id)

    return EchoSummarizer()


def child(argv: list[str]) -> None:
    mode, url, rid, turns, out = argv[0], argv[1], argv[2], int(argv[3]), Path(argv[4])
    summarize = "--summarizer" in argv
    kill_on_call = "--kill-on-call" in argv
    from examples.long_agent import agent as la

    import torpor
    from torpor.memory import ModelSummarizer

    summarizer = ModelSummarizer(_summarizer_model()) if summarize else None
    agent = la.make_agent(NAME, budget_tokens=BUDGET, summarizer=summarizer)
    if mode == "resume":

        def first_call(turn: int, messages: Any) -> None:
            stamp = time.time()
            out.write_text(
                json.dumps(
                    {"at": stamp, "turn": turn, "messages": [m.model_dump() for m in messages]}
                )
            )
            la.ON_CALL.clear()
            if kill_on_call:
                os.kill(os.getpid(), signal.SIGKILL)

        la.ON_CALL.append(first_call)
    with torpor.Runtime(url) as rt:
        if mode == "build":
            rt.run(agent, {"turns": turns, "seed": 7}, run_id=rid)
        else:
            rt.resume(rid)


# ------------------------------------------------------------------ the orchestrator


def _spawn(args: list[str], env: dict[str, str], timeout: float = 1800) -> int:
    proc = subprocess.run(
        [sys.executable, __file__, "child", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode not in (0, -signal.SIGKILL):
        raise SystemExit(f"child {args} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.returncode


def build(work: Path, turns: int, *, summarizer: bool) -> tuple[str, dict[str, str], float]:
    """A run of ``turns`` turns killed at the checkpoint before its last model call."""
    from examples.long_agent.script import make_script, write_world

    world = work / f"world-{turns}"
    write_world(world, make_script(turns))
    url = f"sqlite:///{work}/mem-{turns}-{int(summarizer)}.db"
    env = dict(os.environ, LONG_AGENT_WORLD=str(world), PYTHONPATH=str(ROOT / "src"))
    env["TORPOR_FAULTS"] = f"crash:checkpoint.saved@{turns - 1}"
    t0 = time.monotonic()
    args = ["build", url, "r", str(turns), str(work / "unused")]
    rc = _spawn([*args, *(["--summarizer"] if summarizer else [])], env)
    assert rc == -signal.SIGKILL, "the build process was expected to die at its fault point"
    del env["TORPOR_FAULTS"]
    return url, env, time.monotonic() - t0


def transcript_and_costs(url: str) -> dict[str, Any]:
    """Tokens of the full transcript (every model message and tool result recorded), the
    summarizer's tokens, and the context tokens recorded per model call."""
    from examples.long_agent.agent import tools

    import torpor
    from torpor.agents.models import Message, ModelResponse
    from torpor.memory import estimate_message, estimate_request

    with torpor.Client(url) as c:
        events = c.events("r")
    msgs: list[Message] = []
    per_call_transcript: list[int] = []
    specs = tools.specs()
    running = estimate_request([], specs)
    summarizer_tokens = 0
    contexts: list[int] = []
    for e in events:
        p = e.payload
        if e.type == "step_completed" and p.step_id.startswith("model"):
            m = ModelResponse.model_validate(p.result["response"]).message
            msgs.append(m)
            running += estimate_message(m)
        elif e.type == "tool_call_settled":
            text = json.dumps(p.observation, sort_keys=True, default=str)
            m = Message.tool_result(p.call_id, text)
            msgs.append(m)
            running += estimate_message(m)
        elif e.type == "model_called":
            if p.model == "scripted-summarizer":
                summarizer_tokens += p.input_tokens + p.output_tokens
        elif e.type == "context_built":
            contexts.append(p.total_tokens)
            per_call_transcript.append(running)
    return {
        "transcript_tokens": estimate_request(msgs, specs),
        "summarizer_tokens": summarizer_tokens,
        "saved_tokens": sum(t - c for t, c in zip(per_call_transcript, contexts, strict=True)),
        "model_calls": len(contexts),
        "compactions": sum(1 for e in events if e.type == "context_compacted"),
    }


def resume_cost(work: Path, turns: int, reps: int, *, summarizer: bool) -> dict[str, Any]:
    url, env, build_s = build(work, turns, summarizer=summarizer)
    samples = []
    for i in range(reps):
        out = work / f"resume-{turns}-{i}.json"
        t0 = time.time()
        rc = _spawn(["resume", url, "r", str(turns), str(out), "--kill-on-call"], env)
        assert rc == -signal.SIGKILL
        samples.append(json.loads(out.read_text())["at"] - t0)
    res = {"turns": turns, "median_s": statistics.median(samples), "samples_s": samples}
    res["build_s"] = build_s
    if summarizer:
        res.update(transcript_and_costs(url))
    return res


def _ms(samples: list[float]) -> str:
    return ", ".join(f"{s * 1000:.0f}" for s in samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="resume 10 vs 300 turns")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    long_turns = 300 if args.quick else 1000
    with tempfile.TemporaryDirectory(prefix="torpor-memory-bench-", dir="/var/tmp") as tmp:
        work = Path(tmp)
        short = resume_cost(work, 10, args.reps, summarizer=False)
        long = resume_cost(work, long_turns, args.reps, summarizer=True)
    ratio = long["median_s"] / short["median_s"]
    per_k = 1000 / long_turns
    lines: list[str] = []
    lines += [
        f"## Resume cost (wake to the first new model call, median of {args.reps})",
        "",
        "| turns | median | samples |",
        "|---|---|---|",
        f"| 10 | {short['median_s'] * 1000:.0f} ms | {_ms(short['samples_s'])} |",
        f"| {long_turns:,} | {long['median_s'] * 1000:.0f} ms | {_ms(long['samples_s'])} |",
        "",
        f"Ratio {long_turns:,} / 10 turns: **{ratio:.2f}x** (goal <= 1.5x).",
        "",
        f"## Compaction cost ({long_turns:,} turns, scripted model summarizer)",
        "",
        f"- compactions: {long['compactions']}; summarizer tokens: {long['summarizer_tokens']:,}"
        f" ({long['summarizer_tokens'] * per_k:,.0f} per 1,000 turns)",
        f"- context tokens saved over {long['model_calls']:,} model calls: {long['saved_tokens']:,}"
        f" ({long['saved_tokens'] * per_k:,.0f} per 1,000 turns)",
    ]
    report = "\n".join(lines)
    print(report)
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    data = {"resume_short": short, "resume_long": long, "ratio": ratio}
    (results / "memory_resume.json").write_text(json.dumps(data, indent=2))
    (results / "memory_resume.md").write_text(report + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2:])
    else:
        main()
