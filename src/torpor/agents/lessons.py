"""An agent's lesson phrased by a model (issue 18): at the end of a run that had failures, one
recorded model call turns the lesson read back from the record (:func:`torpor.episodes.derive.
lesson_of`) into a few sentences, recorded as the step ``episode-lesson``; the run's episodes
put it first ("in short: …"), before the record's own lines, which stay as the evidence.

Optional (``Agent(lesson_model=...)``); without it a lesson is the record's lines alone. The
call is a recorded step like any model call: a resumed run reads it back, never pays twice,
and the text it is given stops at the phrasing step, so it is the same on replay.
"""

from __future__ import annotations

from ..episodes.derive import PHRASED_STEP, PHRASING_PREFIX, lesson_of
from ..episodes.store import EpisodeStore
from .context import Context
from .models.base import Message, Model

LESSON_INSTRUCTIONS = (
    "You write the lesson of an agent's run for the next run of the same task. In at most "
    "three sentences: which approach failed and why, and what worked instead. Use only the "
    "record you are given; do not invent causes."
)


def phrase_lesson(ctx: Context, model: Model) -> str:
    """Phrase the run's lesson with ``model`` (a recorded step); ``""`` when the run is not
    filed for episodes or nothing failed."""
    run = ctx.run
    store = run.journal.store
    found = EpisodeStore(store).filing(run.run_id)
    if found is None:
        return ""
    record = lesson_of(store.iter_events(run.run_id), found[0])
    if not record:
        return ""
    resp = ctx.call_model(
        model,
        [Message.system(LESSON_INSTRUCTIONS), Message.user(record)],
        name=f"{PHRASING_PREFIX}-model",
    )
    text = resp.message.content.strip()
    rec = run.journal.record(
        PHRASED_STEP, lambda sid: ({"lesson": text}, []), purpose="the lesson, phrased by a model"
    )
    return str(rec.result.get("lesson", "")) if isinstance(rec.result, dict) else ""


__all__ = ["LESSON_INSTRUCTIONS", "phrase_lesson"]
