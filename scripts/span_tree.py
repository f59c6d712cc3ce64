"""Print the span tree of one flagship run, traced with the SDK's in-memory exporter.

    uv run python scripts/span_tree.py            # the flagship with --auto-approve, in a temp home
    uv run python scripts/span_tree.py --pause    # two executions: it waits for approval, then
                                                  # is resumed with --auto-approve
    uv run python scripts/span_tree.py -- ARGS    # other flagship arguments

Each line: the span's name, its duration, and the attributes that say what it was (policy,
operation, outcome, GenAI usage). Children are indented under their parent; spans whose parent
is not in the trace (the caller's, or an attempt killed before it ended) are listed at the top.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SHOWN = (
    "torpor.step.policy",
    "torpor.step.status",
    "torpor.unfinished",
    "torpor.effect.outcome",
    "torpor.wait.kind",
    "torpor.wait.via",
    "torpor.run.status",
    "torpor.run.outcome",
    "gen_ai.request.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
)


def render(spans: list[ReadableSpan]) -> str:
    """The spans as an indented tree, children in start order."""
    ids = {s.context.span_id for s in spans}
    children: dict[int | None, list[ReadableSpan]] = {}
    for s in spans:
        parent = s.parent.span_id if s.parent is not None else None
        children.setdefault(parent if parent in ids else None, []).append(s)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda x: x.start_time or 0):
            ms = ((s.end_time or 0) - (s.start_time or 0)) / 1e6
            attrs = s.attributes or {}
            shown = " ".join(f"{k.split('.')[-1]}={attrs[k]}" for k in SHOWN if k in attrs)
            lines.append(f"{'  ' * depth}{s.name}  [{ms:.1f} ms] {shown}".rstrip())
            walk(s.context.span_id, depth + 1)

    walk(None, 0)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    from torpor import telemetry

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.configure(provider)
    home = tempfile.mkdtemp(prefix="torpor-span-tree-")
    os.environ.setdefault("TORPOR_HOME", home)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from examples.repo_agent.__main__ import main as flagship

    if "--" in argv:
        rc = flagship(argv[argv.index("--") + 1 :])
    elif "--pause" in argv:
        flagship(["--run-id", "traced", "--quiet"])  # stops at the approval
        rc = flagship(["--resume", "traced", "--auto-approve", "--quiet"])
    else:
        rc = flagship(["--auto-approve", "--quiet"])
    spans: list[Any] = list(exporter.get_finished_spans())
    print(f"\n{len(spans)} spans, trace {spans[0].context.trace_id:032x}\n" if spans else "")
    print(render(spans))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
