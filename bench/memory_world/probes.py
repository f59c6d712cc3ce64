"""Probe turns for the recall bench (``bench/memory_probes.py``, issue 30): a turn whose latest
message names what a planted fact is about (:attr:`.core.Fact.about`: a decision's topic, a
failed approach, what an identifier names, a commitment's or question's term and service, an
instruction's subject), in this package's own words, long after the fact was planted.

:func:`with_probes` replaces the model's text of a filler turn ``p - 1`` with such a sentence;
the context of model call ``p`` is then measured for the fact. Only the fact's probes that the
probe sentence does not itself contain are required there (naming a failed approach does not
say what went wrong with it). The world's tools, outputs and other turns are unchanged.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from .core import Probe, World

#: Sentences a turn names a subject with, per phrasing family (``{about}``: the subject).
PROBE_SAY: dict[str, tuple[str, ...]] = {
    "dev": (
        "Back to {about} for a moment.",
        "Looking at {about} again before the next ticket.",
        "The next step needs {about}.",
        "Revisiting {about} from the backlog.",
    ),
    "heldout": (
        "Picking {about} up again for the hand-over notes.",
        "Circling back to {about} before moving on.",
        "The next item depends on {about}; checking what we have.",
        "Cross-checking {about} against the write-ups.",
    ),
}
#: Fewest and most turns between a fact and its probe.
GAP = (30, 1500)


@dataclass(frozen=True)
class ProbeTurn:
    """Fact ``fact_id`` is named at turn ``turn - 1``; the context of model call ``turn`` must
    hold its ``required`` probes."""

    fact_id: str
    turn: int
    say: str
    required: tuple[Probe, ...]


def with_probes(world: World, seed: int = 7) -> tuple[World, list[ProbeTurn]]:
    """``world`` with one probe turn per fact that has room for one (planted at least
    ``GAP[0]`` turns before the end, not superseded by its probe turn), on filler turns only,
    and the probe turns in order."""
    rng = random.Random(f"probes:{world.family}:{world.seed}:{len(world.turns)}:{seed}")
    planted = {f.turn for f in world.facts}
    operator = {t.index for t in world.turns if t.operator}
    by_id = {f.id: f for f in world.facts}
    taken: set[int] = set()
    turns = list(world.turns)
    out: list[ProbeTurn] = []
    last = len(turns) - 2
    for f in world.facts:
        if not f.about or f.turn + GAP[0] > last:
            continue
        for _ in range(50):
            p = min(last, f.turn + rng.randint(*GAP))
            free = all(x not in planted and x not in operator for x in (p - 1, p))
            if free and p not in taken and p - 1 not in taken and p + 1 not in taken:
                break
        else:
            continue
        later = by_id.get(f.superseded_by or "")
        if later is not None and later.turn <= p:
            continue
        say = rng.choice(PROBE_SAY[world.family]).format(about=f.about)
        required = tuple(x for x in f.probes if not x.found_in(say))
        if not required:
            continue
        taken.update({p - 1, p})
        turns[p - 1] = dataclasses.replace(turns[p - 1], say=say)
        out.append(ProbeTurn(f.id, p, say, required))
    out.sort(key=lambda x: x.turn)
    return dataclasses.replace(world, turns=tuple(turns)), out
