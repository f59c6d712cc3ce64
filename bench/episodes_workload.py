"""The synthetic episodes workload of ``bench/episodes.py`` (issue 18), deterministic from a seed.

- **Vocabulary**: ``VOCABULARY`` pronounceable words (syllables from a fixed list, no English
  stop words among them), drawn with a Zipf distribution (exponent ``ZIPF_S``): word of rank
  ``r`` has weight ``1 / r**s``. The first words are as common as English function words, the
  tail is rare, as in real text.
- **Episodes**: a summary of 12 and a lesson of 28 words drawn from it; scope one of
  ``SCOPES``, task type one of ``TASK_TYPES`` (uniform: a scope and task type pair holds 1 % of
  the episodes when there are 10 of each), agent one of ``AGENTS``, outcome one of
  ``OUTCOMES``; ``created_at_ms`` increasing one second per episode.
- **Queries**: 2-4 words drawn from the same distribution, with a scope and a task type (the
  filters narrowing to about 1 %).

:class:`SkewedWorkload` is the field workload of issue 31: texts of 20-160 words (a third
summary, the rest lesson), ``SKEWED_SCOPES`` scopes drawn with a Zipf law (exponent 1: the
largest holds ~13 % of the store, most hold a few dozen episodes), queries of 2-4 words in a
scope drawn the same way (scope filter only), so at every store size many filters hold fewer
than 1,000 episodes.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

VOCABULARY = 20_000
ZIPF_S = 1.1
SCOPES = [f"tenant-{i:02d}" for i in range(10)]
TASK_TYPES = [f"task-{i:02d}" for i in range(10)]
AGENTS = [f"agent-{i}" for i in range(5)]
OUTCOMES = ["succeeded", "failed", "blocked", "waiting"]
SUMMARY_WORDS = 12
LESSON_WORDS = 28
_SYLLABLES = [
    c + v
    for c in ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "sh")
    for v in ("a", "e", "i", "o", "u", "ai", "ou")
]


def vocabulary(n: int = VOCABULARY, seed: int = 18) -> list[str]:
    """``n`` distinct words of 2-4 syllables, in rank order (shuffled deterministically)."""
    words = ["".join(p) for k in (2, 3) for p in itertools.product(_SYLLABLES, repeat=k)]
    rnd = random.Random(seed)
    rnd.shuffle(words)
    return words[:n]


@dataclass(frozen=True)
class Row:
    n: int
    scope: str
    agent: str
    task_type: str
    outcome: str
    summary: str
    lesson: str
    created_at_ms: int


class Workload:
    """Episodes and queries from one seeded generator."""

    def __init__(self, seed: int = 18, vocab_size: int = VOCABULARY, zipf_s: float = ZIPF_S):
        self.words = vocabulary(vocab_size, seed)
        weights = [1 / (r**zipf_s) for r in range(1, vocab_size + 1)]
        self.cum = list(itertools.accumulate(weights))
        self.seed = seed

    def _draw(self, rnd: random.Random, k: int) -> list[str]:
        return rnd.choices(self.words, cum_weights=self.cum, k=k)

    def episodes(self, start: int, stop: int) -> Iterator[Row]:
        """Episodes number ``start`` … ``stop - 1`` (the same ones whatever the batching)."""
        for n in range(start, stop):
            rnd = random.Random(self.seed * 1_000_003 + n)
            yield Row(
                n=n,
                scope=SCOPES[n % len(SCOPES)],
                agent=AGENTS[rnd.randrange(len(AGENTS))],
                task_type=TASK_TYPES[(n // len(SCOPES)) % len(TASK_TYPES)],
                outcome=OUTCOMES[rnd.randrange(len(OUTCOMES))],
                summary=" ".join(self._draw(rnd, SUMMARY_WORDS)),
                lesson="- " + " ".join(self._draw(rnd, LESSON_WORDS)),
                created_at_ms=1_700_000_000_000 + n * 1000,
            )

    def queries(self, count: int, seed: int = 7) -> list[tuple[str, str, str]]:
        """``(text, scope, task type)``: 2-4 Zipf-drawn words and filters narrowing to ~1 %."""
        rnd = random.Random(seed)
        out = []
        for _ in range(count):
            text = " ".join(self._draw(rnd, rnd.randint(2, 4)))
            out.append((text, rnd.choice(SCOPES), rnd.choice(TASK_TYPES)))
        return out


SKEWED_SCOPES = [f"user-{i:04d}" for i in range(1000)]


class SkewedWorkload(Workload):
    """The issue 31 field workload (see the module docstring); ``task_type`` is None in its
    queries (a scope filter only)."""

    def __init__(self, seed: int = 31, vocab_size: int = VOCABULARY, zipf_s: float = ZIPF_S):
        super().__init__(seed, vocab_size, zipf_s)
        self.scope_cum = list(itertools.accumulate(1 / r for r in range(1, len(SKEWED_SCOPES) + 1)))

    def _scope(self, rnd: random.Random) -> str:
        return rnd.choices(SKEWED_SCOPES, cum_weights=self.scope_cum)[0]

    def episodes(self, start: int, stop: int) -> Iterator[Row]:
        for n in range(start, stop):
            rnd = random.Random(self.seed * 1_000_003 + n)
            k = rnd.randint(20, 160)
            words = self._draw(rnd, k)
            yield Row(
                n=n,
                scope=self._scope(rnd),
                agent=AGENTS[rnd.randrange(len(AGENTS))],
                task_type=TASK_TYPES[rnd.randrange(len(TASK_TYPES))],
                outcome=OUTCOMES[rnd.randrange(len(OUTCOMES))],
                summary=" ".join(words[: k // 3]),
                lesson="- " + " ".join(words[k // 3 :]),
                created_at_ms=1_700_000_000_000 + n * 1000,
            )

    def queries(self, count: int, seed: int = 7) -> list[tuple[str, str, str | None]]:  # type: ignore[override]
        rnd = random.Random(seed)
        return [
            (" ".join(self._draw(rnd, rnd.randint(2, 4))), self._scope(rnd), None)
            for _ in range(count)
        ]


__all__ = [
    "AGENTS",
    "OUTCOMES",
    "SCOPES",
    "SKEWED_SCOPES",
    "TASK_TYPES",
    "Row",
    "SkewedWorkload",
    "Workload",
    "vocabulary",
]
