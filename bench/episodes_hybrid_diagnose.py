"""Why hybrid episode search does (not) beat lexical (issue 32): where each question's evidence
turns sit in the lexical ranking, in the candidate set the dense ranking reranks, and in the
dense ranking over the whole conversation; and recall@10 of fusion variants on the same data.

    uv run --extra embed python bench/episodes_hybrid_diagnose.py --locomo PATH/locomo10.json

Loads LoCoMo (as ``bench/episodes_hybrid.py`` does) and the own labelled set into SQLite
stores once, then for each question of categories 1-4 computes the rankings in memory
(the lexical one through torpor's :class:`~torpor.episodes.search.Searcher`, the dense one
with the embedder's stored vectors) and reports, per variant, recall@10. A diagnosis tool:
its variants are what was looked at, not what ships (that is :mod:`torpor.episodes.hybrid`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from episodes_hybrid import fresh_store, labelled_set, locomo_sessions  # noqa: E402
from episodes_labelled import LABELLED  # noqa: E402

from torpor.episodes import EpisodeStore  # noqa: E402
from torpor.episodes.embed import Embedder, WordLlamaEmbedder  # noqa: E402
from torpor.episodes.hybrid import embed_texts, rrf  # noqa: E402
from torpor.episodes.model import terms  # noqa: E402
from torpor.episodes.search import Filters, Searcher  # noqa: E402


def _vecs(emb: Embedder, texts: list[str]) -> np.ndarray:
    out = embed_texts(emb, texts)
    return np.stack([np.frombuffer(v, dtype="<f4") for v in out])


def diagnose(
    name: str, store: Any, emb: Embedder, questions: list[dict[str, Any]], all_ids: dict
) -> dict[str, float]:
    """``questions``: ``{"scope", "question", "evidence": set of ids}``."""
    es = EpisodeStore(store, embedder=None)
    texts: dict[str, str] = {}
    created: dict[str, int] = {}
    for scope in all_ids:
        for ep in es.iter_scope(scope):
            texts[ep.episode_id] = ep.summary if not ep.lesson else f"{ep.summary}\n{ep.lesson}"
            created[ep.episode_id] = ep.created_at_ms
    vec = {
        i: np.frombuffer(v, dtype="<f4")
        for scope, ids in all_ids.items()
        for i, v in store.episode_vectors(emb.model_id, ids).items()
    }
    qv = _vecs(emb, [q["question"] for q in questions])
    acc: dict[str, list[float]] = {}

    def add(key: str, ranking: list[str], ev: set[str]) -> None:
        acc.setdefault(key, []).append(len(ev & set(ranking[:10])) / len(ev))

    def cover(key: str, cands: set[str], ev: set[str]) -> None:
        acc.setdefault(key, []).append(len(ev & cands) / len(ev))

    with store.episode_index() as index:
        searcher = Searcher(index)
        for q, qvec in zip(questions, qv, strict=True):
            ev = q["evidence"]
            f = Filters(scope=q["scope"])
            lex = [str(r[0]) for r, _ in searcher.search(f, terms(q["question"]), 200)]
            recent_all = [str(r[0]) for r, _ in searcher.search(f, [], 1000)]
            recent = recent_all[:100]
            ids = all_ids[q["scope"]]
            m = np.stack([vec[i] for i in ids])
            sims = m @ qvec
            dense_all = [ids[j] for j in np.argsort(-sims, kind="stable")]
            rank_of = {i: r for r, i in enumerate(dense_all)}
            cands = list(dict.fromkeys([*lex, *recent]))
            dense_c = sorted(cands, key=lambda i: (rank_of[i], -created[i]))
            add("lexical", lex, ev)
            add("dense alone (whole scope)", dense_all, ev)
            cover("evidence among lexical top 200", set(lex), ev)
            cover("evidence among candidates (lexical 200 + recent 100)", set(cands), ev)
            cover("evidence among dense top 200 (whole scope)", set(dense_all[:200]), ev)
            cover(
                "evidence among lexical 200 + dense 200",
                set(lex) | set(dense_all[:200]),
                ev,
            )
            for k in (60, 10):
                fused = rrf([lex, dense_c], k)
                best = sorted(cands, key=lambda i: (-fused[i], -created[i]))
                add(f"shipped: rrf k={k}, candidates lexical+recent", best, ev)
                dense_top = dense_all[:200]
                pool = list(dict.fromkeys([*lex, *dense_top]))
                fused = rrf([lex, dense_top], k)
                best = sorted(pool, key=lambda i: (-fused[i], -created[i]))
                add(f"rrf k={k}, candidates lexical 200 + dense 200", best, ev)
            for n_recent in (300, 1000):
                pool = list(dict.fromkeys([*lex, *recent_all[:n_recent]]))
                dense_p = sorted(pool, key=lambda i: (rank_of[i], -created[i]))
                for k in (60, 10):
                    fused = rrf([lex, dense_p], k)
                    best = sorted(pool, key=lambda i: (-fused[i], -created[i]))
                    add(f"rrf k={k}, candidates lexical 200 + recent {n_recent}", best, ev)
            # lexical order kept, dense fills only what lexical does not rank
            fill = lex + [i for i in dense_all if i not in set(lex)]
            add("lexical, then dense for the rest", fill, ev)
    return {k: sum(v) / len(v) for k, v in acc.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--locomo", required=True)
    ap.add_argument("--max-questions", type=int, default=0)
    args = ap.parse_args(argv)
    emb = WordLlamaEmbedder()
    sessions, questions = locomo_sessions(Path(args.locomo))
    qs = [q for q in questions if q["category"] != 5]
    if args.max_questions:
        qs = qs[: args.max_questions]
    with fresh_store("sqlite") as (store, _):
        es = EpisodeStore(store, embedder=emb)
        ids: dict[str, list[str]] = {}
        for s in sessions:
            es.write(s)
            for ep in s:
                ids.setdefault(ep.scope, []).append(ep.episode_id)
        res = diagnose("locomo", store, emb, qs, ids)
    with fresh_store("sqlite") as (store, _):
        eps = labelled_set()
        EpisodeStore(store, embedder=emb).write(eps)
        own_q = [
            {"scope": "own", "question": q, "evidence": {f"own:{i}"}}
            for i, (_, q) in enumerate(LABELLED)
        ]
        own = diagnose("own", store, emb, own_q, {"own": [e.episode_id for e in eps]})
    print(f"| measure | LoCoMo ({len(qs)} questions) | own labelled set (30) |")
    print("|---|---|---|")
    for k in res:
        print(f"| {k} | {res[k]:.3f} | {own.get(k, float('nan')):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
