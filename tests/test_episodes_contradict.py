"""Contradictions among the fact-ledger records of a scope (issue 31, field cards C29/C30):
:mod:`torpor.episodes.contradict` is pure — its properties first —, then on both backends a
capture records the conflict between two runs' ledgers once, ``torpor memory ls`` /
``conflicts`` and a new run's episodes section show which value holds, and ``memory forget``
removes them."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hyp import examples
from torpor.cli import app
from torpor.episodes import EpisodeStore, episodes_section
from torpor.episodes.contradict import (
    Assertion,
    Stated,
    assertions,
    contradictions,
    in_force,
    same_subject,
)
from torpor.history import (
    ContextCompacted,
    Event,
    RunFinished,
    RunStarted,
    StepCompleted,
    StepStarted,
    apply,
    type_of,
)
from torpor.memory.ledger import LedgerRecord, as_payload, record_key, subject_of
from torpor.store import SQLStore, open_store

# ------------------------------------------------------------------ the pure function

SUBJECTS = ["port", "database port", "region", "replica count", "build image tag"]
VALUES = ["5432", "6432", "eu-west-1", "us-east-2", "v2.3", "v2.4", "enabled", "disabled"]


def _fact(
    n: int, text: str, kind: str = "finding", run: str = "r", at: int | None = None
) -> Stated:
    return Stated(run, n, 0, n if at is None else at, kind, text, f"k{n}")


def test_the_forms_read() -> None:
    assert assertions("port is 5432") == [Assertion("port", "5432")]
    assert assertions("The staging database port is now 6432.") == [
        Assertion("staging database port", "6432")
    ]
    assert assertions("region: eu-west-1", "identifier") == [Assertion("region", "eu-west-1")]
    assert assertions("Switched the cache from redis-6 to lru-2", "decision") == [
        Assertion("cache", "lru-2")
    ]
    assert assertions("Decision: use the brisk mirror strategy for the release") == [
        Assertion("use brisk mirror strategy", "yes")
    ]
    assert assertions("stop using the brisk mirror strategy, too slow", "decision") == [
        Assertion("use brisk mirror strategy", "no")
    ]
    assert assertions("Use Python 3.11 for the build image", "decision") == [
        Assertion("python", "3.11")
    ]
    # Not assertions: an opinion, a failure with a number in it, a decision word outside a
    # decision.
    assert assertions("The API is slow") == []
    assert assertions("Deploy failed: connection refused on port 5432", "failure") == []
    assert assertions("we use the brisk mirror strategy", "finding") == []


def test_a_change_of_value_and_a_reversed_decision_are_conflicts() -> None:
    facts = [
        _fact(1, "The database port is 5432", run="a"),
        _fact(2, "Decision: use the brisk mirror strategy", "decision", run="a"),
        _fact(3, "port is 6432", run="b"),
        _fact(4, "Decision: stop using the brisk mirror strategy", "decision", run="b"),
        _fact(5, "port is 6432", run="c"),  # a repeat is no conflict
        _fact(6, "staging port is 7000", run="c"),  # "port" names it too (the subset rule)
    ]
    got = [
        (c.subject, c.old_value, c.new_value, c.older.seq, c.newer.seq)
        for c in contradictions(facts)
    ]
    assert got == [
        ("port", "5432", "6432", 1, 3),
        ("use brisk mirror strategy", "yes", "no", 2, 4),
        ("staging port", "6432", "7000", 5, 6),
    ]
    # ("database port" and "staging port" are not the same subject: neither is a subset.)
    assert not same_subject("database port", "staging port")
    held = in_force(facts)
    assert held["use brisk mirror strategy"][0] == "no"
    assert held["staging port"][0] == "7000"


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(SUBJECTS), st.sampled_from(VALUES), st.integers(0, 50)),
        max_size=25,
    ),
    st.randoms(use_true_random=False),
)
def test_properties(said: list[tuple[str, str, int]], rnd: Any) -> None:
    facts = [_fact(i, f"The {s} is {v}", at=at) for i, (s, v, at) in enumerate(said)]
    for f, (s, v, _) in zip(facts, said, strict=True):  # each text asserts what it says
        assert assertions(f.text) == [Assertion(s, v)]
    found = contradictions(facts)
    shuffled = list(facts)
    rnd.shuffle(shuffled)
    assert contradictions(shuffled) == found  # the order stated decides, not the input's
    for c in found:  # the newer supersedes the older: stated later, another value
        assert c.older.order() < c.newer.order() and c.old_value != c.new_value
        assert same_subject(c.subject, assertions(c.older.text)[0].subject)
    # Each fact is superseded at most once per subject it asserted; what stands is the last.
    olders = [(c.older.key, c.subject) for c in found]
    assert len(olders) == len(set(olders))
    ordered = sorted(facts, key=Stated.order)
    if ordered:
        last = ordered[-1]
        (a,) = assertions(last.text)
        assert in_force(facts)[a.subject] == (a.value, last)
    # One subject, a sequence of values: a conflict per change between neighbours.
    one = [f for f in ordered if assertions(f.text)[0].subject == "region"]
    values = [assertions(f.text)[0].value for f in one]
    changes = sum(1 for x, y in itertools.pairwise(values) if x != y)
    alone = contradictions(one)
    assert len(alone) == changes
    # Facts that agree never conflict.
    same = [_fact(i, f"The region is {VALUES[2]}", at=at) for i, (_, _, at) in enumerate(said)]
    assert contradictions(same) == []


# ------------------------------------------------------------------ recorded, shown, forgotten


@pytest.fixture
def store(store_url: str) -> Any:
    s = open_store(store_url)
    yield s
    s.close()


def _rec(kind: str, text: str, turn: int) -> LedgerRecord:
    return LedgerRecord(
        key=record_key(kind, text), kind=kind, text=text,  # type: ignore[arg-type]
        subject=subject_of(text), turn=turn, step=f"model#{turn}", compaction=1,
    )  # fmt: skip


def _run(store: SQLStore, run_id: str, scope: str, facts: list[tuple[str, str]]) -> None:
    """A run of ``scope`` whose one compaction wrote ``facts``, then finished."""
    assert store.create_run(
        run_id, RunStarted(workflow="ops", version="1"), scope=scope, task_type="ops"
    )
    state = store.load(run_id)
    lease = store.acquire_lease(run_id, "host-a:1:x", ttl_s=30)
    recs = [_rec(k, t, i) for i, (k, t) in enumerate(facts)]
    payloads = [
        StepStarted(step_id="compact", policy="read"),
        ContextCompacted(
            step_id="compact", number=1, summary_hash="0" * 64, summary_tokens=1,
            buffer_tokens_before=10, buffer_tokens_after=5, ledger=as_payload(recs),
        ),
        StepCompleted(step_id="compact", result=None, policy="read"),
        RunFinished(outcome="succeeded"),
    ]  # fmt: skip
    evs = []
    for p in payloads:
        ev = Event(
            run_id=run_id, seq=state.seq + 1, type=type_of(p), payload=p,
            epoch=lease.epoch, at_ms=store.now_ms(),
        )  # fmt: skip
        apply(state, ev)
        evs.append(ev)
    store.append(lease, evs, state)


def _cli(url: str, *args: str) -> str:
    out = CliRunner().invoke(app, ["--db", url, "memory", *args])
    assert out.exit_code == 0, (out.output, out.exception)
    return out.output


def test_a_capture_records_the_conflict_once_and_memory_shows_it(
    store: SQLStore, store_url: str
) -> None:
    es = EpisodeStore(store, embedder=None)
    use, stop = "Decision: use the brisk mirror strategy", "Decision: stop using the brisk mirror"
    _run(store, "a1", "acme", [("finding", "The database port is 5432"), ("decision", use)])
    assert es.capture("a1") and es.conflicts("acme") == []
    _run(store, "g1", "globex", [("finding", "The database port is 7777")])
    es.capture("g1")
    _run(store, "a2", "acme", [("finding", "port is 6432"), ("decision", stop)])
    es.capture("a2")
    es.capture("a2")  # (nothing new: written once)
    got = es.conflicts("acme")
    assert [(c.subject, c.old_value, c.new_value, c.older.run_id, c.newer.run_id) for c in got] == [
        ("use brisk mirror", "yes", "no", "a1", "a2"),
        ("port", "5432", "6432", "a1", "a2"),
    ]
    assert got[0].newer.at_ms >= got[0].older.at_ms > 0
    assert es.conflicts("globex") == []  # another scope's port is not a contradiction
    listed = " ".join(_cli(store_url, "ls", "--scope", "acme").split())
    assert "facts that changed" in listed and "6432" in listed and "5432" in listed
    rows = json.loads(_cli(store_url, "conflicts", "--scope", "acme", "--json"))
    assert [r["new_value"] for r in rows] == ["no", "6432"]
    # A new run of the scope is told which value holds now.
    text = episodes_section(
        store, scope="acme", agent="ops", task_type="ops", goal="deploy",
        token_budget=800, embedder=None,
    )  # fmt: skip
    assert "Facts that changed in this scope" in text
    assert "- port: 6432 (run a2" in text and "was 5432, run a1" in text
    # Forgetting the scope removes them; the other scope keeps its memory.
    removed = es.forget("acme")
    assert removed["ledger_conflicts"] == 2 and es.conflicts("acme") == []
    assert es.scopes() == {"globex": 1}
