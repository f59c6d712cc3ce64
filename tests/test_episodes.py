"""Episodic memory (issue 18) on both backends: episodes captured from real agent runs, scopes
that never leak, supersession, FTS syntax in user text, idempotent writes, filters, retention,
the context section, and the ``torpor memory`` commands."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

import episodes_kit as kit
import torpor
from conftest import HANG_S
from torpor.cli import app
from torpor.episodes import Episode, EpisodeStore, episodes_section, section_for_run, terms
from torpor.errors import ConfigError, EpisodeNotFoundError


@pytest.fixture
def rt(store_url: str) -> Iterator[torpor.Runtime]:
    kit.WORLD.update(a_works=False, log=[])
    r = torpor.Runtime(store_url)
    yield r
    r.close()


def ep(
    n: int,
    scope: str,
    text: str,
    *,
    agent: str = "ag",
    task_type: str = "deploy",
    outcome: str = "failed",
    at_ms: int = 0,
    claims: dict[str, str] | None = None,
) -> Episode:
    return Episode(
        episode_id=f"x{n}:ended@{n}",
        run_id=f"x{n}",
        boundary=f"ended@{n}",
        scope=scope,
        agent=agent,
        task_type=task_type,
        kind="ended",
        outcome=outcome,
        summary=f"run {n}: {text}",
        lesson=f"- {text}",
        at_seq=n,
        created_at_ms=at_ms or 1_000_000 + n,
        claims=claims or {},
    )


# ------------------------------------------------------------------ captured from runs


def test_agent_run_files_episodes_with_its_lesson(rt: torpor.Runtime) -> None:
    rid = rt.start(kit.code_agent(), {"target": "prod"}, run_id="day1", scope="acme")
    res = rt.resume(rid)
    assert res.outcome == "succeeded", res.reason
    es = EpisodeStore(rt.store)
    hits = es.search("approach failed connection", scope="acme")
    assert [h.boundary.split("@")[0] for h in hits] == ["ended", "milestone"] or {
        h.kind for h in hits
    } == {"ended", "milestone"}
    ended = next(h for h in hits if h.kind == "ended")
    assert ended.episode_id == f"day1:{ended.boundary}" and ended.outcome == "succeeded"
    assert (ended.scope, ended.agent, ended.task_type) == ("acme", "ep.deployer", "deploy")
    assert "approach_a" in ended.lesson and kit.A_ERROR in ended.lesson
    assert "the legacy API is what ops documented" in ended.lesson  # why it was tried
    assert "then approach_b" in ended.lesson and "verification deployed passed" in ended.lesson
    assert ended.conditions["tools"] == ["approach_a", "approach_b"]
    assert len(ended.conditions["input_fingerprint"]) == 16
    assert ended.claims == {"approach_a": "failed", "approach_b": "succeeded"}
    assert ended.at_seq in ended.refs["events"] and len(ended.refs["events"]) >= 3
    # The events referenced are the record's own.
    events = {e.seq: e.type for e in rt.store.read_events(rid)}
    assert events[ended.at_seq] == "run_finished"
    assert {events[s] for s in ended.refs["events"]} >= {"tool_call_settled", "run_finished"}
    # Capturing again (a second execution, a sweep) writes nothing new.
    before = es.count()
    assert es.capture(rid) == [] and es.catch_up() == 0 and es.count() == before
    assert rt.resume(rid).outcome == "succeeded" and es.count() == before
    # Outside the scope, nothing.
    assert es.search("approach failed connection", scope="globex") == []


def test_runs_of_workflows_without_a_task_type_get_no_episodes(rt: torpor.Runtime) -> None:
    @torpor.workflow("ep.plain")
    def plain(run: torpor.Run, inp: int) -> int:
        return run.step("double", lambda: inp * 2)

    assert rt.run("ep.plain", 2, run_id="p1").outcome == "succeeded"
    assert EpisodeStore(rt.store).count() == 0
    with pytest.raises(ConfigError, match="declares no task type"):
        rt.start("ep.plain", 1, task_type="x")
    with pytest.raises(ConfigError, match="scope must be a string"):
        rt.start("ep.plain", 1, scope="s" * 201)


def test_a_wait_is_an_episode(rt: torpor.Runtime) -> None:
    @torpor.workflow("ep.waiter", task_type="review")
    def waiter(run: torpor.Run, inp: int) -> str:
        run.wait_for("go")
        return "done"

    res = rt.run("ep.waiter", 1, run_id="w1", scope="acme")
    assert res.status == "waiting"
    (slept,) = EpisodeStore(rt.store).search("", scope="acme", task_type="review")
    assert slept.kind == "slept" and slept.outcome == "waiting"
    assert "waiting for signal 'go'" in slept.summary


# ------------------------------------------------------------------ scopes


SCOPES = ("acme", "acme corp", "ACME", "globex", "")
WORDS = ("deploy timeout", "deploy refused", "migration timeout", "rollback deploy")


@pytest.fixture
def seeded(rt: torpor.Runtime) -> EpisodeStore:
    es = EpisodeStore(rt.store)
    eps = [
        ep(i * 10 + j, scope, f"{words} in {scope or 'nobody'}")
        for i, scope in enumerate(SCOPES)
        for j, words in enumerate(WORDS)
    ]
    assert len(es.write(eps)) == len(eps)
    return es


NASTY = (
    '"',
    '"unbalanced quote',
    "NEAR(deploy timeout, 2)",
    "deploy*",
    "-deploy",
    "deploy -timeout",
    "(deploy",
    "deploy)",
    "deploy OR",
    "AND",
    "NOT deploy",
    "tags : x",
    "scope:globex",
    "{summary lesson}: deploy",
    "^deploy",
    "deploy:*",
    "deploy & !timeout | <-> rollback",
    "'; DROP TABLE episodes; --",
    "\\",
    "💥 deploy",
    "x" * 5000,
    "\x00deploy",
)


@pytest.mark.parametrize("filters", [{}, {"agent": "ag"}, {"task_type": "deploy"}])
def test_two_scopes_with_overlapping_words_never_leak(
    seeded: EpisodeStore, filters: dict[str, str]
) -> None:
    for scope in SCOPES:
        for q in (*WORDS, "", "deploy", "acme globex corp nobody", *NASTY):
            hits = seeded.search(q, scope=scope, limit=50, **filters)
            assert {h.scope for h in hits} <= {scope}, (scope, q)
        all_hits = seeded.search("", scope=scope, limit=50, **filters)
        assert len(all_hits) == len(WORDS)


def test_fts_syntax_in_user_text_is_plain_words(seeded: EpisodeStore) -> None:
    for q in NASTY:
        seeded.search(q, scope="acme")  # never an error
    assert terms('NEAR("a" b)* -c (d) e:f') == ["near", "a", "b", "c", "d", "e", "f"]
    # "-timeout" is the word timeout, not NOT timeout; "*" is no prefix operator.
    assert {h.summary for h in seeded.search("-timeout", scope="acme")} == {
        "run 0: deploy timeout in acme",
        "run 2: migration timeout in acme",
    }
    assert seeded.search("deplo*", scope="acme") == []
    # An operator word is a word: an episode containing it is found by it.
    seeded.write([ep(999, "acme", "waited near the gate")])
    assert [h.run_id for h in seeded.search("NEAR", scope="acme")] == ["x999"]
    # Stemming: "timeouts" finds "timeout".
    assert len(seeded.search("timeouts", scope="acme")) == 2


def test_filters_are_answered_with_the_query(rt: torpor.Runtime) -> None:
    es = EpisodeStore(rt.store)
    es.write(
        [
            ep(1, "acme", "deploy timeout", agent="a1", task_type="deploy", at_ms=1_000),
            ep(2, "acme", "deploy timeout", agent="a2", task_type="deploy", at_ms=2_000),
            ep(3, "acme", "deploy timeout", agent="a1", task_type="migrate", at_ms=3_000),
            ep(4, "acme", "deploy timeout", agent="a1", outcome="succeeded", at_ms=4_000),
        ]
    )

    def ids(**kw: object) -> list[str]:
        return sorted(h.run_id for h in es.search("deploy", scope="acme", **kw))  # type: ignore[arg-type]

    assert ids(agent="a1") == ["x1", "x3", "x4"]
    assert ids(task_type="migrate") == ["x3"]
    assert ids(outcome="succeeded") == ["x4"]
    assert ids(agent="a1", task_type="deploy", outcome="failed") == ["x1"]
    assert ids(since_ms=2_500) == ["x3", "x4"]
    assert ids(until_ms=2_000) == ["x1", "x2"]
    # Ties in relevance: the most recent first; a query without words: recency.
    assert [h.run_id for h in es.search("", scope="acme")] == ["x4", "x3", "x2", "x1"]
    with pytest.raises(ConfigError, match="limit must be at least 1"):
        es.search("deploy", scope="acme", limit=0)
    # An optional re-ranking hook (an embedding model, say) sees the hits and reorders them.
    rev = es.search("deploy", scope="acme", rerank=lambda q, hits: list(reversed(hits)))
    assert [h.run_id for h in rev] == list(
        reversed([h.run_id for h in es.search("deploy", scope="acme")])
    )


def test_relevance_ranks_the_better_match_first(rt: torpor.Runtime) -> None:
    es = EpisodeStore(rt.store)
    es.write(
        [
            ep(1, "s", "the database migration failed with a lock timeout on the orders table"),
            ep(2, "s", "deploy went fine"),
            ep(3, "s", "lock timeout again: the migration of the orders table needs a window"),
        ]
    )
    hits = es.search("orders table migration lock", scope="s")
    assert {h.run_id for h in hits[:2]} == {"x1", "x3"} and hits[0].score >= hits[-1].score


# ------------------------------------------------------------------ supersession


def test_a_contradicting_lesson_supersedes_the_old_one(rt: torpor.Runtime) -> None:
    agent = kit.code_agent()
    assert rt.run(agent, {"target": "prod"}, run_id="old").outcome == "succeeded"
    es = EpisodeStore(rt.store)
    old = [h.episode_id for h in es.search("approach_a", scope="")]
    assert len(old) == 2 and all(h.startswith("old:") for h in old)
    # Approach A is fixed: the next run's A succeeds, contradicting "A failed".
    kit.WORLD["a_works"] = True
    assert rt.run(agent, {"target": "prod"}, run_id="new").outcome == "succeeded"
    hits = es.search("approach_a", scope="")
    assert hits and all(h.run_id == "new" for h in hits)
    assert all(h.claims == {"approach_a": "succeeded"} for h in hits)
    newest = next(h for h in hits if h.kind == "ended")
    for eid in old:  # still readable, pointing at what superseded it
        kept = es.get(eid)
        assert kept.superseded_by is not None and kept.superseded_by.startswith("new:")
        assert kit.A_ERROR in kept.lesson
    both = es.search("approach_a", scope="", include_superseded=True)
    assert {h.run_id for h in both} == {"old", "new"}
    # The newer lesson is what the next run is told.
    text = section_for_run(
        rt.store, rt.start(agent, {}, run_id="next"), goal="deploy", token_budget=500
    )
    assert "run new" in text and "run old" not in text
    assert newest.episode_id in {h.episode_id for h in hits}


def test_supersede_by_hand(rt: torpor.Runtime) -> None:
    es = EpisodeStore(rt.store)
    es.write([ep(1, "s", "use the blue runner"), ep(2, "s", "the blue runner is retired")])
    assert es.supersede("x1:ended@1", "x2:ended@2") is True
    assert es.supersede("x1:ended@1", "x2:ended@2") is False
    assert [h.run_id for h in es.search("blue runner", scope="s")] == ["x2"]
    with pytest.raises(EpisodeNotFoundError, match="no episode 'nope'"):
        es.supersede("nope", "x2:ended@2")


# ------------------------------------------------------------------ writes


def test_writes_are_idempotent_even_concurrently(rt: torpor.Runtime) -> None:
    es = EpisodeStore(rt.store)
    eps = [ep(i, "s", f"lesson {i} deploy") for i in range(20)]
    out: list[int] = []
    errors: list[BaseException] = []

    def write() -> None:
        try:
            out.append(len(es.write(eps)))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and sum(out) == 20 and es.count() == 20
    assert len(es.search("deploy", scope="s", limit=100)) == 20


def test_retention_has_its_own_policy(rt: torpor.Runtime) -> None:
    agent = kit.code_agent()
    assert rt.run(agent, {"target": "prod"}, run_id="r1").outcome == "succeeded"
    kit.WORLD["a_works"] = True
    assert rt.run(agent, {"target": "prod"}, run_id="r2").outcome == "succeeded"
    es = EpisodeStore(rt.store)
    assert es.count() == 3  # r1: milestone + ended; r2: ended (no failure, no milestone)
    far = rt.store.now_ms() + 1000
    assert es.prune(before_ms=far, superseded_only=True) == 2
    assert es.count() == 1 and es.search("approach", scope="", include_superseded=True)
    assert rt.store.get_run("r1").outcome == "succeeded"  # runs are untouched
    assert es.prune(before_ms=0) == 0
    assert es.prune(before_ms=far, batch=1) == 1 and es.count() == 0
    assert es.search("approach", scope="") == []


# ------------------------------------------------------------------ the context section


def test_episodes_section_is_bounded_and_one_per_run(rt: torpor.Runtime) -> None:
    es = EpisodeStore(rt.store)
    es.write(
        [
            ep(i, "s", f"deploy attempt {i} failed: timeout talking to the registry")
            for i in range(50)
        ]
    )
    text = episodes_section(
        rt.store, scope="s", agent="ag", task_type="deploy", goal="deploy", token_budget=200
    )
    assert text.startswith("Episodes:") and len(text) <= 200 * 4
    assert text.count("- run x") >= 1
    assert (
        episodes_section(
            rt.store, scope="s", agent="ag", task_type="deploy", goal="deploy", token_budget=5
        )
        == ""
    )
    assert (
        episodes_section(
            rt.store, scope="other", agent="ag", task_type="deploy", goal="deploy", token_budget=500
        )
        == ""
    )
    big = episodes_section(
        rt.store,
        scope="s",
        agent="ag",
        task_type="deploy",
        goal="deploy",
        token_budget=10_000,
        limit=5,
    )
    assert big.count("- run x") == 5  # one per run, at most limit


def test_episodes_section_counts_with_the_one_token_estimate(rt: torpor.Runtime) -> None:
    """The section's budget is counted with the estimate the rest of the context uses
    (torpor.tokens), not a cruder one of its own: by that estimate it fits its budget, and it is
    what counting with it explicitly gives."""
    from torpor.tokens import estimate_text

    es = EpisodeStore(rt.store)
    es.write(
        [ep(i, "s", f"deploy attempt {i} failed: registry 0x{i:08x} refused") for i in range(30)]
    )
    args = dict(scope="s", agent="ag", task_type="deploy", goal="deploy", token_budget=200)
    text = episodes_section(rt.store, **args)  # type: ignore[arg-type]
    assert text.count("- run x") >= 1
    assert estimate_text(text) <= 200
    assert text == episodes_section(rt.store, **args, count_tokens=estimate_text)  # type: ignore[arg-type]


# ------------------------------------------------------------------ the CLI


def test_memory_commands(rt: torpor.Runtime, store_url: str) -> None:
    rid = rt.start(kit.code_agent(), {"target": "prod"}, run_id="cli1", scope="acme")
    assert rt.resume(rid).outcome == "succeeded"
    runner = CliRunner()

    def cli(*args: str) -> str:
        out = runner.invoke(app, ["--db", store_url, "memory", *args])
        assert out.exit_code == 0, out.output
        return out.output

    found = json.loads(cli("search", "legacy API refused", "--scope", "acme", "--json"))
    assert {f["kind"] for f in found} == {"ended", "milestone"}
    assert json.loads(cli("search", "legacy", "--scope", "globex", "--json")) == []
    assert (
        json.loads(cli("search", "legacy", "--scope", "acme", "--outcome", "failed", "--json"))
        == []
    )
    got = json.loads(
        cli(
            "search",
            "(legacy) -NEAR*",
            "--scope",
            "acme",
            "--task-type",
            "deploy",
            "--agent",
            "ep.deployer",
            "--since",
            "1d",
            "--json",
        )
    )
    assert len(got) == 2
    table = cli("search", "legacy", "--scope", "acme")
    assert "cli1:ended@" in table and "ep.deployer" in table
    eid = next(f["episode_id"] for f in found if f["kind"] == "ended")
    shown = cli("show", eid)
    assert "lesson:" in shown and kit.A_ERROR in shown and "approach_a, approach_b" in shown
    assert json.loads(cli("show", eid, "--json"))["claims"]["approach_a"] == "failed"
    assert "wrote 0 episode(s)" in cli("sync")
    assert "deleted 0 episode(s)" in cli("prune", "--older-than", "30d")
    assert "deleted 2 episode(s)" in cli("prune", "--older-than", "2999-01-01")
    bad = runner.invoke(app, ["--db", store_url, "memory", "search", "x", "--since", "yesterday"])
    assert bad.exit_code != 0 and "--since: expected a duration" in str(bad.exception)
    missing = runner.invoke(app, ["--db", store_url, "memory", "show", "nope:ended@1"])
    assert isinstance(missing.exception, EpisodeNotFoundError)
    assert "no episode 'nope:ended@1'" in str(missing.exception)


def _zipf_episodes(seed: int, n: int) -> tuple[list[Episode], list[str]]:
    """``n`` episodes in 3 scopes and 2 task types, texts drawn with a Zipf law from words of
    consonants only (no stemmer on either backend changes them, none is a stop word), and 40
    queries of 1-4 words from the same law."""
    import random

    rnd = random.Random(seed)
    letters = "bcdfghjklmnpqrtvwxz"
    vocab = sorted({"".join(rnd.choice(letters) for _ in range(5)) for _ in range(300)})
    weights = [1 / (r + 1) ** 1.1 for r in range(len(vocab))]
    eps = []
    for i in range(n):
        words = rnd.choices(vocab, weights, k=rnd.randint(4, 30))
        eps.append(ep(i, f"s{i % 3}", " ".join(words), task_type=f"t{i % 2}", at_ms=1_000_000 + i))
    queries = [" ".join(rnd.choices(vocab, weights, k=rnd.randint(1, 4))) for _ in range(40)]
    return eps, queries


def test_the_same_data_ranks_the_same_top_k_on_both_backends(db_url: str, pg_url: str) -> None:
    """One ranking (rarity within the caller's scope: counted in FTS5, read from PostgreSQL's
    per-scope counters): the
    same episodes written in the same order give the same top 10, in the same order, for every
    query and filter on SQLite and PostgreSQL."""
    eps, queries = _zipf_episodes(31, 600)
    results = []
    for url in (db_url, pg_url):
        with torpor.Runtime(url) as r:
            es = EpisodeStore(r.store)
            for lo in range(0, len(eps), 100):
                es.write(eps[lo : lo + 100])
            got = []
            for q in queries:
                for scope, tt in (("s0", None), ("s1", "t1"), ("s2", "t0")):
                    hits = es.search(q, scope=scope, task_type=tt, limit=10)
                    got.append([(h.episode_id, round(h.score, 9)) for h in hits])
            results.append(got)
    assert sum(map(bool, results[0])) > 0.8 * len(results[0]), "most queries found something"
    assert results[0] == results[1]


def test_a_batch_supersedes_as_writes_one_by_one_do(
    db_url: str, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's supersession check (each scope and task type's live episodes read once) ends
    with the same episodes superseded, by the same ones, as writing them one at a time — with
    a window small enough that the batch's own rows overflow it (the fallback read)."""
    import torpor.episodes.store as episode_store

    monkeypatch.setattr(episode_store, "SUPERSEDE_WINDOW", 3)

    def draft(n: int) -> Episode:
        verdict = "failed" if (n * 7) % 5 < 2 else "succeeded"
        return ep(n, f"s{n % 2}", f"deploy {n}", claims={f"tool{n % 3}": verdict})

    eps = [draft(n) for n in range(40)]
    states = []
    for url, batch in ((db_url, 1), (pg_url, 1), (pg_url, 13)):
        with torpor.Runtime(url) as r:
            es = EpisodeStore(r.store)
            es.forget("s0"), es.forget("s1")  # (one SQLite file for both cases)
            for lo in range(0, len(eps), batch):
                es.write(eps[lo : lo + batch])
            states.append({e.episode_id: es.get(e.episode_id).superseded_by for e in eps})
    with torpor.Runtime(db_url) as r:
        es = EpisodeStore(r.store)
        es.forget("s0"), es.forget("s1")
        es.write(eps)
        states.append({e.episode_id: es.get(e.episode_id).superseded_by for e in eps})
    assert sum(1 for v in states[0].values() if v) > 5
    assert states[0] == states[1] == states[2] == states[3]


def test_postgres_writers_share_no_rows(pg_url: str) -> None:
    """Writers in different scopes touch no common row (no shared counters): a writer holding
    its transaction open does not block another scope's writer, which commits first."""
    import psycopg

    with torpor.Runtime(pg_url) as r:
        es = EpisodeStore(r.store)
        es.write([ep(0, "warm", "deploy timeout")])
        order: list[str] = []
        with psycopg.connect(pg_url, autocommit=False) as hold:
            hold.execute(
                "INSERT INTO episodes (episode_id, run_id, boundary, scope, agent, task_type, "
                "kind, outcome, summary, lesson, conditions, refs, claims, tags, at_seq, "
                "created_at_ms, tsv) VALUES ('h:ended@1', 'h', 'ended@1', 'held', 'ag', "
                "'deploy', 'ended', 'failed', 'deploy timeout', 'deploy timeout', '{}', '{}', "
                "'{}', '', 1, 1, to_tsvector('english', 'deploy timeout'))"
            )
            t = threading.Thread(
                target=lambda: (es.write([ep(1, "other", "deploy timeout")]), order.append("w"))
            )
            t.start()
            t.join(timeout=HANG_S)
            order.append("held commit")
            hold.commit()
        assert order == ["w", "held commit"]
        assert len(es.search("deploy", scope="other")) == 1


def test_day_three_the_next_run_is_told_and_does_not_repeat_the_failure(
    rt: torpor.Runtime,
) -> None:
    """Run 1 fails approach A with a reason and succeeds with B; run 2 of the same agent and
    task type starts with a context whose episodes section names A as failed and why, and its
    planner — which tries A unless told — goes straight to B. A run in another scope is told
    nothing and tries A."""
    agent, model = kit.scripted_agent()
    assert rt.run(agent, {"target": "prod"}, run_id="day1", scope="acme").outcome == "succeeded"
    assert kit.tried(kit.WORLD["log"]) == ["a", "b"]
    assert not kit.told_a_failed(model.calls[0])

    kit.WORLD["log"] = []
    first = len(model.calls)
    assert rt.run(agent, {"target": "prod"}, run_id="day3", scope="acme").outcome == "succeeded"
    assert kit.tried(kit.WORLD["log"]) == ["b"]
    section = kit.system_text(model.calls[first])
    assert "Episodes:" in section and "run day1" in section
    assert 'approach_a({"target": "prod"}) failed' in section and kit.A_ERROR in section
    # The section is recorded with the run: read back, not searched again, on resume.
    recorded = [e for e in rt.store.read_events("day3") if e.step_id == "episodes"]
    assert recorded and "approach_a" in str(recorded[-1].payload)
    # It is a section of the context builder's (issue 17): charged to the budget, recorded
    # with each model call it was sent with.
    built = [e.payload for e in rt.store.read_events("day3") if e.type == "context_built"]
    assert built and all(b.sections.get("episodes", 0) > 0 for b in built)  # type: ignore[attr-defined]
    assert "## episodes" in section

    kit.WORLD["log"] = []
    assert rt.run(agent, {"target": "prod"}, run_id="other", scope="globex").outcome == "succeeded"
    assert kit.tried(kit.WORLD["log"]) == ["a", "b"]


def test_common_words_fill_by_recency_after_the_informative_ones(
    rt: torpor.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A word in a fifth of the filter or more is not scored: the episodes holding the
    informative words come first (most informative first), the slots left go to the newest
    holding the common ones — the exact filters applied throughout (here: a time window that
    drops the newest candidates, so more are read)."""
    from torpor.episodes import search

    monkeypatch.setattr(search, "CAP_MIN", 5)
    es = EpisodeStore(rt.store)
    eps = [ep(i, "s", f"deploy step {i}", at_ms=10_000 + i) for i in range(40)]
    eps[3] = ep(3, "s", "deploy step 3 hit the quota wall", at_ms=10_003)
    eps[7] = ep(7, "s", "deploy step 7 quota", at_ms=10_007)
    es.write(eps)
    es.write([ep(100 + i, "other", "deploy quota quota wall") for i in range(5)])
    hits = es.search("quota wall deploy", scope="s", limit=6)
    assert [h.run_id for h in hits[:2]] == ["x3", "x7"]  # both informative words, then one
    assert hits[0].score > hits[1].score > 0
    assert [h.run_id for h in hits[2:]] == ["x39", "x38", "x37", "x36"]  # newest with "deploy"
    windowed = es.search("quota deploy", scope="s", limit=4, until_ms=10_020)
    assert [h.run_id for h in windowed] == ["x7", "x3", "x20", "x19"]
    assert {h.scope for h in es.search("quota wall deploy", scope="s", limit=50)} == {"s"}


def test_queries_have_the_same_names_in_both_dialects() -> None:
    from torpor.episodes.store import load_episode_queries

    sqlite, pg = set(load_episode_queries("sqlite")), set(load_episode_queries("postgres"))
    # SQLite: a prepared statement per row, and FTS5's own index rows; PostgreSQL: one
    # statement per batch (no counters: both count in the index).
    assert sqlite - pg == {
        "last_episode_id", "insert_episode", "inserted_since", "index_since", "unindex_episode"
    }  # fmt: skip
    assert pg - sqlite == {"insert_episodes"}


def test_an_idle_worker_writes_episodes_a_dead_process_left(rt: torpor.Runtime) -> None:
    from torpor.worker import Worker

    agent = kit.code_agent()
    assert rt.run(agent, {"target": "prod"}, run_id="w1", scope="acme").outcome == "succeeded"
    es = EpisodeStore(rt.store)
    written = es.search("", scope="acme", limit=10)
    # As if the process had died after the outcome, before its capture: nothing written yet.
    es.prune(before_ms=rt.store.now_ms() + 1000)
    with rt.store.driver.transaction() as cur:
        sql = "UPDATE runs SET episodes_seq = 0 WHERE run_id = :r"
        rt.store.driver.execute(cur, sql, {"r": "w1"})
    assert es.count() == 0
    Worker(rt, poll_s=0.05).run(until_idle=True, max_seconds=5)
    again = es.search("", scope="acme", limit=10)
    assert [(e.episode_id, e.lesson) for e in again] == [(e.episode_id, e.lesson) for e in written]


def test_a_model_may_phrase_the_lesson_in_a_recorded_step(rt: torpor.Runtime) -> None:
    from torpor.agents.models import ScriptedModel
    from torpor.agents.models.scripted import say

    phrasing = ScriptedModel([say("Use B: A's legacy API only speaks TLS 1.0.")])
    agent = torpor.Agent(
        "ep.phrased",
        goal="deploy the service to the target environment",
        tools=kit.tools,
        planner=torpor.CodePlanner(kit.code_plan),
        task_type="deploy",
        lesson_model=phrasing,
    )
    assert rt.run(agent, {"target": "prod"}, run_id="ph1", scope="acme").outcome == "succeeded"
    (asked,) = phrasing.calls
    assert kit.A_ERROR in asked[-1].content and "approach_a" in asked[-1].content
    es = EpisodeStore(rt.store)
    ended = next(h for h in es.search("", scope="acme") if h.kind == "ended")
    first, *rest = ended.lesson.splitlines()
    assert first == "- in short: Use B: A's legacy API only speaks TLS 1.0."
    assert any(kit.A_ERROR in ln for ln in rest)  # the record's lines stay, as evidence
    milestone = next(h for h in es.search("", scope="acme") if h.kind == "milestone")
    assert "in short" not in milestone.lesson  # phrased at the end, after the milestone
    # Resumed (a finished run re-executed): the recorded phrasing is read back, not asked again.
    assert rt.resume("ph1").outcome == "succeeded" and len(phrasing.calls) == 1
    # Nothing failed: nothing to phrase, no model call.
    kit.WORLD["a_works"] = True
    assert rt.run(agent, {"target": "prod"}, run_id="ph2", scope="acme").outcome == "succeeded"
    assert len(phrasing.calls) == 1


def test_postgres_search_plans_use_the_indexes_at_every_size(pg_url: str) -> None:
    """Every query a search runs on PostgreSQL — the scope's size and each word's count (its
    counters), the scored candidates, the recent fill, the rows — is planned on an index (GIN
    or b-tree),
    never a sequential scan of the episodes, whether the store holds 20, 400 or 4,000
    episodes (freshly analyzed)."""
    eps, queries = _zipf_episodes(7, 4000)
    with torpor.Runtime(pg_url) as r:
        es, d = EpisodeStore(r.store), r.store.driver
        asked: list[tuple[str, dict]] = []
        fetchall, fetchone = d.fetchall, d.fetchone

        def spy_all(cur: object, sql: str, params: dict) -> list:
            asked.append((sql, dict(params)))
            return fetchall(cur, sql, params)

        def spy_one(cur: object, sql: str, params: dict) -> object:
            asked.append((sql, dict(params)))
            return fetchone(cur, sql, params)

        loaded = 0
        for size in (20, 400, 4000):
            es.bulk_import(eps[loaded:size], batch=200)
            loaded = size
            with d.transaction() as cur:
                d.execute(cur, "ANALYZE episodes", {})
            asked.clear()
            d.fetchall, d.fetchone = spy_all, spy_one  # type: ignore[method-assign]
            try:
                for q in [*queries[:6], ""]:
                    es.search(q, scope="s1")
                    es.search(q, scope="s2", task_type="t0", limit=3)
            finally:
                d.fetchall, d.fetchone = fetchall, fetchone  # type: ignore[method-assign]
            assert len(asked) > 20
            with r.store.episode_index() as ix:  # (its snapshot, as a search plans in it)
                for sql, params in asked:
                    plan = "\n".join(str(x[0]) for x in fetchall(ix.cur, "EXPLAIN " + sql, params))
                    assert "Seq Scan on episode" not in plan, (size, sql, plan)  # (and terms)
                    assert "episodes" not in sql or "Index" in plan or "Bitmap" in plan, plan
