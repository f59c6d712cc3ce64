"""Hybrid episode search: full-text candidates and the filter's recent episodes reranked by
meaning, fused by reciprocal rank.

A layer over the lexical search of :mod:`.search` (which it never changes):

1. **Candidates** — the lexical top ``LEXICAL_N`` (200) for the query within the caller's
   filter, plus the dense candidates: on PostgreSQL with pgvector's index (migration 0024),
   the filter's ``DENSE_N`` (1,000) nearest by that index; otherwise the ``DENSE_N`` most
   recent episodes of the filter (what a query in other words than the episodes' can still
   reach — in a filter of at most ``DENSE_N`` episodes, every one of them). At most
   ``LEXICAL_N + DENSE_N`` episodes, whatever the store or the filter holds: a query never
   reads a large filter's vectors.
2. **Dense ranking** — the query and each candidate's text (summary, lesson) embedded by the
   configured :class:`~.embed.Embedder`; candidates ranked by cosine similarity. A candidate's
   vector is read by id from ``episode_vectors`` (written with the episode, see
   :func:`embed_episodes`); a lexical candidate or one of the ``EMBED_N`` most recent without
   a stored vector (written before an embedder was configured, or whose vector write was cut
   short) is embedded now, so a missing vector never costs the full-text ranking's recall;
   :func:`backfill` stores those.
3. **Fusion** — reciprocal rank fusion (Cormack, Clarke and Büttcher, "Reciprocal Rank Fusion
   outperforms Condorcet and individual Rank Learning Methods", SIGIR 2009): each candidate
   scores ``sum over rankings of 1 / (RRF_K + rank)`` (rank from 1), the lexical ranking
   counted for those it holds and the dense ranking for all; best first, ties the most
   recently written. ``RRF_K = 10``, not the paper's 60: the paper fused many strong rankings
   of 1,000 documents, where a large constant rewards agreement deep in the lists; here one
   ranking is often far stronger than the other (the full-text one on dialog, the dense one
   on paraphrase) and a large constant lets an episode ranked ~30th by both beat the other's
   first. Measured in ``bench/episodes_hybrid_diagnose.py`` (two values tried, 60 and 10, on
   LoCoMo and the own labelled set; 10 was better on both; see bench/README.md).

RRF needs no calibration between BM25 scores and cosine similarities (they are on unrelated
scales), which is why it is the usual fusion in hybrid search (Elasticsearch's and OpenSearch's
``rrf``). Scope, agent, task type, outcome, supersession and
time filters are the lexical search's, so an episode of another scope is never a candidate.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from ..errors import ModelRequestError
from ..store.base import Store
from ..store.episode_vectors import pack, unpack
from .embed import Embedder, normalized
from .model import terms
from .search import Filters, Searcher

#: Lexical candidates reranked (the top of the full-text ranking within the filter).
LEXICAL_N = 200
#: Dense candidates: the filter's nearest by pgvector's index, else its most recent.
DENSE_N = 1000
#: The name this constant had when the dense candidates were the 100 most recent only.
RECENT_N = DENSE_N
#: Of the most recent candidates, how many are embedded at query time when they have no
#: stored vector (the others without one are left to the full-text ranking).
EMBED_N = 100
#: The reciprocal rank fusion constant (see the module docstring).
RRF_K = 10

log = logging.getLogger("torpor.episodes")

Hit = tuple[tuple[Any, ...], float]


def episode_text(summary: str, lesson: str) -> str:
    """The text of an episode that is embedded: its summary, then its lesson."""
    return summary if not lesson else f"{summary}\n{lesson}"


def embed_texts(embedder: Embedder, texts: Sequence[str]) -> list[bytes]:
    """``texts`` embedded and normalized, as the store's float32 bytes. ModelRequestError
    when the embedder returns another number of vectors, or vectors of unequal lengths."""
    vectors = embedder.embed(list(texts))
    if len(vectors) != len(texts) or len({len(v) for v in vectors}) > 1:
        raise ModelRequestError(
            embedder.model_id,
            f"{len(texts)} text(s) gave {len(vectors)} vector(s) of lengths "
            f"{sorted({len(v) for v in vectors})}",
        )
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - the HTTP embedder without numpy
        return [pack(normalized(v)) for v in vectors]
    if not vectors:
        return []
    m = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return [row.tobytes() for row in (m / norms).astype("<f4")]


def embed_episodes(
    store: Store,
    embedder: Embedder,
    episodes: Sequence[tuple[str, str, str]],
    *,
    now_ms: int | None = None,
) -> int:
    """Embed ``(episode_id, summary, lesson)`` triples and store their vectors (one
    transaction; an episode already embedded by this model is left as it is). Returns how many
    were written. Errors: the embedder's."""
    if not episodes:
        return 0
    vecs = embed_texts(embedder, [episode_text(s, le) for _, s, le in episodes])
    at = int(time.time() * 1000) if now_ms is None else now_ms
    pairs = [(e, v) for (e, _, _), v in zip(episodes, vecs, strict=True)]
    return store.write_episode_vectors(embedder.model_id, pairs, now_ms=at)


def backfill(store: Store, embedder: Embedder, *, limit: int = 1000, batch: int = 256) -> int:
    """Embed up to ``limit`` episodes (newest first) that have no vector of ``embedder``'s
    model, ``batch`` per transaction; returns how many were embedded."""
    done = 0
    while done < limit:
        todo = store.episodes_without_vectors(embedder.model_id, min(batch, limit - done))
        if not todo:
            break
        done += embed_episodes(store, embedder, todo)
        if len(todo) < batch:
            break
    return done


def _cosines(query: bytes, vectors: list[bytes]) -> list[float]:
    """Dot products of unit vectors (numpy when it is installed, as wordllama brings it)."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - the HTTP embedder without numpy
        q = unpack(query)
        return [sum(a * b for a, b in zip(q, unpack(v), strict=False)) for v in vectors]
    q_arr = np.frombuffer(query, dtype="<f4")
    m = np.frombuffer(b"".join(vectors), dtype="<f4").reshape(len(vectors), -1)
    return [float(x) for x in m @ q_arr]


def rrf(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> dict[str, float]:
    """Reciprocal rank fusion of ``rankings`` (ids best first): ``{id: sum 1 / (k + rank)}``,
    rank from 1."""
    out: dict[str, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            out[key] = out.get(key, 0.0) + 1.0 / (k + rank)
    return out


def hybrid_search(
    store: Store,
    embedder: Embedder,
    filters: Filters,
    query: str,
    limit: int,
    *,
    lexical_n: int = LEXICAL_N,
    recent_n: int = DENSE_N,
    k: int = RRF_K,
) -> list[Hit]:
    """The ``limit`` best ``(episode columns, fused score)`` for ``query`` within ``filters``
    (see the module docstring; ``recent_n``: how many dense candidates). Errors: the
    embedder's (the caller decides whether to fall back to the lexical search)."""
    words = terms(query)
    (q,) = embed_texts(embedder, [query])
    near = store.nearest_episodes(embedder.model_id, filters.for_index(), q, recent_n)
    with store.episode_index() as index:
        searcher = Searcher(index)
        lexical = searcher.search(filters, words, max(lexical_n, limit)) if words else []
        recent = []
        if near is None and recent_n > 0:  # no vector index: the filter's most recent
            recent = searcher.search(filters, [], recent_n)
    rows: dict[str, tuple[Any, ...]] = {}
    for row, _ in (*lexical, *recent):
        rows.setdefault(str(row[0]), row)
    stored: dict[str, bytes] = {}
    for row, vec in near or []:
        rows.setdefault(str(row[0]), row)
        stored[str(row[0])] = vec
    if not rows:
        return []
    ids = list(rows)
    stored.update(store.episode_vectors(embedder.model_id, [i for i in ids if i not in stored]))
    may_embed = {str(r[0]) for r, _ in (*lexical, *recent[:EMBED_N])}
    missing = [i for i in ids if i not in stored and i in may_embed]
    if missing:
        texts = [episode_text(rows[i][8], rows[i][9]) for i in missing]
        stored.update(zip(missing, embed_texts(embedder, texts), strict=True))
    scored = [i for i in ids if i in stored]
    sims = dict(zip(scored, _cosines(q, [stored[i] for i in scored]), strict=True))
    created = {i: int(rows[i][11]) for i in ids}
    dense = sorted(scored, key=lambda i: (-sims[i], -created[i]))
    fused = rrf([[str(r[0]) for r, _ in lexical], dense], k)
    best = sorted(fused, key=lambda i: (-fused[i], -created[i]))[:limit]
    return [(rows[i], fused[i]) for i in best]


__all__ = [
    "DENSE_N",
    "EMBED_N",
    "LEXICAL_N",
    "RECENT_N",
    "RRF_K",
    "backfill",
    "embed_episodes",
    "embed_texts",
    "episode_text",
    "hybrid_search",
    "rrf",
]
