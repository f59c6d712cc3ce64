"""The fact ledger and recall (issue 30): extraction, dedup and supersession are pure functions
with property tests; an agent's compactions write typed records with provenance in the
compaction's own transaction, on both backends; superseded records stay, naming what replaced
them; known secrets never reach a record; ``torpor context RUN --ledger`` and
``Client.ledger`` show them; and a fact that fell out of the summary comes back in the
``recall`` section when a later turn is about its subject. (The texts are these tests' own:
the planted-fact bench's templates are never used here.)"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import torpor
from torpor.agents.models import Message, ScriptedModel, ToolCall, ToolSpec
from torpor.agents.models.scripted import turn_of
from torpor.cli import app
from torpor.memory import CallItem, Memory, Unit
from torpor.memory.buffer import result_text
from torpor.memory.ledger import (
    LedgerRecord,
    dedupe,
    extract,
    record_key,
    replaces,
    still_active,
    subject_of,
    supersede,
)

# ------------------------------------------------------------------ pure: properties

WORDS = ("cache", "backend", "redis", "memcached", "queue", "kafka", "region", "tenant")
KINDS = ("decision", "instruction", "identifier", "failure", "commitment")


@st.composite
def records(draw: Any, n: int = 12) -> list[LedgerRecord]:
    out = []
    for i in range(draw(st.integers(0, n))):
        kind = draw(st.sampled_from(KINDS))
        text = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=5)))
        out.append(
            LedgerRecord(
                key=record_key(kind, text),
                kind=kind,  # type: ignore[arg-type]
                text=text,
                subject=subject_of(text),
                turn=i,
                compaction=1 + i // 4,
            )
        )
    return out


@given(records(), st.sets(st.sampled_from([record_key("decision", w) for w in WORDS])))
@settings(max_examples=150, deadline=None)
def test_dedupe_keeps_each_fact_once_and_never_a_known_one(
    rs: list[LedgerRecord], known: set[str]
) -> None:
    out = dedupe(known, rs)
    keys = [r.key for r in out]
    assert len(keys) == len(set(keys)) and not set(keys) & known
    assert dedupe(known, out) == out  # idempotent
    assert [r for r in rs if r.key in set(keys)][: len(out)] != [] or not out
    # The first of each key stands, in order.
    firsts = {}
    for r in rs:
        firsts.setdefault(r.key, r)
    assert out == [firsts[k] for k in dict.fromkeys(r.key for r in rs) if k not in known]


@given(records(8), records(8))
@settings(max_examples=150, deadline=None)
def test_supersession_keeps_both_and_only_replaces_older_of_the_same_kind(
    old: list[LedgerRecord], new: list[LedgerRecord]
) -> None:
    old = dedupe((), old)
    new = [r.model_copy(update={"compaction": 10 + r.compaction}) for r in dedupe((), new)]
    new = dedupe({r.key for r in old}, new)
    active = still_active(old)
    out = supersede(active, new)
    # Nothing removed or reordered, nothing but `supersedes` changed.
    assert [r.model_copy(update={"supersedes": []}) for r in out] == new
    by_key = {r.key: r for r in [*active, *out]}
    seen: set[str] = set()
    for i, r in enumerate(out):
        for k in r.supersedes:
            older = by_key[k]
            assert older.kind == r.kind and replaces(r, older)
            assert k not in seen  # superseded once
            assert k in {a.key for a in active} or k in {x.key for x in out[:i]}
            seen.add(k)
    assert supersede(active, new) == out  # deterministic
    # A later restatement of a live decision on the same subject replaces it.
    if active and active[-1].kind == "decision" and len(active[-1].subject) >= 2:
        last = active[-1]
        again = LedgerRecord(
            key=record_key("decision", last.text + " now"),
            kind="decision",
            text=last.text + " now",
            subject=subject_of(last.text + " now"),
            turn=99,
            compaction=99,
        )
        (r,) = supersede(active, [again])
        assert last.key in r.supersedes
        assert last.key not in {x.key for x in still_active([*active, r])}


SECRET = "s3cr3t-Tok3n-9a8b7c6d"


@given(
    st.lists(st.sampled_from(WORDS), min_size=2, max_size=8),
    st.sampled_from(["raw", "json", "path"]),
)
@settings(max_examples=60, deadline=None)
def test_extraction_is_pure_and_scrubbed_before_keys_are_taken(words: list[str], how: str) -> None:
    secret = {"raw": SECRET, "json": json.dumps(SECRET)[1:-1], "path": f"/vault/{SECRET}"}[how]
    text = f"we went with {words[0]} for the {words[-1]} because {secret} failed"
    result = {"error": f"cannot reach {words[1]}: token {SECRET} expired", "code": 401}
    u = Unit(
        turn=3,
        kind="model",
        text=text,
        calls=[
            CallItem(
                call_id="c3",
                tool_call_id="t3",
                tool="deploy",
                args={"target": words[1]},
                status="failed",
                result=result_text("failed", result),
                step="tool:c3@v1",
            )
        ],
        refs=["model#3"],
    )

    def scrub(data: Any) -> Any:
        return json.loads(json.dumps(data).replace(SECRET, "[secret]"))

    a = extract([u], [], 2, extractive=False, scrub=scrub)
    assert a == extract([u], [], 2, extractive=False, scrub=scrub)  # pure
    assert a and {r.compaction for r in a} == {2} and {r.turn for r in a} == {3}
    assert len({r.key for r in a}) == len(a)
    assert any(r.kind == "unit" for r in a)
    dumped = json.dumps([r.model_dump() for r in a])
    assert SECRET not in dumped
    assert all(r.key == _key(r) for r in a)  # taken from the scrubbed text


def _key(r: LedgerRecord) -> str:
    return record_key(r.kind, r.text if r.kind != "unit" else f"{r.turn}\x00{r.text}")


# ------------------------------------------------------------------ an agent


FILLER = 60
#: (turn, what the model says, what its tool returns)
PLANTED = {
    2: ("Going with memcached for the cache backend.", "Cache backend options listed."),
    5: ("Reading the storage quota ticket.", "Quota bucket: s3://quota-amber-4412 holds it."),
    # A later decision on the same subject: both stay, the newer replaces the older.
    24: ("Switching to redis for the cache backend instead.", "Cache backend notes."),
}
PROBE_TURN = 56  # its text names the quota bucket's subject, not the value


def _say(turn: int) -> str:
    if turn in PLANTED:
        return PLANTED[turn][0]
    if turn == PROBE_TURN - 1:
        return "Next: where does the storage quota live? Look it up again."
    return f"Reading notes page {turn} of the backlog."


def _output(turn: int) -> str:
    if turn in PLANTED:
        return PLANTED[turn][1] + " " + "filler words here. " * 10
    rows = " ".join(f"row-{turn}-{i} nominal" for i in range(30))
    return (
        f"Page {turn}: release rel-{turn}-{turn * 7919 % 9973} published at /srv/app/{turn}. {rows}"
    )


SEEN: dict[str, dict[int, list[Message]]] = {}


def _agent(name: str, budget: int, secrets: Sequence[str] = ()) -> torpor.Agent:
    tools = torpor.Tools()

    @tools.tool(description="Read a page of notes.", retry=None)
    def read(page: int) -> Any:
        out = _output(page)
        return out if not secrets else out + f" (auth {secrets[0]})"

    def answer(messages: Sequence[Message], specs: Sequence[ToolSpec]) -> Message:
        turn = turn_of(messages)
        SEEN.setdefault(name, {})[turn] = list(messages)
        if turn >= FILLER:
            return Message(role="assistant", content="Done.")
        call = ToolCall(id=f"t{turn}", name="read", arguments={"page": turn})
        return Message(role="assistant", content=_say(turn), tool_calls=[call])

    return torpor.Agent(
        name,
        goal="go through the notes pages",
        tools=tools,
        planner=torpor.ReActPlanner(ScriptedModel([answer] * 500, model_id="scripted-ledger")),
        memory=Memory(budget_tokens=budget),
        budget=torpor.Budget(steps=10_000),
        max_plan_versions=10_000,
        secrets=list(secrets),
    )


_n = 0


def _name(tag: str) -> str:
    global _n
    _n += 1
    return f"test.ledger.{tag}.{_n}"


def test_compactions_write_records_with_provenance_and_supersession(store_url: str) -> None:
    name = _name("prov")
    agent = _agent(name, 1400)
    with torpor.Runtime(store_url) as rt:
        res = rt.run(agent, {}, run_id="led")
    assert res.outcome == "succeeded", res
    with torpor.Client(store_url) as c:
        ledger = c.ledger("led")
        events = {e.seq: e for e in c.events("led")}
    assert ledger, "no record written"
    for r in ledger:
        ev = events[r.seq]  # provenance: the compaction event that carries it
        assert ev.type == "context_compacted"
        assert r.key in [x["key"] for x in ev.payload.ledger]  # type: ignore[attr-defined]
        assert r.at_ms == ev.at_ms and r.run_id == "led"
    assert len({r.key for r in ledger}) == len(ledger)  # deduplicated
    old = [r for r in ledger if "memcached" in r.text and r.kind == "decision"]
    new = [r for r in ledger if "redis" in r.text and r.kind == "decision"]
    assert old and new, [(r.kind, r.text) for r in ledger if "cache" in r.text]
    assert old[0].superseded_by == new[0].key and new[0].superseded_by is None
    assert old[0].superseded_seq == new[0].seq and old[0].superseded_step == new[0].step
    assert any("s3://quota-amber-4412" in r.ids for r in ledger if r.kind != "unit"), [
        (r.kind, r.text, r.ids) for r in ledger if "quota" in r.text
    ]
    units = [r for r in ledger if r.kind == "unit"]
    assert units and all(r.step for r in units)


def test_recall_brings_back_an_earlier_fact_when_a_turn_names_its_subject(
    store_url: str,
) -> None:
    name = _name("recall")
    agent = _agent(name, 1400)
    with torpor.Runtime(store_url) as rt:
        rt.run(agent, {}, run_id="rec")
    system = SEEN[name][PROBE_TURN][0].content
    assert "## recall" in system, system[-2000:]
    recall = system.split("## recall", 1)[1].split("\n## ", 1)[0]
    assert "s3://quota-amber-4412" in recall, recall
    assert "[t6 " in recall  # its provenance: the turn that met it
    # Recall off: no such section (Memory(recall_share=0)).
    name2 = _name("norecall")
    agent2 = _agent(name2, 1400)
    agent2.memory = Memory(budget_tokens=1400, recall_share=0)
    with torpor.Runtime(store_url) as rt:
        rt.run(agent2, {}, run_id="norec")
    assert "## recall" not in SEEN[name2][PROBE_TURN][0].content


def test_known_secrets_never_reach_the_ledger_and_the_cli_lists_it(store_url: str) -> None:
    secret = "Zq9-very-secret-7731"
    agent = _agent(_name("secret"), 1400, secrets=[secret])
    with torpor.Runtime(store_url) as rt:
        rt.run(agent, {}, run_id="sec")
    with torpor.Client(store_url) as c:
        ledger = c.ledger("sec")
    assert ledger and all(secret not in json.dumps(r.as_json()) for r in ledger)
    out = CliRunner().invoke(app, ["--db", store_url, "context", "sec", "--ledger", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert len(data["records"]) == len(ledger) and secret not in out.output
    text = CliRunner().invoke(app, ["--db", store_url, "context", "sec", "--ledger"])
    assert text.exit_code == 0 and "fact ledger of sec" in text.output
    assert "superseded" in text.output
