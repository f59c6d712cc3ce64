"""Streams of a run (issue 40): ordered, resumable outputs — a model's reply as it is written,
a workflow's progress — persisted in batches with offsets, readable from any offset and then
live, and kept apart from the run's history (resume never reads them: G8).

- Writing: ``run.stream("progress").write(obj)`` (:class:`RunStream`); a model adapter made
  with ``stream="reply"`` streams each call's deltas to that stream of the run
  (:func:`torpor.agents.models.call_model`); :class:`StreamWriter` / :class:`PartWriter`
  underneath (batches by time and size, fenced by the lease, scrubbed of secrets with a
  held-back tail: :class:`HoldBack`).
- Reading: :class:`StreamReader` (``torpor.Client().stream(run_id, "reply", after=…)``, sync
  and async), ``torpor watch RUN``, the console's server-sent events; :func:`fold` makes items
  into the :class:`Part` s a person reads (a retracted part is dropped: :func:`shown`).

The items' meaning (``data``, ``end``, ``retract``) is in :mod:`.items`.
"""

from .holdback import HoldBack
from .items import Part, StreamItem, fold, shown
from .reader import StreamReader
from .run_stream import RunStream, open_part, writer_for
from .writer import PartWriter, StreamWriter

#: The stream a model adapter's deltas go to unless it names another.
REPLY = "reply"

__all__ = [
    "REPLY",
    "HoldBack",
    "Part",
    "PartWriter",
    "RunStream",
    "StreamItem",
    "StreamReader",
    "StreamWriter",
    "fold",
    "open_part",
    "shown",
    "writer_for",
]
