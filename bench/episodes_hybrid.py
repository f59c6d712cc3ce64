"""Episode search by meaning (issue 32): lexical vs hybrid recall@10, the write cost vectors
add, and search latency with vectors in the store.

    uv run --extra embed python bench/episodes_hybrid.py --locomo PATH/locomo10.json
    uv run python bench/episodes_hybrid.py --locomo PATH --backends sqlite --sizes 10000

Needs ``pip install 'torpor[embed]'`` (the offline wordllama model: nothing is downloaded).

**Public data: LoCoMo** (Maharana et al., "Evaluating Very Long-Term Conversational Memory of
LLM Agents", ACL 2024; ``data/locomo10.json`` of github.com/snap-research/locomo, CC BY-NC
4.0, so not shipped here: pass its path with ``--locomo`` or ``TORPOR_BENCH_LOCOMO``). Ten
conversations of ~600 turns each. Each dialog turn is one episode, scoped by its conversation
(``summary`` = ``"<speaker>: <text>"`` plus the caption of a photo shared in the turn, as the
other speaker saw it; ``created_at_ms`` the session's date plus the turn's position), written
through the public :meth:`torpor.episodes.EpisodeStore.write` one session per call. Each
question of categories 1-4 (single-hop, temporal, multi-hop, open-domain; category 5 is
adversarial, its premise false — reported apart) is a query within its conversation's scope;
turn-level recall@10 = the share of the question's evidence turns among the top 10, averaged
over questions. Lexical: ``EpisodeStore(store, embedder=None).search``; hybrid: the same store
with the wordllama embedder (:mod:`torpor.episodes.hybrid`, its constants as shipped). A third
figure, dense alone over the whole conversation (brute force, not a torpor path), shows what
the static model ranks by itself. Nothing here was tuned to this data.

**Own labelled set** (``bench/episodes_labelled.py``): 30 decisions, failures and
instructions an agent may record, each with a question asking for it in other words, mixed
in one scope with 600 English distractor episodes, the answers written at seeded places among
them (``episodes_labelled.labelled_episodes``; until issue 31 the distractors were the
synthetic workload's pseudo-words, written after the answers). Written by this bench's
author, so it can be made to favour either ranking: no target; reported for what it shows
about paraphrase.

**Write cost**: the LoCoMo turns written through the public call into two fresh stores of the
same backend, one without an embedder and one with, each session to both in alternating
order: the ratio of the two summed wall times (the second embeds and writes the vectors after
each call's transaction).

**Latency with vectors**: the synthetic workload of ``bench/episodes_workload.py``, bulk
loaded as ``bench/episodes.py`` does (its loaders), then every episode's vector embedded and
bulk-inserted into ``episode_vectors`` (``executemany`` / ``COPY``); p50/p95 of the same
queries (top 10, scope and task type filters) through lexical and hybrid search, at each size
of ``--sizes`` (default 10k and 100k; 1M builds for long on a shared 2-core machine — say which
sizes were run).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import percentile, pg_schema, save, table  # noqa: E402
from episodes_labelled import LABELLED, labelled_episodes  # noqa: E402
from episodes_workload import Workload  # noqa: E402

from torpor.episodes import Episode, EpisodeStore  # noqa: E402
from torpor.episodes.embed import Embedder, WordLlamaEmbedder  # noqa: E402
from torpor.episodes.hybrid import embed_texts, episode_text  # noqa: E402
from torpor.store import SQLStore, open_store  # noqa: E402
from torpor.store.episode_vectors import unpack  # noqa: E402

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@contextmanager
def fresh_store(backend: str) -> Iterator[tuple[SQLStore, str]]:
    with ExitStack() as stack:
        if backend == "sqlite":
            tmp = stack.enter_context(tempfile.TemporaryDirectory(dir="/var/tmp"))
            url = f"sqlite:///{tmp}/hybrid.db?synchronous=NORMAL"
        else:
            url = stack.enter_context(pg_schema())
        store = open_store(url)
        stack.callback(store.close)
        yield store, url  # type: ignore[misc]


# ------------------------------------------------------------------ LoCoMo


def _when(text: str) -> int:
    """``"1:56 pm on 8 May, 2023"`` as epoch ms (UTC)."""
    return int(datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").timestamp() * 1000)


def locomo_sessions(path: Path) -> tuple[list[list[Episode]], list[dict[str, Any]]]:
    """``(sessions of turn episodes, questions)`` of the LoCoMo file."""
    data = json.loads(path.read_text())
    sessions: list[list[Episode]] = []
    questions: list[dict[str, Any]] = []
    for conv in data:
        scope = str(conv["sample_id"])
        c = conv["conversation"]
        keys = sorted(
            (k for k in c if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1])
        )
        for key in keys:
            start = _when(c[key + "_date_time"])
            eps = []
            for i, turn in enumerate(c[key]):
                text = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares {turn['blip_caption']}]"
                eps.append(
                    Episode(
                        episode_id=f"{scope}:{turn['dia_id']}",
                        run_id=f"{scope}-{key}",
                        boundary=f"turn@{i}",
                        scope=scope,
                        agent="dialog",
                        task_type="dialog",
                        kind="milestone",
                        outcome="succeeded",
                        summary=text,
                        lesson="",
                        at_seq=i,
                        created_at_ms=start + i * 1000,
                    )
                )
            sessions.append(eps)
        for q in conv["qa"]:
            ev = [e for s in q.get("evidence") or [] for e in re.split(r"[;,\s]+", s) if e]
            if ev:
                questions.append(
                    {
                        "scope": scope,
                        "question": q["question"],
                        "category": int(q["category"]),
                        "evidence": {f"{scope}:{e}" for e in ev},
                    }
                )
    return sessions, questions


def write_both(
    plain: EpisodeStore, vec: EpisodeStore, sessions: list[list[Episode]]
) -> tuple[float, float]:
    """Each session written to both stores, in alternating order (the machine's load falls on
    both alike): ``(seconds without vectors, seconds with)``."""
    spent = [0.0, 0.0]
    for n, eps in enumerate(sessions):
        order = [(0, plain), (1, vec)] if n % 2 == 0 else [(1, vec), (0, plain)]
        for i, es in order:
            t0 = time.perf_counter()
            es.write(eps)
            spent[i] += time.perf_counter() - t0
    return spent[0], spent[1]


def recall_at(found: list[str], evidence: set[str], k: int = 10) -> float:
    return len(evidence & set(found[:k])) / len(evidence)


def dense_only(store: SQLStore, emb: Embedder, scope_ids: dict[str, list[str]], q: dict) -> list:
    import numpy as np

    ids = scope_ids[q["scope"]]
    vecs = store.episode_vectors(emb.model_id, ids)
    m = np.stack([np.asarray(unpack(vecs[i])) for i in ids])
    (qv,) = embed_texts(emb, [q["question"]])
    sims = m @ np.asarray(unpack(qv))
    return [ids[j] for j in np.argsort(-sims)[:10]]


def locomo(backend: str, path: Path, emb: Embedder) -> dict[str, Any]:
    sessions, questions = locomo_sessions(path)
    n_turns = sum(len(s) for s in sessions)
    with fresh_store(backend) as (plain, _), fresh_store(backend) as (store, _):
        t_plain, t_vec = write_both(
            EpisodeStore(plain, embedder=None), EpisodeStore(store, embedder=emb), sessions
        )
        assert store.count_episode_vectors(emb.model_id) == n_turns
        lexical = EpisodeStore(store, embedder=None)
        hybrid = EpisodeStore(store, embedder=emb)
        scope_ids: dict[str, list[str]] = {}
        for s in sessions:
            for ep in s:
                scope_ids.setdefault(ep.scope, []).append(ep.episode_id)
        per: dict[str, dict[int, list[float]]] = {"lexical": {}, "hybrid": {}, "dense": {}}
        lat: dict[str, list[float]] = {"lexical": [], "hybrid": []}
        for q in questions:
            for name, es in (("lexical", lexical), ("hybrid", hybrid)):
                t0 = time.perf_counter()
                hits = es.search(q["question"], scope=q["scope"], limit=10)
                lat[name].append((time.perf_counter() - t0) * 1000)
                assert all(h.scope == q["scope"] for h in hits)
                r = recall_at([h.episode_id for h in hits], q["evidence"])
                per[name].setdefault(q["category"], []).append(r)
            r = recall_at(dense_only(store, emb, scope_ids, q), q["evidence"])
            per["dense"].setdefault(q["category"], []).append(r)

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else float("nan")

    out: dict[str, Any] = {
        "backend": backend,
        "turns": n_turns,
        "questions_1_4": sum(len(v) for c, v in per["lexical"].items() if c != 5),
        "write_s_plain": t_plain,
        "write_s_vectors": t_vec,
        "write_ratio": t_vec / t_plain,
        "lexical_p95_ms": percentile(lat["lexical"], 95),
        "hybrid_p95_ms": percentile(lat["hybrid"], 95),
    }
    for name, cats in per.items():
        out[f"{name}_recall10"] = mean([r for c, v in cats.items() if c != 5 for r in v])
        out[f"{name}_recall10_all"] = mean([r for v in cats.values() for r in v])
        out[f"{name}_by_category"] = {CATEGORIES[c]: mean(v) for c, v in sorted(cats.items())}
    print(
        f"LoCoMo {backend}: recall@10 (categories 1-4, {out['questions_1_4']} questions) "
        f"lexical {out['lexical_recall10']:.3f}, hybrid {out['hybrid_recall10']:.3f}, dense "
        f"alone {out['dense_recall10']:.3f}; write with vectors {out['write_ratio']:.2f}x",
        flush=True,
    )
    return out


# ------------------------------------------------------------------ own labelled set


def labelled_set(n_distractors: int = 600) -> list[Episode]:
    """The labelled set as episodes of one scope ``own``: the answer of ``LABELLED[i]`` is
    ``own:<i>``, each distractor ``noise:<n>`` (the English distractors of
    ``episodes_labelled.labelled_episodes``, the answers at seeded places among them)."""
    eps = []
    for n, (text, i) in enumerate(labelled_episodes(n_distractors)):
        eid = f"own:{i}" if i is not None else f"noise:{n}"
        eps.append(
            Episode(
                episode_id=eid,
                run_id=eid.replace(":", "-"),
                boundary="ended@1",
                scope="own",
                agent="agent",
                task_type="ops",
                kind="ended",
                outcome="succeeded",
                summary=text,
                lesson="",
                at_seq=1,
                created_at_ms=1_000_000 + n * 1000,
            )
        )
    return eps


def labelled(backend: str, emb: Embedder, n_distractors: int = 600) -> dict[str, Any]:
    eps = labelled_set(n_distractors)
    out: dict[str, Any] = {"backend": backend, "pairs": len(LABELLED), "distractors": n_distractors}
    with fresh_store(backend) as (store, _):
        EpisodeStore(store, embedder=emb).write(eps)
        for name, es in (
            ("lexical", EpisodeStore(store, embedder=None)),
            ("hybrid", EpisodeStore(store, embedder=emb)),
        ):
            found = [
                f"own:{i}" in [h.episode_id for h in es.search(q, scope="own", limit=10)]
                for i, (_, q) in enumerate(LABELLED)
            ]
            out[f"{name}_recall10"] = sum(found) / len(found)
    print(
        f"own labelled set {backend}: recall@10 lexical {out['lexical_recall10']:.3f}, "
        f"hybrid {out['hybrid_recall10']:.3f}",
        flush=True,
    )
    return out


# ------------------------------------------------------------------ latency with vectors


def load_vectors(store: SQLStore, url: str, emb: Embedder, wl: Workload, lo: int, hi: int) -> None:
    batch = 20_000
    if store.driver.dialect == "sqlite":
        conn = store.driver.conn()  # type: ignore[attr-defined]
        conn.execute("BEGIN IMMEDIATE")
        for a in range(lo, hi, batch):
            rows = list(wl.episodes(a, min(hi, a + batch)))
            vecs = embed_texts(emb, [episode_text(r.summary, r.lesson) for r in rows])
            conn.executemany(
                "INSERT INTO episode_vectors VALUES (?, ?, ?, ?, 0)",
                [
                    (f"b{r.n}:ended@1", emb.model_id, len(v) // 4, v)
                    for r, v in zip(rows, vecs, strict=True)
                ],
            )
        conn.execute("COMMIT")
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for a in range(lo, hi, batch):
            rows = list(wl.episodes(a, min(hi, a + batch)))
            vecs = embed_texts(emb, [episode_text(r.summary, r.lesson) for r in rows])
            copy = "COPY episode_vectors (episode_id, model, dim, vec, created_at_ms) FROM STDIN"
            with conn.cursor().copy(copy) as cp:
                for r, v in zip(rows, vecs, strict=True):
                    cp.write_row((f"b{r.n}:ended@1", emb.model_id, len(v) // 4, list(unpack(v)), 0))
        conn.execute("VACUUM (ANALYZE) episode_vectors")


def latency(backend: str, sizes: list[int], emb: Embedder, n_queries: int) -> list[dict]:
    import episodes as plain_bench  # bench/episodes.py: its bulk loaders

    wl = Workload()
    out = []
    with fresh_store(backend) as (store, url):
        loaded = 0
        for size in sizes:
            t0 = time.perf_counter()
            if backend == "sqlite":
                plain_bench.load_sqlite(store, wl, loaded, size)
            else:
                plain_bench.load_postgres(url, wl, loaded, size)
            load_vectors(store, url, emb, wl, loaded, size)
            build_s = time.perf_counter() - t0
            loaded = size
            queries = wl.queries(n_queries + 20)
            row: dict[str, Any] = {"backend": backend, "episodes": size, "build_s": build_s}
            for name, es in (
                ("lexical", EpisodeStore(store, embedder=None)),
                ("hybrid", EpisodeStore(store, embedder=emb)),
            ):
                for text, scope, tt in queries[:20]:
                    es.search(text, scope=scope, task_type=tt, limit=10)
                lat = []
                for text, scope, tt in queries[20:]:
                    t0 = time.perf_counter()
                    hits = es.search(text, scope=scope, task_type=tt, limit=10)
                    lat.append((time.perf_counter() - t0) * 1000)
                    assert all(h.scope == scope and h.task_type == tt for h in hits)
                row[f"{name}_p50_ms"] = percentile(lat, 50)
                row[f"{name}_p95_ms"] = percentile(lat, 95)
            row["hybrid_over_lexical_p95"] = row["hybrid_p95_ms"] / row["lexical_p95_ms"]
            print(
                f"{backend:9} {size:>9,}: lexical p95 {row['lexical_p95_ms']:.1f} ms, hybrid "
                f"p95 {row['hybrid_p95_ms']:.1f} ms; build {build_s:.0f} s",
                flush=True,
            )
            out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--locomo", default=os.environ.get("TORPOR_BENCH_LOCOMO", ""))
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--out", default="episodes_hybrid", help="results: bench/results/OUT.json")
    args = ap.parse_args(argv)
    backends = args.backends.split(",")
    emb = WordLlamaEmbedder()
    emb.embed(["warm up"])
    results: dict[str, Any] = {"embedder": emb.model_id, "locomo": [], "own": [], "latency": []}
    if args.locomo:
        for b in backends:
            results["locomo"].append(locomo(b, Path(args.locomo), emb))
    else:
        print("no --locomo PATH (or TORPOR_BENCH_LOCOMO): the public data set is skipped")
    for b in backends:
        results["own"].append(labelled(b, emb))
    if not args.skip_latency:
        sizes = [int(s) for s in args.sizes.split(",")]
        for b in backends:
            results["latency"] += latency(b, sizes, emb, args.queries)
    report = io.StringIO()
    if results["locomo"]:
        report.write(
            table(
                [
                    "backend",
                    "lexical R@10",
                    "hybrid R@10",
                    "dense alone R@10",
                    "hybrid R@10 (cat 1-5)",
                    "write x",
                    "lexical p95 ms",
                    "hybrid p95 ms",
                ],
                [
                    [
                        r["backend"],
                        f"{r['lexical_recall10']:.3f}",
                        f"{r['hybrid_recall10']:.3f}",
                        f"{r['dense_recall10']:.3f}",
                        f"{r['hybrid_recall10_all']:.3f}",
                        f"{r['write_ratio']:.2f}x",
                        r["lexical_p95_ms"],
                        r["hybrid_p95_ms"],
                    ]
                    for r in results["locomo"]
                ],
            )
            + "\n\n"
        )
    if results["latency"]:
        report.write(
            table(
                [
                    "backend",
                    "episodes",
                    "lexical p50",
                    "lexical p95",
                    "hybrid p50",
                    "hybrid p95",
                    "hybrid / lexical p95",
                ],
                [
                    [
                        r["backend"],
                        f"{r['episodes']:,}",
                        r["lexical_p50_ms"],
                        r["lexical_p95_ms"],
                        r["hybrid_p50_ms"],
                        r["hybrid_p95_ms"],
                        f"{r['hybrid_over_lexical_p95']:.1f}x",
                    ]
                    for r in results["latency"]
                ],
            )
        )
    print(report.getvalue())
    path = save(args.out, results)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
