"""Episodes found by meaning (issue 32), on both backends: vectors in their own table, hybrid
search as a layer over the full-text search (bounded candidates, reciprocal rank fusion, the
caller's scope only), a missing vector never costing recall, an embedder that fails falling
back to full text, the episodes section using it, and the offline wordllama default.

Most tests use :class:`ConceptEmbedder`, a real (if tiny) :class:`~torpor.episodes.embed.Embedder`:
words map to concepts through a fixed synonym table, a text is its bag of concepts. It knows
"replica" means "mirror", which no full-text index does — the point of the feature — and it is
deterministic and instant. The wordllama model itself is tested loading with the network
disabled and ranking a paraphrase.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from torpor.episodes import Episode, EpisodeStore, episodes_section
from torpor.episodes.embed import embedder_from_env
from torpor.episodes.hybrid import backfill, hybrid_search, rrf
from torpor.episodes.search import Filters
from torpor.errors import ConfigError, ModelUnavailableError
from torpor.store import open_store
from torpor.store.base import Store
from torpor.store.episode_vectors import pack, unpack

#: word -> concept (words not listed are their own concept).
SYNONYMS = {
    "replica": "mirror",
    "mirroring": "mirror",
    "approach": "strategy",
    "method": "strategy",
    "pick": "choose",
    "picked": "choose",
    "chose": "choose",
    "decision": "choose",
    "rollout": "release",
    "ship": "release",
}
DIM = 64


class ConceptEmbedder:
    """Bag of concepts, hashed into ``DIM`` buckets (see the module docstring)."""

    model_id = "test/concepts-64"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
        self.calls.append(list(texts))
        out = []
        for text in texts:
            v = [0.0] * DIM
            for w in re.findall(r"[a-z]+", text.lower()):
                c = SYNONYMS.get(w, w)
                v[int(hashlib.sha256(c.encode()).hexdigest(), 16) % DIM] += 1.0
            out.append(v)
        return out


class BrokenEmbedder:
    model_id = "test/broken"

    def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
        raise ModelUnavailableError(self.model_id, "cannot reach http://127.0.0.1:9/v1")


def ep(n: int, scope: str, text: str, *, task_type: str = "deploy", at_ms: int = 0) -> Episode:
    return Episode(
        episode_id=f"h{n}:ended@{n}",
        run_id=f"h{n}",
        boundary=f"ended@{n}",
        scope=scope,
        agent="ag",
        task_type=task_type,
        kind="ended",
        outcome="succeeded",
        summary=text,
        lesson="",
        at_seq=n,
        created_at_ms=at_ms or 1_000_000 + n,
    )


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    yield s
    s.close()


THE_DECISION = "Decision: use the brisk mirror strategy for the release"
QUERY = "which replica approach did we pick"
NOISE = [
    "deploy failed: connection refused on port 5432",
    "the invoice service times out on large batches",
    "rotated the signing key after the laptop was lost",
    "customer asked for reports in csv",
    "tests are flaky because the clock drifts under load",
]


def seed(store: Store, embedder: Any, *, scope: str = "acme", noise: int = 40) -> None:
    eps = [ep(0, scope, THE_DECISION)]
    eps += [ep(i + 1, scope, f"{NOISE[i % len(NOISE)]} #{i}") for i in range(noise)]
    EpisodeStore(store, embedder=embedder).write(eps)


# ------------------------------------------------------------------ the vectors' table


def test_vectors_are_kept_per_episode_and_model_and_written_once(store: Store) -> None:
    a, b = pack([1.0, 0.0, 0.5]), pack([0.0, 1.0, 0.25])
    assert store.write_episode_vectors("m1", [("e1", a), ("e2", b)], now_ms=1) == 2
    # Written again (a capture repeated after a crash) with other values: the first stays.
    store.write_episode_vectors("m1", [("e1", b)], now_ms=2)
    store.write_episode_vectors("m2", [("e1", b)], now_ms=2)
    assert store.episode_vectors("m1", ["e1", "e2", "nope"]) == {"e1": a, "e2": b}
    assert store.episode_vectors("m2", ["e1", "e2"]) == {"e1": b}
    assert store.episode_vectors("m1", []) == {}
    assert list(unpack(a)) == [1.0, 0.0, 0.5]
    assert store.count_episode_vectors("m1") == 2
    # No episode holds these ids: the sweep drops every one.
    assert store.drop_orphan_episode_vectors() == 3
    assert store.count_episode_vectors("m1") == 0


def test_vectors_are_written_with_episodes_and_go_when_they_are_pruned(store: Store) -> None:
    emb = ConceptEmbedder()
    es = EpisodeStore(store, embedder=emb)
    es.write([ep(1, "acme", "old lesson", at_ms=1_000), ep(2, "acme", "new lesson", at_ms=5_000)])
    assert store.count_episode_vectors(emb.model_id) == 2
    es.write([ep(1, "acme", "old lesson", at_ms=1_000)])  # already there: not embedded again
    assert len(emb.calls) == 1
    assert store.episodes_without_vectors(emb.model_id, 10) == []
    assert es.prune(before_ms=2_000) == 1
    assert set(store.episode_vectors(emb.model_id, ["h1:ended@1", "h2:ended@2"])) == {"h2:ended@2"}


# ------------------------------------------------------------------ hybrid search


def test_meaning_finds_what_full_text_misses_and_never_another_scope(store: Store) -> None:
    emb = ConceptEmbedder()
    seed(store, emb)
    seed(store, emb, scope="other-team", noise=3)
    lexical = EpisodeStore(store, embedder=None).search(QUERY, scope="acme", limit=3)
    assert THE_DECISION not in [h.summary for h in lexical]  # no word in common
    hits = EpisodeStore(store, embedder=emb).search(QUERY, scope="acme", limit=3)
    assert hits[0].summary == THE_DECISION
    assert hits[0].episode_id == "h0:ended@0" and hits[0].score > hits[-1].score
    assert {h.scope for h in hits} == {"acme"}
    # The filters are the full-text search's: another task type has nothing.
    assert EpisodeStore(store, embedder=emb).search(QUERY, scope="acme", task_type="x") == []


def test_a_query_reads_a_bounded_candidate_set(store: Store) -> None:
    emb = ConceptEmbedder()
    EpisodeStore(store, embedder=emb).write(
        [ep(i, "acme", f"deploy step {i} of the mirror release") for i in range(150)]
    )
    asked: list[int] = []
    real = store.episode_vectors

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def episode_vectors(self, model: str, ids: Sequence[str]) -> dict[str, bytes]:
            asked.append(len(ids))
            return real(model, ids)

    f = Filters(scope="acme")
    hits = hybrid_search(Counting(), emb, f, "mirror release", 10, lexical_n=20, recent_n=15)  # type: ignore[arg-type]
    assert len(hits) == 10
    assert asked and max(asked) <= 35  # never the filter's 150


def test_a_missing_vector_is_embedded_when_searched_then_backfilled(store: Store) -> None:
    seed(store, None)  # written before any embedder was configured
    emb = ConceptEmbedder()
    assert store.count_episode_vectors(emb.model_id) == 0
    hits = EpisodeStore(store, embedder=emb).search(QUERY, scope="acme", limit=3)
    assert hits[0].summary == THE_DECISION
    assert store.count_episode_vectors(emb.model_id) == 0  # a search writes nothing
    assert backfill(store, emb, batch=16) == 41
    assert store.count_episode_vectors(emb.model_id) == 41
    assert backfill(store, emb) == 0


def test_an_embedder_that_fails_loses_nothing_and_search_falls_back(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    broken = BrokenEmbedder()
    es = EpisodeStore(store, embedder=broken)
    seed(store, broken, noise=5)
    assert EpisodeStore(store, embedder=None).count() == 6  # every episode written
    assert store.count_episode_vectors(broken.model_id) == 0
    hits = es.search("deploy connection refused", scope="acme", limit=3)
    assert hits and "connection refused" in hits[0].summary  # the full-text ranking
    assert "full-text only" in caplog.text and "127.0.0.1:9" in caplog.text


def test_reciprocal_rank_fusion() -> None:
    fused = rrf([["a", "b"], ["b", "c"]], k=60)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["a"] == pytest.approx(1 / 61) and fused["c"] == pytest.approx(1 / 62)
    assert sorted(fused, key=lambda x: -fused[x]) == ["b", "a", "c"]


def test_the_episodes_section_finds_lessons_by_meaning(store: Store) -> None:
    emb = ConceptEmbedder()
    seed(store, emb)
    common = {"scope": "acme", "agent": "ag", "task_type": "deploy", "goal": QUERY}
    with_meaning = episodes_section(store, token_budget=200, embedder=emb, **common)
    assert THE_DECISION in with_meaning.splitlines()[1]
    lexical = episodes_section(store, token_budget=200, embedder=None, **common)
    assert THE_DECISION not in lexical


def test_the_embedder_is_named_by_the_environment() -> None:
    assert embedder_from_env({}) is None
    assert embedder_from_env({"TORPOR_EMBEDDER": "none"}) is None
    e = embedder_from_env({"TORPOR_EMBEDDER": "wordllama"})
    assert e is not None and e.model_id == "wordllama/l2_supercat_256"
    h = embedder_from_env(
        {"TORPOR_EMBEDDER": "openai", "TORPOR_EMBEDDER_URL": "http://127.0.0.1:1/v1"}
    )
    assert h is not None and h.model_id == "openai-compatible/text-embedding-3-small"
    with pytest.raises(ConfigError, match=r"TORPOR_EMBEDDER='bert'.*wordllama, openai or none"):
        embedder_from_env({"TORPOR_EMBEDDER": "bert"})


def test_a_misnamed_embedder_is_said_and_episodes_are_still_written(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TORPOR_EMBEDDER", "bert")
    es = EpisodeStore(store)
    with pytest.raises(ConfigError, match="bert"):
        es.embedder  # noqa: B018
    es.write([ep(0, "acme", THE_DECISION), ep(1, "acme", NOISE[0])])
    assert EpisodeStore(store, embedder=None).count() == 2
    assert [h.summary for h in es.search("brisk mirror", scope="acme", limit=1)] == [THE_DECISION]
    assert "TORPOR_EMBEDDER='bert'" in caplog.text


# ------------------------------------------------------------------ the wordllama default


def test_wordllama_ranks_a_paraphrase_and_hybrid_uses_it(store: Store) -> None:
    from torpor.episodes.embed import WordLlamaEmbedder

    emb = WordLlamaEmbedder()
    seed(store, emb)
    query = "what did we decide about mirroring"
    v = emb.embed([query, THE_DECISION, NOISE[1]])
    assert len(v[0]) == 256
    assert math.isclose(sum(x * x for x in v[0]), 1.0, rel_tol=1e-4)
    sim = [sum(a * b for a, b in zip(v[0], w, strict=True)) for w in v[1:]]
    assert sim[0] > sim[1] + 0.2
    hits = EpisodeStore(store, embedder=emb).search(query, scope="acme", limit=3)
    assert hits[0].summary == THE_DECISION


OFFLINE = r"""
import json, os, socket, sys
def refuse(*a, **k):
    raise OSError("network disabled by the test")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
from torpor.episodes.embed import WordLlamaEmbedder
e = WordLlamaEmbedder()
q, a, b = e.embed(["which mirror approach did we pick",
                   "use the brisk mirror strategy for the release",
                   "deploy failed: connection refused on port 5432"])
dot = lambda x, y: float(sum(float(i) * float(j) for i, j in zip(x, y)))
print(json.dumps({"near": dot(q, a), "far": dot(q, b),
                  "modules": sorted(m for m in sys.modules if m.startswith("requests"))}))
"""


@pytest.mark.proc
def test_wordllama_loads_offline_from_the_installed_package(tmp_path: Any) -> None:
    """A fresh interpreter whose sockets all fail, with an empty home (no cache of wordllama's
    to fall back on) loads the model from the installed wheel and ranks a paraphrase."""
    from conftest import run_python

    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "HF_HUB_OFFLINE": "0"}
    out = run_python(OFFLINE, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["near"] > 0.4 and got["far"] < 0.2, got
    assert list(home.iterdir()) == []  # nothing cached, nothing downloaded


# ------------------------------------------------------------------ killed between the two


@pytest.mark.proc
def test_killed_between_episodes_and_their_vectors_loses_nothing(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's run in a forked process with ``TORPOR_EMBEDDER=wordllama``, SIGKILLed at
    ``episodes.vectors`` (its episodes committed, their vectors not yet written): the
    episodes are there once, search by meaning finds them all the same (embedding the
    candidates that have no vector), a backfill writes the vectors, and a later capture
    writes nothing twice."""
    import os
    import signal

    import episodes_kit as kit
    import torpor
    from torpor import faults
    from torpor.episodes.embed import WordLlamaEmbedder

    monkeypatch.setenv("TORPOR_EMBEDDER", "wordllama")
    kit.WORLD.update(a_works=False, log=[])
    pid = os.fork()
    if pid == 0:  # the child: its own store connections, its own fault plan
        code = 3
        try:
            faults.install("crash:episodes.vectors@1")
            rt = torpor.Runtime(store_url)
            rt.run(kit.code_agent(), {"target": "prod"}, run_id="kv", scope="acme")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL

    emb = WordLlamaEmbedder()
    kit.code_agent()
    rt = torpor.Runtime(store_url)
    try:
        es = EpisodeStore(rt.store)
        assert es.embedder is not None and es.embedder.model_id == emb.model_id
        mine = [h for h in es.search("", scope="acme", limit=50) if h.run_id == "kv"]
        assert mine  # committed before the kill
        assert rt.store.episode_vectors(emb.model_id, [h.episode_id for h in mine]) == {}
        found = es.search(mine[0].summary, scope="acme", limit=5)
        assert mine[0].episode_id in [h.episode_id for h in found]
        assert rt.resume("kv").outcome == "succeeded"
        es.catch_up()
        assert backfill(rt.store, emb) >= len(mine)
        again = [h for h in es.search("", scope="acme", limit=50) if h.run_id == "kv"]
        ids = [h.episode_id for h in again]
        assert len(ids) == len(set(ids))
        assert set(rt.store.episode_vectors(emb.model_id, ids)) == set(ids)
    finally:
        rt.close()


def test_memory_sync_embeds_what_has_no_vector(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from torpor.cli import app
    from torpor.episodes.embed import WordLlamaEmbedder

    s = open_store(db_url)
    try:
        seed(s, None, noise=4)
    finally:
        s.close()
    monkeypatch.setenv("TORPOR_EMBEDDER", "wordllama")
    out = CliRunner().invoke(app, ["--db", db_url, "memory", "sync"])
    assert out.exit_code == 0, out.output
    assert "embedded 5 episode(s) (wordllama/l2_supercat_256)" in out.output
    again = CliRunner().invoke(app, ["--db", db_url, "memory", "sync"])
    assert "embedded 0 episode(s)" in again.output
    s = open_store(db_url)
    try:
        assert s.count_episode_vectors(WordLlamaEmbedder.model_id) == 5
    finally:
        s.close()


def test_an_embedder_giving_unequal_vectors_is_refused_by_name() -> None:
    from torpor.episodes.hybrid import embed_texts
    from torpor.errors import ModelRequestError

    class Ragged:
        model_id = "test/ragged"

        def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
            return [[1.0] * (i + 1) for i in range(len(texts))]

    with pytest.raises(ModelRequestError, match=r"test/ragged.*2 text\(s\) gave 2 vector\(s\)"):
        embed_texts(Ragged(), ["a", "b"])


def test_vector_queries_differ_between_dialects_only_in_the_write_and_pgvector() -> None:
    from torpor.store.episode_vectors import load_vector_queries

    sqlite, pg = set(load_vector_queries("sqlite")), set(load_vector_queries("postgres"))
    assert sqlite - pg == {"put_vector"}
    assert pg - sqlite == {"put_vectors", "vector_index", "nearest_vectors"}


# ------------------------------------------------------------------ pgvector (where installed)


def test_pgvector_gives_the_dense_candidates_where_the_server_has_it(store: Store) -> None:
    """On a PostgreSQL server with the ``vector`` extension, migration 0024 made the HNSW
    index and a hybrid search takes the filter's nearest from it — finding an old episode the
    most recent candidates would not hold. Debian bookworm ships no pgvector: where
    ``pg_available_extensions`` has no ``vector`` this is skipped, and the ``real[]`` path (the
    other tests) is what runs."""
    if store.driver.dialect != "postgres":
        pytest.skip("pgvector is a PostgreSQL path; SQLite reranks bounded candidates")
    with store.driver.read() as cur:
        avail = store.driver.fetchall(
            cur, "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'", {}
        )
    if not avail:
        pytest.skip(
            "the PostgreSQL server has no pgvector (no 'vector' in pg_available_extensions); "
            "episode vectors use the real[] path"
        )
    if not store.create_vector_index():  # type: ignore[attr-defined]
        pytest.skip("pgvector is available but this role may not create the extension")

    class Wide:  # 256 values: the length the index covers
        model_id = "test/concepts-256"

        def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
            return [list(v) * 4 for v in ConceptEmbedder().embed(texts)]

    emb = Wide()
    seed(store, emb, noise=60)
    near = store.nearest_episodes(
        emb.model_id, Filters(scope="acme").for_index(), emb_bytes(emb, QUERY), 5
    )
    assert near is not None and near[0][0][8] == THE_DECISION
    hits = hybrid_search(store, emb, Filters(scope="acme"), QUERY, 3, recent_n=5)
    assert hits[0][0][8] == THE_DECISION  # not among the 5 most recent: the index found it


def emb_bytes(emb: Any, text: str) -> bytes:
    from torpor.episodes.hybrid import embed_texts

    (v,) = embed_texts(emb, [text])
    return v


def test_without_a_vector_index_the_store_says_so(store: Store) -> None:
    q = pack([0.0] * 256)
    assert store.nearest_episodes("m", Filters(scope="acme").for_index(), q, 10) is None
    assert store.nearest_episodes("m", Filters(scope="acme").for_index(), pack([1.0]), 10) is None
