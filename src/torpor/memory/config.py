"""How an agent's working memory is sized: :class:`Memory`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import BadInputError
from .context import SectionProvider

if TYPE_CHECKING:
    from .compaction import Summarizer


@dataclass(frozen=True)
class Memory:
    """An agent's working memory (``Agent(..., memory=Memory(...))``).

    ``budget_tokens``: the whole context of a model call (messages and tool definitions), by
    the estimate of :mod:`torpor.memory.tokens`; ``buffer_share``: the part of it the working
    buffer may hold before compaction is due, once it passes ``compact_at`` of that part
    (compaction then folds the oldest settled units into the summary until the buffer is under
    ``compact_to`` of its part); ``summary_share``: the part of the budget the running summary
    takes before the sections after it (buffer, plan, checkpoint …) take theirs — it then grows
    into whatever they leave unused, its least relevant lines left out first (the summary
    keeps at most ``budget_tokens`` of lines); ``result_chars``: the longest tool result the
    buffer keeps, in characters, and at most a third of the buffer's part
    (:attr:`result_clip`; a longer one keeps its head and tail and the clip names the facts of
    its middle; its facts are found in the whole of it); ``summarizer``: ``None`` for the
    deterministic extractive summarizer, or a :class:`~torpor.memory.ModelSummarizer`;
    ``sections``: providers of extra sections (:data:`~torpor.memory.SectionProvider`, e.g.
    episodes); ``artifact_chars``: longest excerpt of an artifact the next step needs;
    ``recall_share``: the most of the budget the ``recall`` section takes — the fact-ledger
    records and past turns relevant to the current step (:mod:`torpor.memory.recall`; 0: no
    recall).
    """

    budget_tokens: int = 16_000
    buffer_share: float = 0.5
    compact_at: float = 0.8
    compact_to: float = 0.5
    summary_share: float = 0.25
    summarizer: Summarizer | None = None
    sections: Sequence[SectionProvider] = field(default_factory=tuple)
    artifact_chars: int = 2000
    result_chars: int = 8000
    recall_share: float = 0.12

    def __post_init__(self) -> None:
        if self.budget_tokens < 256:
            raise BadInputError(f"Memory(budget_tokens={self.budget_tokens}): at least 256")
        for name in ("buffer_share", "compact_at", "compact_to", "summary_share"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise BadInputError(f"Memory({name}={v}): must be in (0, 1]")
        if self.result_chars < 200:
            raise BadInputError(f"Memory(result_chars={self.result_chars}): at least 200")
        if self.compact_to >= self.compact_at:
            raise BadInputError(
                f"Memory(compact_to={self.compact_to}) must be below compact_at={self.compact_at}"
            )
        if not 0 <= self.recall_share <= 0.5:
            raise BadInputError(f"Memory(recall_share={self.recall_share}): must be in [0, 0.5]")
        if self.buffer_share + self.summary_share > 1:
            raise BadInputError("Memory: buffer_share + summary_share must not exceed 1")

    @property
    def buffer_tokens(self) -> int:
        """The working buffer's part of the budget."""
        return int(self.budget_tokens * self.buffer_share)

    @property
    def summary_tokens(self) -> int:
        """The summary's part of the budget before the lower-priority sections take theirs
        (it grows past it into what they leave)."""
        return int(self.budget_tokens * self.summary_share)

    @property
    def recall_tokens(self) -> int:
        """The most the ``recall`` section takes, in tokens."""
        return int(self.budget_tokens * self.recall_share)

    @property
    def result_clip(self) -> int:
        """The clip applied to a tool result in the buffer, in characters: ``result_chars``,
        but at most a third of the buffer's part (at two characters a token, digits counted
        twice), so one result never crowds the summary out of a small budget."""
        return max(200, min(self.result_chars, self.buffer_tokens * 2 // 3))

    @property
    def summary_keep_tokens(self) -> int:
        """The most the running summary keeps (the whole budget: more could never be sent)."""
        return self.budget_tokens
