"""What compaction keeps, however it is phrased and wherever it appears (issue 29): facts from
the model's text, the calls' arguments and their results, decoded; identifiers intact; a
failure in the tail of a long log kept with its error while the log's routine lines are not;
decisions without cue words; every operator instruction until restated; the least relevant
facts cut first, not the oldest; and the summary growing into the budget the other sections
leave. (Example texts of these tests' own: the planted-fact bench's templates are never used
here.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torpor
from torpor.memory import CallItem, ContextSection, Unit, build_context
from torpor.memory.buffer import result_text
from torpor.memory.compaction import ExtractiveSummarizer, Summary, SummaryLine, extract_unit


def _unit(turn: int, text: str, result: Any, *, status: str = "succeeded", **args: Any) -> Unit:
    return Unit(
        turn=turn,
        kind="model",
        text=text,
        calls=[
            CallItem(
                call_id=f"c{turn}",
                tool_call_id=f"t{turn}",
                tool="run",
                args=args or {"cmd": "make check"},
                status=status,
                result=result_text(status, result),
                step=f"tool:c{turn}@v{turn}",
            )
        ],
        refs=[f"model#{turn}"],
    )


def _log(n: int, tail: str) -> str:
    lines = [
        f"2026-05-{1 + i % 28:02d}T08:{i % 60:02d}:17.{i:03d}Z INFO scheduler[{4100 + i}] "
        f"dispatched job j-{7700 + i:05d} to /srv/pool/node-{i % 9}/slot {i % 4}"
        for i in range(n)
    ]
    return "\n".join([*lines, tail])


def test_results_are_decoded_and_identifiers_kept_whole() -> None:
    """Ids were read from JSON-escaped text (``n2026-…`` from ``\\n2026-…``) and absolute
    paths lost their leading ``/``."""
    result = {
        "stdout": "build ok\n2026-07-19T04:11:52Z artifact stored at /opt/builds/orion/7f3e9a1c"
        "\nrelease tag: orion-v4.12.0-rc3\nSee RFC-2291 for the rollout.",
    }
    line = extract_unit(_unit(3, "Building the orion image.", result)).text
    assert "/opt/builds/orion/7f3e9a1c" in line
    assert "orion-v4.12.0-rc3" in line
    assert "n2026" not in line and "nrelease" not in line and "nSee" not in line


def test_a_failure_in_the_tail_of_a_long_log_is_kept_and_its_routine_lines_are_not() -> None:
    """Sentences inside tool results were never extracted; only their first 8 ids were kept,
    and a realistic log's every id-bearing line would count as a fact."""
    tail = (
        "2026-05-09T08:44:17.612Z ERROR scheduler[4188] lease renewal for job j-07788 rejected "
        "by the coordinator: epoch 41 is stale, the job is now owned by node-3"
    )
    result = {"exit_code": 1, "log": _log(120, tail)}
    lines = ExtractiveSummarizer().summarize(
        None, [_unit(5, "Checking the run.", result)], Summary()
    )  # type: ignore[arg-type]
    facts = [x.text for x in lines if x.weight > 1]
    assert any("epoch 41 is stale" in x for x in facts), facts
    # Routine lines (dispatched …) flood nothing: at most a couple of them besides the error.
    assert sum("dispatched job" in x for x in facts) <= 2, facts


def test_a_shortened_failure_keeps_its_error() -> None:
    """Shortening a failed call's line dropped its error (the first 300 characters were kept:
    a traceback's last line is its error)."""
    frames = "\n".join(
        f'  File "/srv/app/deploy/step_{i}.py", line {10 + i}, in run_{i}\n    ctx.apply(plan)'
        for i in range(30)
    )
    detail = (
        f"Traceback (most recent call last):\n{frames}\n"
        "PermissionError: [Errno 13] Permission denied: '/srv/app/releases/current'"
    )
    u = _unit(9, "Applying the release.", detail, status="failed")
    line = extract_unit(u).text
    assert "-> failed" in line
    assert "Permission denied: '/srv/app/releases/current'" in line


def test_decisions_without_cue_words_and_in_design_notes_are_kept() -> None:
    """Decisions without because/decided/chose were dropped at extraction, and a design note a
    tool returned was never read for them."""
    said = _unit(
        11,
        "Going with the write-ahead journal for the outbox; the in-memory ring lost entries "
        "on every restart. Reading the next section now.",
        {"ok": True},
    )
    note = {
        "path": "/docs/adr/outbox.md",
        "content": "# Outbox delivery\n\nThe outbox carries webhooks to partners. Partners "
        "expect at-least-once delivery with a signature header.\n\n## Outcome\n\n"
        "Kafka was ruled out: the ops team will not run a broker for one queue. Postgres "
        "LISTEN/NOTIFY with a polling fallback it is.\n\n## Notes\n\nThe dashboards live in "
        "the usual folder.",
    }
    read = _unit(12, "Reading the design note.", note, cmd="cat /docs/adr/outbox.md")
    lines = ExtractiveSummarizer().summarize(None, [said, read], Summary())  # type: ignore[arg-type]
    text = "\n".join(x.text for x in lines if x.weight > 1)
    assert "Going with the write-ahead journal for the outbox" in text
    assert "Kafka was ruled out" in text
    assert "dashboards live in the usual folder" not in text


def test_a_line_is_not_a_fact_because_it_holds_an_id() -> None:
    routine = _unit(
        13, "Turn 13: listing.", {"files": [f"/var/spool/in/{i:06d}.eml" for i in range(50)]}
    )
    line = extract_unit(routine)
    assert line.weight == 1, line.text


def _op(turn: int, text: str) -> SummaryLine:
    (line,) = [
        x
        for x in ExtractiveSummarizer().summarize(
            None,  # type: ignore[arg-type]
            [Unit(turn=turn, kind="operator", text=text)],
            Summary(),
        )
        if x.weight > 1
    ]
    return line


def _fact(turn: int, text: str, score: float) -> SummaryLine:
    return SummaryLine(turn=turn, text=text, weight=2, score=score)


def test_every_operator_instruction_stays_and_the_least_relevant_facts_go_first() -> None:
    """Older operator instructions were lost (only the latest was protected) and the summary
    dropped its *oldest* facts past its share."""
    ops = [_op(2 * i, f"Keep the {w} service on port {9000 + i} until the audit.") for i, w in
           enumerate(["billing", "search", "ledger", "mailer", "gateway", "vault"])]  # fmt: skip
    key = _fact(1, "The signing key for partners is kid-5521, rotated in March.", 6.0)
    noise = [_fact(100 + i, f"Read page {i} of the handbook draft.", 1.1) for i in range(60)]
    summary = Summary(lines=[key, *ops, *noise], turns_folded=130, model_turns_folded=120)
    for budget in (700, 1200):
        built = build_context(
            budget,
            [ContextSection("summary", 80, summary.header(), ranked=summary.ranked())],
        )
        text = built.messages[0].content
        for op in ops:
            assert op.text in text, (budget, op.text)
        assert key.text in text  # old but salient: kept over the newer noise
        assert "less relevant lines left out" in text
        assert built.total_tokens <= budget
    trimmed = summary.trimmed(500)
    assert [x.text for x in ops] == [x.text for x in trimmed.lines if x.pinned]
    assert key.text in [x.text for x in trimmed.lines]


def test_a_restated_instruction_supersedes_the_earlier_one() -> None:
    from torpor.memory.compaction import merged

    first = _op(3, "Deploy the api only from the release branch.")
    later = _op(9, "Deploy the api only from the main branch now.")
    other = _op(10, "Page the on-call before touching the database.")
    lines = merged([first], [later, other])
    assert [x.pinned for x in lines] == [False, True, True]
    assert lines[0].fact is not None and lines[0].fact.superseded_by == 9


def test_the_summary_grows_into_the_budget_the_other_sections_leave() -> None:
    """The summary was capped at its share (25%) and dropped facts while the context was half
    empty."""
    facts = [
        _fact(i, f"Fact {i}: the shard s-{i:03d} holds tenant t-{i:04d}.", 2.0) for i in range(400)
    ]
    summary = Summary(lines=facts, turns_folded=400, model_turns_folded=400)
    sections = [
        ContextSection("goal", 100, "Goal: move the tenants", placement="goal"),
        ContextSection(
            "summary", 80, summary.header(), ranked=summary.ranked(), cap=int(6000 * 0.25)
        ),
        ContextSection("plan", 60, "plan v3:\n- c1: move(t-0001) [pending]"),
    ]
    built = build_context(6000, sections)
    assert built.sections["summary"] > 6000 * 0.25  # past its share, into the unused budget
    assert built.total_tokens >= 0.95 * 6000  # the budget used, not half of it
    assert built.sections["plan"] > 0  # what the summary grew into was left over, not taken
    assert "summary" in built.cut  # (400 facts do not fit: the least relevant went)


def test_a_long_run_uses_its_budget_before_it_drops_facts(store_url: str, tmp_path: Path) -> None:
    """The agent level: once the summary has dropped a line, every context is nearly full."""
    import sys

    root = Path(__file__).resolve().parents[1]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from examples.long_agent.agent import make_agent

    from memory_kit import fresh, payloads, world

    world(tmp_path, 90)
    agent = make_agent(fresh("full"), budget_tokens=2500)
    with torpor.Runtime(store_url) as rt:
        assert rt.run(agent, {"turns": 90, "seed": 3}, run_id="full").outcome == "succeeded"
    client = torpor.Client(store_url)
    from torpor.memory.view import snapshot_of

    snap = snapshot_of(client.state("full"))
    assert snap is not None
    built = payloads(client, "full", "context_built")
    # Lines were left out (dropped at compaction, or cut from the context) ...
    assert snap.summary.dropped_lines or "summary" in built[-1].cut
    # ... only while the context was full: the last contexts use nine tenths of the budget.
    late = built[-20:]
    assert all(b.total_tokens >= 0.9 * b.budget_tokens for b in late), [
        b.total_tokens for b in late
    ]


def test_a_long_result_keeps_its_tail_and_the_defaults_do_not_surprise(store_url: str) -> None:
    """Tool results were cut to their first 4,000 characters (the error at a log's end lost)
    and a ReAct agent stopped at 50 plan versions — one per model turn."""
    from torpor.agents.models import ScriptedModel, say, use

    text = result_text("succeeded", {"log": "x" * 30_000 + " FINAL: checksum mismatch"})
    assert "checksum mismatch" in text and "chars clipped" in text and len(text) < 8100
    assert "chars clipped" not in result_text("succeeded", {"log": "y" * 6000})
    # A fact in the clipped middle is named by the clip's mark: the buffer still shows it.
    from torpor.memory.facts import result_facts

    middle = {"log": "z" * 9000 + "\nbundle b-40417-kq signed and uploaded\n" + "w" * 9000}
    clipped = result_text("succeeded", middle, 8000, result_facts(middle))
    assert "b-40417-kq" in clipped and len(clipped) <= 8000
    tools = torpor.Tools()

    @tools.tool
    def ping(n: int) -> int:
        return n

    turns = 60
    model = ScriptedModel([use(("ping", {"n": i})) for i in range(turns)] + [say("done")])
    agent = torpor.Agent(
        "test.memory.many-turns", goal="ping", tools=tools, planner=torpor.ReActPlanner(model)
    )
    with torpor.Runtime(store_url) as rt:
        res = rt.run(agent, {}, run_id="many", scope="many")
    assert res.outcome == "succeeded", res
    assert res.result["plan_version"] == turns
