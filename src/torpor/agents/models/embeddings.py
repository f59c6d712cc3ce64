"""Embedding calls as recorded steps, like model calls (:mod:`.record`): a resumed run never
pays twice for texts it already embedded, and the call's tokens and cost count toward the
run's budget.

:func:`embed_recorded` is a ``read`` step named ``embed`` (``embed#2``, … in order). Once the
call returned, its step records the model, a hash of the texts, the vectors (float32,
base64) and the token usage (a ``model_called`` event with no output tokens, the event the
budget is summed from). On replay the recorded vectors are returned without calling the
embedder; texts that differ from the recorded ones are non-determinism, reported instead of
guessed at. The embedders are :mod:`torpor.episodes.embed`'s (an OpenAI-compatible
``/v1/embeddings`` endpoint: :class:`~torpor.episodes.embed.HTTPEmbedder`).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from ... import serde
from ...episodes.embed import Embedder, normalized
from ...errors import NonDeterminismError
from ...history import ModelCalled, Payload
from ...run import Run
from ...store.episode_vectors import pack, unpack


def texts_hash(model_id: str, texts: Sequence[str]) -> str:
    """sha256 of the canonical JSON of the model id and the texts."""
    return serde.hash_value({"model": model_id, "texts": list(texts)})


def embed_recorded(
    run: Run,
    embedder: Embedder,
    texts: Sequence[str],
    *,
    name: str = "embed",
    price_per_mtok_usd: float = 0.0,
) -> list[list[float]]:
    """Embed ``texts`` with ``embedder`` as a recorded step of ``run``; return one unit
    vector per text (the recorded ones on replay). ``price_per_mtok_usd``: the cost of a
    million input tokens, recorded as the call's ``cost_usd``. Raises the embedder's errors
    (nothing is recorded; the next execution calls again) and NonDeterminismError when a
    replayed step's texts differ from the recorded ones."""
    h = texts_hash(embedder.model_id, texts)

    def work(sid: str) -> tuple[Any, list[Payload]]:
        vectors = [pack(normalized(v)) for v in embedder.embed(list(texts))]
        usage = getattr(embedder, "last_usage", None) or {}
        tokens = max(0, int(usage.get("input_tokens", 0)))
        called = ModelCalled(
            step_id=sid,
            model=embedder.model_id,
            prompt_hash=h,
            input_tokens=tokens,
            output_tokens=0,
            cost_usd=tokens * price_per_mtok_usd / 1e6,
        )
        result = {"texts_hash": h, "vectors": [base64.b64encode(v).decode() for v in vectors]}
        return result, [called]

    rec = run.journal.record(name, work, purpose=f"embedding call ({embedder.model_id})")
    result = rec.result or {}
    if not rec.new and result.get("texts_hash") != h:
        raise NonDeterminismError(
            f"run {run.run_id!r} step {rec.step_id!r}: the recorded embedding call had texts "
            f"hash {str(result.get('texts_hash'))[:12]}, the replay has {h[:12]}; the code "
            "that chooses the texts changed since the call was recorded"
        )
    return [list(unpack(base64.b64decode(v))) for v in result.get("vectors", [])]


__all__ = ["embed_recorded", "texts_hash"]
