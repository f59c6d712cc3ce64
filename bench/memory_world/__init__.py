"""A planted-fact world for the working-memory bench (``bench/memory_facts.py``), written
independently of any extractor: facts that matter, phrased the way agents, tools and people
phrase them (most without the cue words an extractive summarizer looks for), placed in the
model's text, in operator messages and inside long tool outputs of realistic shape (build
logs, pytest runs, stack dumps, JSON API responses, listings, CSV, ``git log``) full of
identifiers that are not facts, with decisions and open questions inside design notes.

Six kinds (:data:`KINDS`): identifiers (paths, hashes, ids, versions, numbers with what they
name), decisions (chosen option, rejected alternative, reason), failed approaches (what was
tried, the error's distinctive token), operator instructions (some superseding earlier ones on
the same subject: a superseded one is no longer required), commitments, open questions.

Each fact has probes (:class:`Probe`) a correct summary in any wording would still contain: an
identifier verbatim; a decision's chosen option, rejected alternative and the reason's
distinctive term or number; a failure's approach and error token; an instruction's value; a
commitment's or question's subject term and number. :func:`collisions` proves no probe is
found outside the turn that plants it (the generator retries until there is none).

Two phrasing families (:mod:`.phrasing`, :mod:`.vocab`, :mod:`.shapes`): ``dev`` to iterate
on, ``heldout`` with other templates, vocabulary and output shapes, the figure that counts.
"""

from .core import CUE_WORDS, KINDS, PLACES, Fact, Probe, Turn, World, cue_words_in, haystack
from .world import GOALS, collisions, facts_per_kind, make_world

__all__ = [
    "CUE_WORDS",
    "GOALS",
    "KINDS",
    "PLACES",
    "Fact",
    "Probe",
    "Turn",
    "World",
    "collisions",
    "cue_words_in",
    "facts_per_kind",
    "haystack",
    "make_world",
]
