"""The planted-fact world of the memory bench (bench/memory_world): the rules that make its
figures honest, checked on the generator alone (no agent, no extractor, no subprocess)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

# the bench package lives at the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.memory_world import (
    CUE_WORDS,
    KINDS,
    Probe,
    collisions,
    cue_words_in,
    haystack,
    make_world,
)
from bench.memory_world import phrasing as ph
from bench.memory_world import shapes as sh

FAMILIES = ("dev", "heldout")


@pytest.fixture(scope="module", params=FAMILIES)
def worlds(request: pytest.FixtureRequest) -> list:
    return [make_world(turns, seed, request.param) for turns, seed in ((50, 1), (50, 2), (200, 3))]


def test_a_third_of_the_facts_carry_no_cue_word_anywhere_in_their_turn(worlds: list) -> None:
    for w in worlds:
        for kind in KINDS:
            facts = [f for f in w.facts if f.kind == kind]
            assert facts, kind
        free = [f for f in w.facts if f.cue_free]
        assert len(free) * 3 >= len(w.facts), (w.family, len(free), len(w.facts))
        for f in w.facts:  # the flag is what the turn's texts say, nothing declared
            words = cue_words_in("\n".join(w.turns[f.turn].texts()))
            assert f.cue_free == (not words), (f.id, words)
    assert cue_words_in("We DECIDED this because of a Failure") == ["decided", "because", "failure"]
    assert set(CUE_WORDS) >= {"because", "decided", "error", "failed", "so that", "since"}


def test_three_phrasings_per_kind_in_each_family_and_no_template_shared() -> None:
    for fam in FAMILIES:
        for kind in KINDS:
            assert len(ph.SAY[fam][kind]) >= 3, (fam, kind)
        for kind, lines in ph.TOOL_LINES[fam].items():
            assert len(lines) >= 3, (fam, kind)
        assert len(ph.COMMENTS[fam]) >= 3 and len(ph.SUPERSEDE[fam]) >= 3
    for table in (ph.SAY, ph.TOOL_LINES):
        dev = {t for lines in table["dev"].values() for _, t in lines}
        held = {t for lines in table["heldout"].values() for _, t in lines}
        assert not dev & held
    assert not set(sh.DEV_SHAPES) & set(sh.HELDOUT_SHAPES)


def test_worlds_use_several_phrasings_and_places_per_kind(worlds: list) -> None:
    big = worlds[-1]
    templates = Counter((f.kind, f.template) for f in big.facts)
    for kind in KINDS:
        assert sum(1 for k, _ in templates if k == kind) >= 3, kind
    places = {(f.kind, f.place) for f in big.facts}
    for kind in ("identifier", "decision", "failed", "question"):
        assert {(kind, "model"), (kind, "tool")} <= places
    assert {f.place for f in big.facts if f.kind == "instruction"} == {"operator"}
    assert any(f.superseded_by for f in big.facts)


def test_probes_are_found_only_in_the_turn_that_plants_them(worlds: list) -> None:
    for w in worlds:
        assert collisions(w) == []
        probes = [str(p) for f in w.facts for p in f.probes]
        assert len(probes) == len(set(probes))
        for f in w.facts:
            assert f.kept(haystack(w.turns[f.turn].texts())), f.id


def test_the_same_seed_gives_the_same_world_and_another_seed_another() -> None:
    for fam in FAMILIES:
        assert make_world(60, 5, fam) == make_world(60, 5, fam)
        assert make_world(60, 5, fam).facts != make_world(60, 6, fam).facts
    assert make_world(60, 5, "dev").turns[3].say != make_world(60, 5, "heldout").turns[3].say


def test_probes_refuse_damaged_identifiers() -> None:
    path = Probe("exact", "/srv/ledgerd/releases/ledgerd-5.61.40-a1b2c3d4.tar.zst")
    assert path.found_in("kept: /srv/ledgerd/releases/ledgerd-5.61.40-a1b2c3d4.tar.zst.")
    assert not path.found_in("kept: srv/ledgerd/releases/ledgerd-5.61.40-a1b2c3d4.tar.zst")
    inc = Probe("exact", "INC-48213")
    assert not inc.found_in('"text": "line\\nINC-48213"')  # escaped text, read raw
    assert inc.found_in(haystack(['"text": "line\\nINC-48213"']))  # as a model reads it
    assert not inc.found_in("nINC-48213") and not inc.found_in("INC-482131")
    num = Probe("exact", "76329")
    assert num.found_in("p99 76329ms") and not num.found_in("req=76329f95-0975")
    near = Probe("near", "relay.worker_count", "70320")
    assert near.found_in("relay.worker_count=70320") and near.found_in(
        "70320 is relay.worker_count"
    )
    assert not near.found_in("relay.worker_count=7032")
    term = Probe("term", "zstd")
    assert term.found_in("Went with ZSTD.") and not term.found_in("zstdmt")


def test_a_superseded_instruction_is_not_required_after_its_replacement() -> None:
    w = make_world(200, 3, "dev")
    old = next(f for f in w.facts if f.superseded_by)
    new = next(f for f in w.facts if f.id == old.superseded_by)
    assert new.subject == old.subject and new.turn > old.turn
    assert old in w.required(new.turn - 1) and new not in w.required(new.turn - 1)
    # the new operator message reaches the agent before the model call of its turn
    assert old not in w.required(new.turn) and new in w.required(new.turn)
    assert all(f.turn < 40 or (f.place == "operator" and f.turn == 40) for f in w.required(40))
