"""Word rarity within a scope (issue 31): PostgreSQL's per-scope counters (``episode_terms``,
migration 0021) stay exactly what counting the episodes gives, whoever writes or deletes the
rows; a search weighs its words from them and ranks as counting in the index would; search
plans are made for their parameters; English stop words weigh nothing on either backend."""

from __future__ import annotations

from typing import Any

import pytest

import torpor
from torpor.episodes import Episode, EpisodeStore
from torpor.store import episode_index

RECOUNT = """
SELECT scope, lexeme, count(*) FROM (
    SELECT scope, '' AS lexeme FROM episodes
    UNION ALL
    SELECT e.scope, l FROM episodes e, unnest(tsvector_to_array(e.tsv)) AS l
    WHERE l <> ALL (string_to_array(e.tags, ' '))
) x WHERE 0 = :z GROUP BY scope, lexeme
"""


def _ep(n: int, scope: str, text: str, *, at_ms: int = 0) -> Episode:
    return Episode(
        episode_id=f"t{n}:ended@1",
        run_id=f"t{n}",
        boundary="ended@1",
        scope=scope,
        agent="ag",
        task_type=f"tt{n % 2}",
        kind="ended",
        outcome="failed",
        summary=f"episode {text}",
        lesson=f"- {text}",
        at_seq=1,
        created_at_ms=at_ms or 1_000_000 + n,
    )


def _texts(n: int) -> list[str]:
    import random

    rnd = random.Random(n)
    vocab = [f"w{i}x" for i in range(40)] + ["deploy", "deploys", "mirror", "the", "of"]
    weights = [1 / (r + 1) for r in range(len(vocab))]
    return [" ".join(rnd.choices(vocab, weights, k=rnd.randint(2, 12))) for _ in range(n)]


def _counters(store: Any) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """``(kept, recounted)``: the counters as stored and as the episodes give them."""
    d = store.driver
    with d.read() as cur:
        sql = "SELECT scope, lexeme, docs FROM episode_terms WHERE 0 = :z"
        kept = d.fetchall(cur, sql, {"z": 0})
        again = d.fetchall(cur, RECOUNT, {"z": 0})
    return (
        {(str(s), str(w)): int(n) for s, w, n in kept},
        {(str(s), str(w)): int(n) for s, w, n in again},
    )


def test_postgres_word_counters_stay_exact_whoever_writes(pg_url: str) -> None:
    """Batches through the public call, a bulk import, a row inserted and one deleted by hand,
    a prune, a scope forgotten: after each, ``episode_terms`` holds exactly the per-scope
    counts recounted from the episodes (no zero rows left behind)."""
    texts = _texts(240)
    with torpor.Runtime(pg_url) as r:
        es, d = EpisodeStore(r.store, embedder=None), r.store.driver
        es.write([_ep(i, f"s{i % 3}", texts[i]) for i in range(100)])
        for i in range(100, 130):
            es.write([_ep(i, f"s{i % 3}", texts[i])])
        assert es.bulk_import([_ep(i, "s9", texts[i]) for i in range(130, 240)], batch=40) == 110
        kept, again = _counters(r.store)
        assert kept == again and kept[("s9", "")] == 110
        with d.transaction() as cur:  # by hand, no torpor code: the table's trigger counts
            d.execute(
                cur,
                "INSERT INTO episodes (episode_id, run_id, boundary, scope, agent, task_type, "
                "kind, outcome, summary, lesson, conditions, refs, claims, tags, at_seq, "
                "created_at_ms, tsv) VALUES ('h:ended@1', 'h', 'ended@1', 's0', 'ag', 'tt0', "
                "'ended', 'failed', 'mirror', 'mirror', '{}', '{}', '{}', '', 1, 5, "
                "to_tsvector('english', 'mirror strategy'))",
                {},
            )
            d.execute(cur, "DELETE FROM episodes WHERE episode_id = :e", {"e": "t3:ended@1"})
        kept, again = _counters(r.store)
        assert kept == again
        assert es.prune(before_ms=1_000_050) > 0
        assert es.forget("s9")["episodes"] == 110
        kept, again = _counters(r.store)
        assert kept == again and not any(s == "s9" for s, _ in kept)
        assert all(n > 0 for n in kept.values())


def test_postgres_counters_rank_as_counting_in_the_index(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counters are a faster way to the same numbers: every query and filter gives the
    same top 10 with the same scores whether the search reads them or counts in the GIN
    index, one statement per word (:meth:`SQLEpisodeIndex.counted` disabled)."""
    texts = _texts(300)
    queries = _texts(25)
    with torpor.Runtime(pg_url) as r:
        es = EpisodeStore(r.store, embedder=None)
        es.write([_ep(i, f"s{i % 2}", texts[i]) for i in range(300)])

        def run() -> list[list[tuple[str, float]]]:
            return [
                [(h.episode_id, round(h.score, 9)) for h in es.search(q, scope=sc, task_type=tt)]
                for q in queries
                for sc, tt in (("s0", None), ("s1", "tt1"))
            ]

        fast = run()
        monkeypatch.setattr(episode_index.SQLEpisodeIndex, "counted", lambda *a: None)
        assert run() == fast
        assert sum(map(bool, fast)) > len(fast) // 2


def test_postgres_search_plans_are_made_for_their_parameters(pg_url: str) -> None:
    """A prepared statement's generic plan of the rows-by-id query walks the whole scope (the
    p95 tail of issue 31): the search's snapshot plans every statement for its values."""
    with torpor.Runtime(pg_url) as r:
        with r.store.episode_index() as ix:
            row = r.store.driver.fetchone(
                ix.cur,  # type: ignore[attr-defined]
                "SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan') "
                "WHERE 0 = :z",
                {"z": 0},
            )
        assert row == ("force_custom_plan", "off")
        with r.store.driver.read() as cur:  # only there: the setting is the transaction's
            row = r.store.driver.fetchone(
                cur, "SELECT current_setting('plan_cache_mode') WHERE 0 = :z", {"z": 0}
            )
        assert row == ("auto",)


def test_stop_words_weigh_nothing_on_either_backend(store_url: str) -> None:
    """English stop words (PostgreSQL's ``english`` list) are left out of a query on both
    backends: "the mirror of deploys" ranks as "mirror deploys" does, and a query of stop
    words alone matches nothing."""
    texts = _texts(120)
    with torpor.Runtime(store_url) as r:
        es = EpisodeStore(r.store, embedder=None)
        es.write([_ep(i, "s", texts[i]) for i in range(120)])

        def top(q: str) -> list[tuple[str, float]]:
            return [(h.episode_id, h.score) for h in es.search(q, scope="s")]

        assert top("the mirror of deploys") == top("mirror deploys") != []
        assert top("the of") == [] and top("THE") == []


def test_postgres_writers_of_one_scope_never_deadlock(pg_url: str) -> None:
    """Writers of one scope share its counters' rows: the trigger takes them in (scope, word)
    order, so concurrent batches with overlapping words queue and all commit (a deadlock
    would abort one with an error), and the counters add up."""
    import threading

    texts = _texts(160)
    errors: list[BaseException] = []
    with torpor.Runtime(pg_url) as r:
        es = EpisodeStore(r.store, embedder=None)

        def write(k: int) -> None:
            try:
                for lo in range(k * 40, k * 40 + 40, 8):
                    batch = [_ep(i, "shared", texts[i]) for i in range(lo, lo + 8)]
                    es.write(list(reversed(batch)) if k % 2 else batch)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        kept, again = _counters(r.store)
        assert kept == again and kept[("shared", "")] == 160
