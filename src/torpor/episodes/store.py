"""Episodes in the run store: written idempotently at run boundaries, searched by relevance
within a scope, superseded when contradicted, pruned by their own retention policy.

Both backends answer the filters inside the full-text index: SQLite FTS5 (an external-content
index over the ``episodes`` table) and PostgreSQL full text (a ``tsvector`` with a GIN index,
and per-scope word counters kept by a trigger in the writing transaction). The filters —
scope, agent, task type, outcome — are tokens indexed with each episode (:func:`~.model.tag`),
so the index intersects them with the query's words; the exact columns are compared too, so an
episode of another scope is never returned, whatever the text. Ranking: :mod:`.search`.

The rows are the store's (:class:`~torpor.store.domain.EpisodeRows`, its queries in
``torpor/store/sql/episodes/<dialect>.sql``); this module decides what is written, what
contradicts what, and what a row means.

Writing is keyed by ``(run_id, boundary)`` (``INSERT … ON CONFLICT DO NOTHING``) in one
transaction with the run row's ``episodes_seq``: a process killed at any point leaves each
episode written once or not at all, and the next :meth:`EpisodeStore.capture` of the run (every
execution of a run ends with one; :meth:`EpisodeStore.catch_up` sweeps the rest) writes what is
missing.

An episode keeps the artifacts it names (``refs["artifacts"]``) from garbage collection after its
run is deleted: the transaction that writes it records them in ``blob_refs`` under the owner
``episode:<episode id>``, and the one that prunes it deletes those rows (:mod:`.gc`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from .. import faults, scrub
from ..errors import ConfigError, EpisodeNotFoundError, TorporError
from ..history.events import SHA256_RE
from ..store.base import Store
from ..store.domain import EpisodeRecord
from ..store.episodes import load_episode_queries
from .contradict import Conflict, Stated, contradictions, involving
from .derive import RunFiling, derive
from .embed import Embedder, embedder_from_env
from .hybrid import embed_episodes, hybrid_search
from .model import Episode, tags_for, terms
from .search import Filters, Searcher

#: How many of the latest live episodes of a scope and task type a new one is checked
#: against for contradiction.
SUPERSEDE_WINDOW = 200

#: How many of a scope's latest episodes name the runs whose ledgers a capture compares the
#: run's own ledger records with (:mod:`.contradict`).
CONFLICT_RUNS = 200

#: Episodes as written (summary, lesson, conditions): no secret this process knows (G12).
EPISODES = scrub.sink("episodes", "episode summaries, lessons and conditions as written")

#: A re-ranking hook: given the query text and the hits (best first), returns them re-ordered
#: (an embedding model's similarity, say). Optional; nothing in torpor needs a model for search.
Rerank = Callable[[str, list[Episode]], list[Episode]]

#: ``EpisodeStore(store)``'s embedder: the one ``TORPOR_EMBEDDER`` names, if any.
FROM_ENV: Any = object()

log = logging.getLogger("torpor.episodes")


def _row(r: tuple[Any, ...]) -> Episode:
    return Episode(
        episode_id=r[0],
        run_id=r[1],
        boundary=r[2],
        scope=r[3],
        agent=r[4],
        task_type=r[5],
        kind=r[6],
        outcome=r[7],
        summary=r[8],
        lesson=r[9],
        at_seq=int(r[10]),
        created_at_ms=int(r[11]),
        conditions=json.loads(r[12]),
        refs=json.loads(r[13]),
        claims=json.loads(r[14]),
        superseded_by=r[15],
        valid_until_ms=None if r[16] is None else int(r[16]),
        score=float(r[17] or 0.0),
    )


def contradicts(new: dict[str, str], old: dict[str, str]) -> bool:
    """Whether claims ``new`` contradict ``old``: some tool (or step) one says failed and the
    other says succeeded."""
    return any(old.get(k) not in (None, v) for k, v in new.items())


class EpisodeStore:
    """Episodes in ``store`` (an open :class:`~torpor.store.base.Store`; this object does not
    close it). Thread-safe as the store is.

    ``embedder``: an :class:`~.embed.Embedder` to find episodes by meaning too — new episodes'
    vectors are written after them and searches are hybrid (:mod:`.hybrid`); None: full-text
    search alone; by default the one ``TORPOR_EMBEDDER`` names
    (:func:`~.embed.embedder_from_env`; unset: none). ConfigError for an unknown name."""

    def __init__(self, store: Store, embedder: Embedder | None = FROM_ENV):
        self.store = store
        self._embedder = embedder

    @property
    def embedder(self) -> Embedder | None:
        """The embedder (``TORPOR_EMBEDDER``'s resolved on first use). ConfigError for an
        unknown name — which writing and searching log, going on without vectors."""
        if self._embedder is FROM_ENV:
            self._embedder = embedder_from_env()
        return self._embedder

    def _embedder_or_none(self) -> Embedder | None:
        try:
            return self.embedder
        except ConfigError as e:
            log.warning("episodes without search by meaning: %s", e)
            return None

    # ------------------------------------------------------------ writing

    def filing(self, run_id: str) -> tuple[RunFiling, int] | None:
        """Where run ``run_id``'s episodes are filed and the seq captured so far; None for a
        run not filed for episodes (no task type). RunNotFoundError for an unknown run."""
        row = self.store.episode_filing(run_id)
        if row is None:
            self.store.get_run(run_id)  # raises RunNotFoundError
            return None
        workflow, scope, task_type, seq = row
        if task_type is None:
            return None
        return RunFiling(run_id, scope or "", workflow, task_type), int(seq)

    def capture(self, run_id: str) -> list[Episode]:
        """Write the episodes of run ``run_id``'s boundaries not yet captured (reading its
        history); return those newly written. Idempotent, and safe to run concurrently (a
        boundary's episode is written once). A run without a task type gets none."""
        found = self.filing(run_id)
        if found is None:
            return []
        filing, after = found
        events = list(self.store.iter_events(run_id))
        if not events or events[-1].seq <= after:
            return []
        drafts = derive(events, filing, after_seq=after)
        conflicts = self._ledger_conflicts(filing.scope, run_id)
        faults.point("episodes.derived")
        return self.write(drafts, captured=(run_id, events[-1].seq), conflicts=conflicts)

    def _ledger_conflicts(self, scope: str, run_id: str) -> list[tuple[Any, ...]]:
        """The ``ledger_conflicts`` rows a capture of ``run_id`` records: the contradictions
        (:func:`.contradict.contradictions`) among the fact-ledger records of the run and of
        the runs of the scope's latest :data:`CONFLICT_RUNS` episodes that involve one of the
        run's own records."""
        rows = self.store.scope_ledger_facts(scope, run_id, runs=CONFLICT_RUNS)
        facts = [
            Stated(str(r), int(q), int(i), int(at), str(k), str(t), str(key))
            for r, q, i, at, k, t, key in rows
        ]
        out = []
        for c in involving(contradictions(facts), run_id):
            o, n = c.older, c.newer
            old = (o.run_id, o.seq, o.idx, o.at_ms, o.text, c.old_value)
            new = (n.run_id, n.seq, n.idx, n.text, c.new_value, n.at_ms)
            out.append((scope, c.subject, *old, *new))
        return out

    def write(
        self,
        episodes: Sequence[Episode],
        *,
        captured: tuple[str, int] | None = None,
        conflicts: Sequence[tuple[Any, ...]] = (),
    ) -> list[Episode]:
        """Write ``episodes`` in one transaction (each one once: an episode whose
        ``(run_id, boundary)`` exists is left as it is), superseding the live episodes of their
        scope and task type whose claims they contradict. ``captured``: ``(run_id, seq)`` to
        record on the run row as captured; ``conflicts``: ``ledger_conflicts`` rows to record
        in the same transaction (what :meth:`capture` found). Returns the episodes newly
        written. ConfigError for an episode whose ``refs["artifacts"]`` holds anything but
        sha256 hex digests."""
        for ep in episodes:
            bad = [a for a in ep.refs.get("artifacts", []) if not SHA256_RE.fullmatch(str(a))]
            if bad:
                raise ConfigError(
                    f"episode {ep.episode_id!r}: refs['artifacts'] holds {bad[0]!r}, "
                    "not a sha256 (64 lowercase hex digits)"
                )
        records = [_record(ep) for ep in episodes]
        of = {id(r): ep for r, ep in zip(records, episodes, strict=True)}  # (the same objects)
        written = self.store.write_episodes(
            records,
            captured=captured,
            contradicts=contradicts,
            window=SUPERSEDE_WINDOW,
            conflicts=conflicts,
        )
        embedder = self._embedder_or_none() if written else None
        if embedder is not None:
            faults.point("episodes.vectors")
            self._embed(embedder, [of[id(r)] for r in written])
        return [of[id(r)] for r in written]

    def _embed(self, embedder: Embedder, episodes: Sequence[Episode]) -> None:
        """Store the vectors of episodes just written. A failure loses nothing: the episode
        is written, and a search embeds a candidate without a vector (:mod:`.hybrid`)."""
        triples = [(ep.episode_id, ep.summary, ep.lesson) for ep in episodes]
        try:
            embed_episodes(self.store, embedder, triples)
        except TorporError as e:
            log.warning("episode vectors not written (searches embed them): %s", e)

    def supersede(self, old_id: str, new_id: str) -> bool:
        """Mark episode ``old_id`` superseded by ``new_id`` (a person's or a model's judgement
        that the newer lesson contradicts it); False when it already was superseded.
        EpisodeNotFoundError for an unknown id."""
        self.get(old_id)
        self.get(new_id)
        return self.store.supersede_episode(old_id, new_id)

    def catch_up(self, limit: int = 1000) -> int:
        """Capture the episodes of every run (at most ``limit``) waiting or finished with
        boundaries not yet captured — those whose process died between a boundary and its
        capture. Returns how many episodes were written."""
        return sum(len(self.capture(r)) for r in self.store.episode_runs_behind(limit))

    def bulk_import(self, episodes: Iterable[Episode], *, batch: int = 500) -> int:
        """Write ``episodes`` (an export's, another system's) ``batch`` per transaction, as
        :meth:`write` does each batch — once each by ``(run_id, boundary)``, contradicted ones
        superseded — and return how many were newly written. Memory use is one batch.
        ConfigError for ``batch`` < 1 (and as :meth:`write`)."""
        if batch < 1:
            raise ConfigError(f"episode import batch must be at least 1, not {batch}")
        total, chunk = 0, []
        for ep in episodes:
            chunk.append(ep)
            if len(chunk) == batch:
                total += len(self.write(chunk))
                chunk = []
        return total + (len(self.write(chunk)) if chunk else 0)

    # ------------------------------------------------------------ reading

    def get(self, episode_id: str) -> Episode:
        """The episode ``episode_id`` (``RUN:KIND@SEQ``), superseded or not.
        EpisodeNotFoundError."""
        row = self.store.episode_row(episode_id)
        if row is None:
            raise EpisodeNotFoundError(f"no episode {episode_id!r} in {self.store.url}")
        return _row(row)

    def search(
        self,
        query: str,
        *,
        scope: str = "",
        agent: str | None = None,
        task_type: str | None = None,
        outcome: str | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
        limit: int = 10,
        include_superseded: bool = False,
        rerank: Rerank | None = None,
    ) -> list[Episode]:
        """The ``limit`` episodes of ``scope`` most relevant to ``query`` (BM25 with term
        presence, words weighed by their rarity in the scope, the same on both backends:
        :mod:`.search`; ties and a query without words: the most recent first; a query of
        English stop words only: none),
        among those of ``agent``/``task_type``/``outcome`` when given, created at or after
        ``since_ms`` and at or before ``until_ms`` (epoch ms). ``query`` is plain text: its
        words are matched (any of them, stemmed); quotes, ``*``, ``-``, parentheses and
        operator words are never syntax. Superseded episodes are left out unless
        ``include_superseded``. With an embedder the full-text candidates and the filter's
        most recent are reranked by meaning and fused (:func:`.hybrid.hybrid_search`; an
        embedder that fails is logged and the full-text ranking returned). ``rerank`` may
        re-order the hits (see :data:`Rerank`). ConfigError for ``limit`` < 1."""
        if limit < 1:
            raise ConfigError(f"episode search limit must be at least 1, not {limit}")
        if not isinstance(scope, str):
            raise ConfigError(f"episode scope must be a string, not {type(scope).__name__}")
        f = Filters(
            scope=scope,
            agent=agent,
            task_type=task_type,
            outcome=outcome,
            live=not include_superseded,
            since_ms=since_ms if since_ms is not None else -(2**62),
            until_ms=until_ms if until_ms is not None else 2**62,
        )
        found = None
        embedder = self._embedder_or_none() if terms(query) else None
        if embedder is not None:
            try:
                found = hybrid_search(self.store, embedder, f, query, limit)
            except TorporError as e:
                log.warning("episode search by meaning failed, full-text only: %s", e)
        if found is None:
            with self.store.episode_index() as index:
                found = Searcher(index).search(f, terms(query), limit)
        hits = [_row((*r, score)) for r, score in found]
        return rerank(query, hits) if rerank is not None else hits

    def conflicts(
        self, scope: str, *, until_ms: int | None = None, limit: int = 50
    ) -> list[Conflict]:
        """The contradictions recorded among the fact-ledger records of ``scope``'s runs
        (:mod:`.contradict`: two records giving one subject different values, the newer
        superseding the older), newest first, at most ``limit``, those recorded by
        ``until_ms`` (epoch ms) when given. Each is recorded by the capture of the run that
        stated one of its records (:meth:`capture`); the records' ``kind`` and ``key`` are
        not kept (``""``). ConfigError for ``limit`` < 1."""
        if limit < 1:
            raise ConfigError(f"conflict limit must be at least 1, not {limit}")
        rows = self.store.scope_conflicts(
            scope, until_ms=2**62 if until_ms is None else until_ms, limit=limit
        )
        out = []
        for r in rows:
            older = Stated(str(r[2]), int(r[3]), int(r[4]), int(r[5]), "", str(r[6]))
            newer = Stated(str(r[8]), int(r[9]), int(r[10]), int(r[13]), "", str(r[11]))
            out.append(Conflict(str(r[1]), older, newer, str(r[7]), str(r[12])))
        return out

    def count(self) -> int:
        """How many episodes the store holds (all scopes)."""
        return self.store.count_episodes()

    # ------------------------------------------------------------ governing a scope

    def scopes(self) -> dict[str, int]:
        """``{scope: episodes}`` of every scope holding episodes."""
        return {str(sc): int(n) for sc, n in self.store.episode_scopes()}

    def scopes_in_use(self) -> bool:
        """Whether any episode is filed under a scope other than ``""`` (so a caller that
        names none is told to: the CLI refuses a search without ``--scope`` or
        ``--all-scopes``)."""
        return self.store.episode_scopes_in_use()

    def iter_scope(self, scope: str, *, page: int = 500) -> Iterator[Episode]:
        """Every episode of ``scope``, superseded or not, in the order written (read ``page``
        rows at a time: memory use is one page)."""
        after = 0
        while True:
            rows = self.store.scope_episode_rows(scope, after=after, limit=page)
            for r in rows:
                yield _row(r[:-1])
            if len(rows) < page:
                return
            after = int(rows[-1][-1])

    def forget(self, scope: str) -> dict[str, int]:
        """Delete everything memory holds of ``scope`` in one transaction — its episodes (with
        their index rows), the artifact references they held, and its rows of every table
        registered with :func:`torpor.store.episode_scopes.register_scoped_table` — and return
        ``{what: rows deleted}``. The scope's runs are not memory and are left to run
        retention (with each run's fact ledger, derived from its history); an artifact no
        longer named by anything is collected by the next ``torpor gc``. ConfigError for a
        non-string scope."""
        if not isinstance(scope, str):
            raise ConfigError(f"episode scope must be a string, not {type(scope).__name__}")
        return self.store.forget_scope(scope)

    # ------------------------------------------------------------ retention

    def prune(self, *, before_ms: int, superseded_only: bool = False, batch: int = 500) -> int:
        """Delete episodes created before ``before_ms`` (epoch ms) — only superseded ones when
        ``superseded_only`` — and return how many. Episodes have their own retention: they
        outlive the runs they came from, and pruning them never touches a run. The artifacts
        an episode named lose its reference in the same transaction (the next ``torpor gc``
        collects those nothing else names)."""
        n = self.store.prune_episodes(
            before_ms=before_ms, superseded_only=superseded_only, batch=batch
        )
        if n:
            self.store.drop_orphan_episode_vectors()
        return n


def _record(ep: Episode) -> EpisodeRecord:
    """The store's record of ``ep`` (its filter tokens joined)."""
    return EpisodeRecord(
        episode_id=ep.episode_id,
        run_id=ep.run_id,
        boundary=ep.boundary,
        scope=ep.scope,
        agent=ep.agent,
        task_type=ep.task_type,
        kind=ep.kind,
        outcome=ep.outcome,
        summary=EPISODES.text(ep.summary),
        lesson=EPISODES.text(ep.lesson),
        at_seq=ep.at_seq,
        created_at_ms=ep.created_at_ms,
        conditions=EPISODES(ep.conditions),
        refs=ep.refs,
        claims=ep.claims,
        tags=" ".join(tags_for(ep.scope, ep.agent, ep.task_type, ep.outcome)),
    )


__all__ = [
    "CONFLICT_RUNS",
    "FROM_ENV",
    "SUPERSEDE_WINDOW",
    "EpisodeStore",
    "Rerank",
    "contradicts",
    "load_episode_queries",
]
