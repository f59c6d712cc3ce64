"""Episodes, the records of episodic memory, and the pure rules around them: how user text
becomes a full-text query that cannot inject syntax, and how filters become index tokens.

Terms (DESIGN.md §1, issue 18):

- **scope** — a string given when a run starts (a user, a tenant, a team); episodes are only
  ever retrieved within the caller's scope (``""`` is the default scope of runs started
  without one, a scope like any other).
- **agent**, **task type** — the agent's name, and the task type given to the agent (its name
  by default); a plain workflow run started with a task type or a scope is filed under its
  workflow's name as the agent.
- **episode** — written when a run ends (``ended``), goes to sleep in a wait (``slept``) or
  passes a milestone (``milestone``: a tool call or step succeeds after earlier failures — the
  fix that followed them): what happened, when, under what conditions (agent, task type, tools
  used, an input fingerprint), the outcome and the lesson, with references to the events and
  artifacts it was derived from. Keyed by ``(run_id, boundary)``: ``boundary`` is
  ``KIND@SEQ``, the history seq of the event it was written at.
- **lesson** — derived from the record alone: the steps that failed and their errors, the fix
  that followed, the verifications that passed or failed. A lesson contradicted by a later
  episode of the same scope and task type (a tool that failed now succeeds, or the reverse) is
  superseded: ``superseded_by`` names the newer episode; both stay readable, and retrieval
  returns the newer.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ..store.domain import EPISODE_OWNER_PREFIX

EpisodeKind = Literal["ended", "slept", "milestone"]
KINDS: tuple[str, ...] = ("ended", "slept", "milestone")

#: At most this many distinct words of a query reach the index (the rest add little).
MAX_QUERY_TERMS = 16

_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class Episode:
    """One episode. Times are epoch milliseconds of the store's clock.

    ``conditions``: ``{"agent", "task_type", "tools": [names used], "input_fingerprint"}``;
    ``refs``: ``{"events": [seq, ...], "artifacts": [sha256, ...]}``; ``claims``: what the
    lesson asserts, ``{tool or step: "failed" | "succeeded"}`` — the basis of supersession.
    ``superseded_by``: the episode that contradicted this one, and ``valid_until_ms`` its time —
    when this one stopped being held true (both None while it is).
    ``score``: the relevance of a search hit (higher is better; 0 outside a search).
    """

    episode_id: str
    run_id: str
    boundary: str
    scope: str
    agent: str
    task_type: str
    kind: str
    outcome: str
    summary: str
    lesson: str
    at_seq: int
    created_at_ms: int
    conditions: dict[str, Any] = field(default_factory=dict)
    refs: dict[str, Any] = field(default_factory=dict)
    claims: dict[str, str] = field(default_factory=dict)
    superseded_by: str | None = None
    valid_until_ms: int | None = None
    score: float = 0.0


#: English stop words: the list of PostgreSQL's ``english`` configuration (Snowball's
#: ``english.stop``, 127 words), which drops them from its index. A search leaves them out of
#: the query on both backends (FTS5 indexes them), so both weigh the same words.
_STOP = """
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
she her hers herself it its itself they them their theirs themselves what which who whom
this that these those am is are was were be been being have has had having do does did
doing a an the and but if or because as until while of at by for with about against between
into through during before after above below to from up down in out on off over under again
further then once here there when where why how all any both each few more most other some
such no nor not only own same so than too very s t can will just don should now
"""
STOP_WORDS = frozenset(_STOP.split())


def episode_id_for(run_id: str, boundary: str) -> str:
    """The episode's id: ``RUN:KIND@SEQ`` (deterministic, so a rewrite is the same row)."""
    return f"{run_id}:{boundary}"


def terms(text: str) -> list[str]:
    """The words of ``text`` as the index sees them (letters and digits, lower case), distinct,
    in order, at most :data:`MAX_QUERY_TERMS`. Everything else — quotes, ``*``, ``-``,
    parentheses, ``:`` — is a separator, and operator words (``NEAR``, ``AND``, ``OR``, ``NOT``)
    come out as plain lower-case words: user text never reaches a query as syntax."""
    out: list[str] = []
    for w in _WORD.findall(text.lower()):
        if w not in out:
            out.append(w)
            if len(out) == MAX_QUERY_TERMS:
                break
    return out


@functools.lru_cache(maxsize=8192)
def tag(field_name: str, value: str) -> str:
    """The index token standing for ``field_name = value``: a letter and 20 hex digits of its
    sha256 (a token every tokenizer keeps whole). A collision could only widen what the index
    returns; the exact column is compared as well. (Cached: a writer's scopes, agents and task
    types repeat.)"""
    digest = hashlib.sha256(f"{field_name}\0{value}".encode()).hexdigest()[:20]
    return f"x{field_name[0]}{digest}"


def pair_tag(scope: str, task_type: str) -> str:
    """The token of a scope and task type together: the filter of the context section and of
    most searches, one posting list instead of the intersection of two long ones."""
    return tag("pair", f"{scope}\0{task_type}")


def tags_for(scope: str, agent: str, task_type: str, outcome: str) -> list[str]:
    """The filter tokens an episode is indexed under."""
    return [
        tag("scope", scope),
        tag("agent", agent),
        tag("task_type", task_type),
        tag("outcome", outcome),
        pair_tag(scope, task_type),
    ]


#: The ``blob_refs`` owner ids of episodes (the artifacts they keep from garbage collection,
#: :mod:`.gc`) start with this; no run id does.
OWNER_PREFIX = EPISODE_OWNER_PREFIX


def owner_of(episode_id: str) -> str:
    """The ``blob_refs`` owner id of episode ``episode_id``: ``episode:<episode id>``."""
    return OWNER_PREFIX + episode_id


__all__ = [
    "KINDS",
    "MAX_QUERY_TERMS",
    "OWNER_PREFIX",
    "STOP_WORDS",
    "Episode",
    "EpisodeKind",
    "episode_id_for",
    "owner_of",
    "pair_tag",
    "tag",
    "tags_for",
    "terms",
]
