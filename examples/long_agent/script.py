"""The long agent's world and script, generated from a seed: the notes files it reads (real
files), what its scripted model says at each turn, and the facts planted along the way.

Four kinds of planted fact, each with a key phrase (the planted-fact bench,
``bench/memory_facts.py``, no longer uses them: it has a world of its own,
``bench/memory_world``, whose facts carry no such cue words):

- ``identifier``: a release id written into the notes file the agent reads at that turn
  (the key is the id, e.g. ``rel-48213-qx``);
- ``decision``: the model says ``Decision: use the <x> strategy because <why>.``
  (key ``use the <x> strategy``);
- ``failed``: the model tries a file that does not exist and says ``The <x> approach failed
  because <why>.`` (key ``<x> approach failed``);
- ``operator``: an operator message ``Always <do> before <when>.`` reaches the agent at that
  turn (key: that sentence, without the final dot).

Filler is prose without digits, so the identifiers stand out the way real ones would not
always (documented in bench/README.md).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

KINDS = ("identifier", "decision", "failed", "operator")

_WORDS = [
    "the",
    "agent",
    "reads",
    "notes",
    "about",
    "services",
    "queues",
    "caches",
    "workers",
    "and",
    "the",
    "people",
    "who",
    "run",
    "them",
    "some",
    "lines",
    "describe",
    "how",
    "a",
    "deploy",
    "went",
    "others",
    "describe",
    "a",
    "slow",
    "query",
    "or",
    "a",
    "flaky",
    "test",
    "and",
    "a",
    "few",
    "describe",
    "nothing",
    "in",
    "particular",
    "but",
    "fill",
    "the",
    "page",
    "like",
    "real",
    "notes",
    "do",
]
_ADJ = [
    "amber",
    "brisk",
    "cobalt",
    "dusty",
    "eager",
    "frosty",
    "gentle",
    "hollow",
    "ivory",
    "jagged",
    "keen",
    "lunar",
]
_NOUN = [
    "parser",
    "ledger",
    "router",
    "sampler",
    "indexer",
    "batcher",
    "mirror",
    "crawler",
    "packer",
    "scanner",
]
_WHY = (
    "it keeps the order of events",
    "the old one dropped rows under load",
    "it needs no network at run time",
    "the reviewers asked for fewer moving parts",
    "it is the only one that handles unicode paths",
)
_FAIL = (
    "the file it needed was never written",
    "it timed out on the large inputs",
    "it could not read compressed notes",
    "the lock was held by another worker",
)
_DO = "rotate the keys|drain the queue|snapshot the ledger|page the on-call|pin the versions"
_WHEN = "any restart|touching production|the weekly release|merging a schema change"


@dataclass(frozen=True)
class Fact:
    """A planted fact: its ``kind``, the ``turn`` (0-based) it is planted at, the ``text`` and
    the ``key`` phrase that counts it as kept (matched case-insensitively)."""

    kind: str
    turn: int
    text: str
    key: str


@dataclass(frozen=True)
class Script:
    """What the model says and does at each turn, and the facts."""

    turns: int
    seed: int
    facts: tuple[Fact, ...]

    def fact_at(self, turn: int, kind: str) -> Fact | None:
        return next((f for f in self.facts if f.turn == turn and f.kind == kind), None)


def make_script(turns: int, seed: int = 7) -> Script:
    """``turns`` turns with ``max(2, turns // 50)`` facts of each kind at distinct random
    turns (never the first or the last two)."""
    rng = random.Random(seed)
    per_kind = max(2, turns // 50)
    slots = rng.sample(range(1, max(2, turns - 2)), min(turns - 3, per_kind * len(KINDS)))
    facts: list[Fact] = []
    for i, turn in enumerate(sorted(slots)):
        kind = KINDS[i % len(KINDS)]
        adj, noun = rng.choice(_ADJ), rng.choice(_NOUN)
        if kind == "identifier":
            tail = rng.choice("abcdefghjk") + rng.choice("pqrstuvwxyz")
            ident = f"rel-{rng.randrange(10000, 99999)}-{tail}"
            facts.append(Fact(kind, turn, f"The release id is {ident}.", ident))
        elif kind == "decision":
            key = f"use the {adj} {noun} strategy"
            facts.append(Fact(kind, turn, f"Decision: {key} because {rng.choice(_WHY)}.", key))
        elif kind == "failed":
            key = f"{adj} {noun} approach failed"
            text = f"The {key} because {rng.choice(_FAIL)}."
            facts.append(Fact(kind, turn, text, key))
        else:
            sentence = f"Always {rng.choice(_DO.split('|'))} before {rng.choice(_WHEN.split('|'))}"
            facts.append(Fact(kind, turn, sentence + ".", sentence))
    return Script(turns=turns, seed=seed, facts=tuple(facts))


def notes_name(turn: int) -> str:
    return f"notes/day-{turn:04d}.txt"


def write_world(root: Path, script: Script) -> None:
    """The notes files the agent reads, one per turn (seeded prose; an identifier planted in
    the file of its turn)."""
    rng = random.Random(script.seed * 7919 + 1)
    (root / "notes").mkdir(parents=True, exist_ok=True)
    for turn in range(script.turns):
        words = [rng.choice(_WORDS) for _ in range(rng.randrange(60, 110))]
        text = " ".join(words).capitalize() + "."
        fact = script.fact_at(turn, "identifier")
        if fact is not None:
            text += " " + fact.text
        (root / notes_name(turn)).write_text(text + "\n")
