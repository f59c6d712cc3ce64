"""The working memory's parts on their own (issue 17): token estimates against the usage the
adapters parse from a provider's reply, the context builder's budget and priorities for every
section mix (hypothesis), and the compaction rules — a call never split from its result, a
pending call and the latest operator message never folded, facts kept by the extractive
summary. (The agent running with them: tests/test_memory_agent.py.)"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_kit import anthropic_reply, loopback, openai_reply
from hyp import examples
from test_models_adapters import HISTORY, TOOLS
from torpor.agents.models import AnthropicModel, Message, OpenAIChatModel, ToolCall
from torpor.errors import BadInputError
from torpor.memory import (
    Buffer,
    Calibration,
    CallItem,
    ContextSection,
    Unit,
    build_context,
    estimate_request,
    estimate_text,
)
from torpor.memory.compaction import Summary, SummaryLine, choose, extract_unit

# ------------------------------------------------------------------ tokens


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_estimate_is_at_least_the_input_tokens_an_adapter_reports(provider: str) -> None:
    """The adapters' recorded exchanges (loopback servers speaking each wire format) report
    input tokens; the estimate of what was sent is never below them."""
    # The usage the adapters' fixture reports for these requests (tests/test_models_adapters.py).
    reported = {2: 30, 4: 40}

    def responder(body: dict) -> dict:
        n = len(body["messages"]) + (1 if "system" in body else 0)
        usage = (reported[n], 7)
        if provider == "openai":
            return openai_reply("ok", usage=usage)
        return anthropic_reply("ok", usage=usage)

    with loopback(provider, responder) as api:
        if provider == "openai":
            model = OpenAIChatModel("m", base_url=api.url, api_key="k", max_retries=0)
        else:
            model = AnthropicModel("m", base_url=api.url, api_key="k", max_retries=0)
        for msgs in (HISTORY[:2], HISTORY):
            resp = model.complete(msgs, TOOLS)
            assert resp.usage.input_tokens == reported[len(msgs)]
            assert estimate_request(msgs, TOOLS) >= resp.usage.input_tokens


def test_estimate_counts_digits_and_hashes_and_non_ascii_conservatively() -> None:
    prose = "the quick brown fox jumps over the lazy dog " * 10
    assert estimate_text(prose) == -(-len(prose) // 3)  # ceil(chars / 3)
    digest = "3f9c2e1a" * 8
    assert estimate_text(digest) >= len(digest) / 1.5  # hex: ~1.5 chars per token
    cjk = "記憶の圧縮" * 10
    assert estimate_text(cjk) >= len(cjk)  # about one token per character
    assert estimate_text("") == 0


def test_calibration_only_ever_raises_the_estimate() -> None:
    cal = Calibration()
    cal.observe(100, 80)
    assert cal.ratio == 1.0 and cal.scale(100) == 100
    cal.observe(100, 150)
    cal.observe(100, 120)
    cal.observe(100, 0)  # unknown: ignored
    assert cal.ratio == 1.5 and cal.scale(100) == 150 and cal.observed == 3


# ------------------------------------------------------------------ the context builder


def _unit(i: int) -> tuple[Message, ...]:
    call = ToolCall(id=f"c{i}", name="read", arguments={"i": i})
    return (
        Message(role="assistant", content=f"turn {i}", tool_calls=[call]),
        Message.tool_result(f"c{i}", "x" * (i * 37 % 300)),
    )


@st.composite
def section_mixes(draw: st.DrawFn) -> tuple[int, list[ContextSection], int]:
    n = draw(st.integers(0, 7))
    sections: list[ContextSection] = []
    for k in range(n):
        prio = draw(st.integers(0, 120))
        if draw(st.booleans()):
            text = draw(st.text(min_size=0, max_size=3000))
            place = draw(st.sampled_from(["system", "goal", "brief"]))
            sections.append(ContextSection(f"s{k}", prio, text, placement=place))
        else:
            m = draw(st.integers(0, 12))
            pinned = (
                frozenset(draw(st.sets(st.integers(0, max(0, m - 1)), max_size=2)))
                if m
                else frozenset()
            )
            sections.append(
                ContextSection(
                    f"u{k}",
                    prio,
                    units=tuple(_unit(i + 1) for i in range(m)),
                    pinned=pinned,
                    placement="conversation",
                )
            )
    budget = draw(st.integers(50, 6000))
    fixed = draw(st.integers(0, 200))
    return budget, sections, fixed


@settings(max_examples=examples(300), deadline=None)
@given(section_mixes())
def test_the_budget_holds_for_every_section_mix_and_priorities_cut_in_order(
    mix: tuple[int, list[ContextSection], int],
) -> None:
    budget, sections, fixed = mix
    try:
        built = build_context(budget, sections, fixed_tokens=fixed)
    except BadInputError as exc:
        # Only when the must-keep parts alone do not fit.
        assert "cannot hold" in str(exc)
        return
    assert built.total_tokens <= budget
    assert estimate_request(built.messages) + fixed <= built.total_tokens
    full = {s.name: s for s in sections}
    lost = [s for s in sections if s.name in built.cut]
    for s in sections:
        if s.units:
            # Pinned units are always there; a unit is never split (each result follows its call).
            for i in s.pinned:
                assert s.units[i][0] in built.messages
        for other in lost:
            if s.priority < other.priority:
                # A section less important than one that lost something keeps nothing
                # (except its pinned units).
                assert built.sections[s.name] == sum(
                    sum(_tokens(m) for m in s.units[i]) for i in s.pinned
                ), (s.name, other.name)
    for i, m in enumerate(built.messages):
        if m.role == "tool":
            prev = built.messages[i - 1]
            assert prev.role in ("assistant", "tool")
    assert set(built.sections) == set(full)


def _tokens(m: Message) -> int:
    from torpor.memory import estimate_message

    return estimate_message(m)


def test_priorities_cut_in_the_documented_order() -> None:
    text = "word " * 400  # ~670 tokens each
    sections = [
        ContextSection("goal", 100, "the goal", placement="goal"),
        ContextSection("summary", 80, text),
        ContextSection("plan", 60, text),
        ContextSection("checkpoint", 50, text),
        ContextSection("episodes", 40, text),
        ContextSection("artifacts", 30, text),
    ]
    built = build_context(1900, sections)
    assert built.sections["summary"] > 600 and built.sections["plan"] > 600
    assert 0 < built.sections["checkpoint"] < 600  # cut: its head kept
    assert built.sections["episodes"] == built.sections["artifacts"] == 0
    assert built.cut == ["checkpoint", "episodes", "artifacts"]
    assert "## checkpoint" in built.messages[0].content and "[...]" in built.messages[0].content
    with pytest.raises(BadInputError, match="named twice"):
        build_context(1000, [sections[0], sections[0]])


# ------------------------------------------------------------------ compaction rules


def _model_unit(turn: int, *, status: str = "succeeded", text: str = "", result: str = "") -> Unit:
    return Unit(
        turn=turn,
        kind="model",
        text=text or f"Turn {turn}: reading.",
        calls=[
            CallItem(
                call_id=f"c{turn}",
                tool_call_id=f"t{turn}",
                tool="read_file",
                args={"path": f"notes/{turn}.txt"},
                status=status,
                result=result or ("x" * 400 if status != "pending" else ""),
                step=f"tool:c{turn}@v{turn}" if status != "pending" else None,
            )
        ],
        refs=[f"model#{turn}"],
    )


def test_compaction_never_splits_never_folds_pending_or_the_latest_operator_message() -> None:
    units = [
        _model_unit(1),
        Unit(turn=2, kind="operator", text="Never deploy on Fridays."),
        _model_unit(3),
        _model_unit(4, status="pending"),  # waiting for a person's approval
        Unit(turn=5, kind="operator", text="Always pin the versions."),
        _model_unit(6),
        _model_unit(7),
    ]
    buf = Buffer(units=units)
    assert buf.pinned() == {3, 4}
    folded = choose(buf, 0)  # fold as much as the rules allow
    assert folded == [0, 1, 2, 5]  # an older operator message may go; the newest unit stays
    kept = [u for i, u in enumerate(units) if i not in folded]
    assert [u.turn for u in kept] == [4, 5, 7]
    # A unit moves whole: each kept call still has its result right after it.
    for u in kept:
        msgs = u.messages()
        ids = [c.id for m in msgs if m.role == "assistant" for c in m.tool_calls]
        assert ids == [m.tool_call_id for m in msgs if m.role == "tool"]
    assert choose(buf, buf.tokens()) == []  # within the target: nothing to fold


def test_extractive_summary_keeps_decisions_errors_identifiers_and_references() -> None:
    decided = _model_unit(
        8,
        # (A line longer than a fact is split into sentences, its narration dropped; a shorter
        # one stays whole: tests/test_memory_novelty.py.)
        text="Turn 8: reading. Decision: use the amber parser strategy because it keeps order. "
        "Nothing else here. The rest of this paragraph only restates the plan in words that "
        "say nothing new, at some length. It goes on like that for a while, to make the line "
        "longer than one fact may be, and then it stops.",
        result='{"text": "the deploy id is rel-48213-qx at src/deploy/keys.py, sha 3f9c2e1a7"}',
    )
    failed = _model_unit(9, status="failed", result='{"detail": {"error": "no such file"}}')
    failed.text = "The cobalt ledger approach failed because the lock was held."
    op = Unit(turn=10, kind="operator", text="Always rotate the keys before any restart.")
    lines = [extract_unit(u) for u in (decided, failed, op)]
    one, two, three = (x.text for x in lines)
    assert "Decision: use the amber parser strategy because it keeps order." in one
    assert "Nothing else here" not in one
    for ident in ("rel-48213-qx", "src/deploy/keys.py", "3f9c2e1a7"):
        assert ident in one
    assert "[tool:c8@v8]" in one and "refs: model#8" in one
    assert "cobalt ledger approach failed because the lock was held" in two
    assert "-> failed" in two and "no such file" in two
    assert "operator said: Always rotate the keys before any restart." in three
    assert all(x.weight == 2 for x in lines)
    plain = extract_unit(_model_unit(11))
    assert plain.weight == 1 and re.search(r"read_file\(.*\) -> succeeded", plain.text)


def test_a_summary_over_its_budget_drops_plain_lines_then_shortens_then_drops_facts() -> None:
    lines = [
        SummaryLine(turn=i, text=f"read_file(x{i}) -> succeeded; refs: model#{i}")
        for i in range(40)
    ]
    facts = [
        SummaryLine(
            turn=100 + i,
            text=f"Decision {i}: keep it because reasons; read_file(y) -> ok; refs: model#{i}",
            weight=2,
            core=f"Decision {i}: keep it because reasons",
        )
        for i in range(10)
    ]
    s = Summary(lines=lines + facts, turns_folded=50, model_turns_folded=50)
    small = s.trimmed(s.tokens() // 3)
    assert small.tokens() <= s.tokens() // 3
    kept_plain = [x.turn for x in small.lines if x.weight == 1]
    assert len(kept_plain) < 40 and kept_plain == list(range(40 - len(kept_plain), 40))
    assert [x.text for x in small.lines if x.weight == 2] == [x.text for x in facts]
    tiny = s.trimmed(120)
    assert tiny.tokens() <= 120
    assert [x.text for x in tiny.lines] == [x.core for x in facts[-len(tiny.lines) :]]
    assert "50 earlier turns summarized, 50 of them model turns" in tiny.text()
