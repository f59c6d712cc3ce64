"""Where facts were lost at 500 turns (issue 30, bench/memory_diagnose.py): the summary filled
with the agent's narration and with a tool's routine lines said again turn after turn, a
statement split across two sentences lost its reason, and recall answered the latest message
with the same sentence said in earlier turns. Pure tests, no store. (Example texts of these
tests' own: the planted-fact bench's templates are never used here.)"""

from __future__ import annotations

from typing import Any

from torpor.memory import CallItem, Unit
from torpor.memory.buffer import result_text
from torpor.memory.compaction import TEMPLATE_REPEATS, ExtractiveSummarizer, Summary
from torpor.memory.facts import text_segments
from torpor.memory.ledger import LedgerRecord, record_key, unit_record
from torpor.memory.recall import recalled


def _unit(turn: int, text: str, result: Any = None) -> Unit:
    calls = []
    if result is not None:
        calls = [
            CallItem(
                call_id=f"c{turn}",
                tool_call_id=f"t{turn}",
                tool="run",
                args={"cmd": "make check"},
                status="succeeded",
                result=result_text("succeeded", result),
                step=f"tool:c{turn}@v{turn}",
            )
        ]
    return Unit(turn=turn, kind="model", text=text, calls=calls, refs=[f"model#{turn}"])


def _facts(units: list[Unit], summary: Summary | None = None) -> list[str]:
    lines = ExtractiveSummarizer("tidy the billing service").summarize(
        None,  # type: ignore[arg-type]  (the extractive summarizer makes no model call)
        units,
        summary or Summary(),
    )
    return [x.text for x in lines if x.weight > 1]


def test_narration_is_not_a_fact_and_a_specific_sentence_is() -> None:
    """Before: every sentence of the model's text scored above the least score of a fact
    (the model's own words start above it), so "Opening the next module." filled the summary."""
    units = [
        _unit(1, "Moving on to the invoices handler now."),
        _unit(2, "Having a look at the exporter tests."),
        _unit(3, "The nightly export stalls at row 48213 on the replica."),
    ]
    facts = _facts(units)
    assert not any("invoices handler" in f or "exporter tests" in f for f in facts)
    assert any("48213" in f for f in facts)


def test_a_short_line_stays_one_fact_with_its_reason() -> None:
    """Before: a line was split into sentences, so a choice ("orjson it is") and its reason
    in the next sentence became two facts, cut apart."""
    segs = text_segments(
        "Tarantool it is for the session store. Aerospike is out: 7311 ms p99 in the soak.",
        "model",
    )
    assert len(segs) == 1
    (fact,) = [f for f in _facts([_unit(4, segs[0].text)]) if "Tarantool" in f]
    assert "Aerospike" in fact and "7311" in fact
    long = " ".join(f"Paragraph sentence {i} about the archive layout." for i in range(12))
    assert len(text_segments(long, "model")) == 12  # a long paragraph is still split


def test_a_routine_output_line_said_again_and_again_becomes_a_plain_line() -> None:
    """Before: novelty was judged within one result, so the same warning in every test run
    (new numbers each time) was a fact in every compaction and crowded the summary."""

    def run(i: int) -> dict[str, str]:
        return {
            "stdout": f"collected {300 + i} items\nWARN fixture cache at {40 + i}% (advisory)\n"
            f"rc=0 job J-{9100 + i}"
        }

    summary = Summary()
    per: list[list[str]] = []
    for i in range(TEMPLATE_REPEATS + 3):
        u = _unit(10 + i, "", run(i))
        lines = ExtractiveSummarizer("").summarize(None, [u], summary)  # type: ignore[arg-type]
        per.append([x.text for x in lines if x.weight > 1 and "fixture cache" in x.text])
        summary = summary.folded([u], lines, 10_000)
    assert all(per[i] for i in range(TEMPLATE_REPEATS))  # the first few are facts
    assert not any(per[i] for i in range(TEMPLATE_REPEATS, len(per)))  # then plain lines
    # The ledger still has each (its records come from the lines' facts).
    assert sum(1 for x in summary.lines if x.fact and "fixture cache" in x.text) == len(per)


def _record(turn: int, text: str, body: str = "") -> LedgerRecord:
    r = unit_record(turn, text, [], f"model#{turn}", "model", 1, body)
    assert r is not None
    return r


def test_recall_does_not_answer_the_latest_message_with_itself() -> None:
    """Before: the latest message "Listing what the exporter wrote." recalled sixteen earlier
    turns that said the same sentence (each quoted twice), and nothing about its subject."""
    said = "Listing what the archiver wrote."
    rs = [_record(t, said, said + "\n" + said) for t in range(1, 9)]
    rs.append(
        LedgerRecord(
            key=record_key("decision", "the archiver writes zstd level 19 to /srv/arch"),
            kind="decision",
            text="the archiver writes zstd level 19 to /srv/arch",
            turn=5,
        )
    )
    terms = {"listing": 1.0, "archiver": 1.0, "wrote": 1.0}
    got = recalled(rs, terms, echo=[said])
    assert [x.text for x in got.lines] == [
        "- [t5 decision] the archiver writes zstd level 19 to /srv/arch"
    ]
    before = recalled(rs, terms)
    assert len(before.lines) > 1
    assert all(x.text.count(said) == 1 for x in before.lines if said in x.text)  # quoted once


def test_a_question_about_another_id_does_not_supersede_the_first() -> None:
    """Before: two open questions of one shape ("is job N covered by the nightly audit?")
    shared most subject words, so the later one superseded the earlier although they ask
    about different jobs; a decision with a new value still replaces the old one."""

    def rec(kind: str, text: str, turn: int) -> LedgerRecord:
        from torpor.memory.facts import identifiers
        from torpor.memory.ledger import subject_of

        return LedgerRecord(
            key=record_key(kind, text),
            kind=kind,  # type: ignore[arg-type]
            text=text,
            ids=identifiers(text),
            subject=subject_of(text),
            turn=turn,
            compaction=1,
        )

    from torpor.memory.ledger import replaces

    a = rec("question", "is job 48213 covered by the nightly audit?", 3)
    b = rec("question", "is job 77120 covered by the nightly audit?", 9)
    same = rec("question", "is job 48213 covered by the nightly audit at all now?", 12)
    assert not replaces(b, a) and replaces(same, a)
    old = rec("decision", "pin the audit runner image to build 5512 for the nightly audit", 4)
    new = rec("decision", "pin the audit runner image to build 6020 for the nightly audit", 10)
    assert replaces(new, old)
