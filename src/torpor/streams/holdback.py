"""Scrubbing a text that arrives in pieces (G12): a secret split across two deltas.

A :class:`~torpor.scrub.Scrubber` finds a secret only in a text that holds it whole. A model's
reply arrives a few characters at a time, so :class:`HoldBack` keeps back the last
``longest - 1`` characters of what it was given (``longest``: the longest encoded form of any
secret it looks for, :func:`torpor.scrub.encodings`) and lets out only text before that: any
form that is not yet complete begins inside the held-back tail, so no prefix of it leaves
early. A form that straddles the cut is let out whole, scrubbed. With no secret known it lets
everything out at once (nothing to hold).
"""

from __future__ import annotations

from ..scrub import Scrubber

__all__ = ["HoldBack"]


class HoldBack:
    """``feed(delta) -> text to let out`` (scrubbed), then ``flush() -> the rest``."""

    def __init__(self, scrubber: Scrubber):
        self.scrubber = scrubber
        self.hold = max(0, scrubber.longest - 1)
        self.pending = ""

    def feed(self, delta: str) -> str:
        if not self.hold:
            return self.scrubber.text(delta) if self.scrubber.pairs else delta
        pending = self.pending + delta
        cut = len(pending) - self.hold
        if cut <= 0:
            self.pending = pending
            return ""
        for start, end in self.scrubber.spans(pending):
            if start < cut < end:
                cut = end  # a form across the cut goes out whole (scrubbed)
                break
            if start >= cut:
                break
        out, self.pending = pending[:cut], pending[cut:]
        return self.scrubber.text(out)

    def flush(self) -> str:
        out, self.pending = self.scrubber.text(self.pending), ""
        return out

    def discard(self) -> None:
        """Drop what is held (the part was abandoned)."""
        self.pending = ""
