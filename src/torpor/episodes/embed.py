"""Embedders: text to vectors, for finding episodes by meaning (:mod:`.hybrid`).

An :class:`Embedder` has a ``model_id`` (which names its vectors in the store: vectors of two
models are never compared) and ``embed(texts) -> [vector]``. Two ship with torpor:

- :class:`WordLlamaEmbedder` — the default, offline: ``wordllama``'s static 256-dimension
  model (``l2_supercat_256``), whose weights and tokenizer ship inside the installed wheel
  (``pip install 'torpor[embed]'``). It is loaded from the package's own folder with
  downloads disabled (``WordLlama.load(cache_dir=<package folder>, disable_download=True)``:
  the package looks for its tokenizer in ``wordllama/tokenizer/`` but ships it in
  ``tokenizers/``, and would otherwise fetch it), so nothing is downloaded at run time.
- :class:`HTTPEmbedder` — any OpenAI-compatible ``POST /v1/embeddings`` endpoint (OpenAI,
  vLLM, llama.cpp server, Ollama, gateways), stdlib HTTP only. Inside a run, record its calls
  like model calls with :func:`torpor.agents.models.embeddings.embed_recorded`.

:func:`embedder_from_env` reads ``TORPOR_EMBEDDER`` (unset or ``none``: no embedder, search is
lexical; ``wordllama``; ``openai``: :class:`HTTPEmbedder` configured by
``TORPOR_EMBEDDER_URL``, ``TORPOR_EMBEDDER_MODEL`` and ``TORPOR_EMBEDDER_API_KEY`` or
``OPENAI_API_KEY``).
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..errors import (
    ConfigError,
    ModelError,
    ModelRateLimitedError,
    ModelRequestError,
    ModelTimeoutError,
    ModelUnavailableError,
)

#: The wordllama configuration and dimension the default embedder loads (the wheel's weights).
WORDLLAMA_CONFIG = "l2_supercat"
WORDLLAMA_DIM = 256


@runtime_checkable
class Embedder(Protocol):
    """Text to vectors. ``model_id`` names the model (and its vectors in the store);
    ``embed(texts)`` returns one vector (a sequence of floats, any length, the same for every
    text) per text, in order. Vectors need not be unit length (they are normalized before
    they are stored or compared). Errors: a :class:`~torpor.errors.TorporError` subclass."""

    model_id: str

    def embed(self, texts: Sequence[str]) -> list[Sequence[float]]: ...


def normalized(vec: Sequence[float]) -> list[float]:
    """``vec`` scaled to unit length (a zero vector stays zero)."""
    norm = math.sqrt(sum(x * x for x in vec))
    return [x / norm for x in vec] if norm > 0 else [0.0 for _ in vec]


class WordLlamaEmbedder:
    """The offline default: wordllama's ``l2_supercat_256`` static model, loaded from the
    installed package (nothing downloaded; ConfigError naming the extra when wordllama is not
    installed, or when the installed package lacks its weights). Loaded on first use (~0.2-1
    s), then shared by every instance in the process."""

    model_id = f"wordllama/{WORDLLAMA_CONFIG}_{WORDLLAMA_DIM}"

    def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
        """One 256-float unit vector per text."""
        if not texts:
            return []
        return list(_wordllama().embed(list(texts), norm=True))  # numpy float32 rows


def package_folder() -> Path:
    """The installed ``wordllama`` package's folder (its weights are in ``weights/``, its
    tokenizer in ``tokenizers/``). ConfigError when wordllama is not installed."""
    try:
        import wordllama
    except ImportError as e:
        raise ConfigError(
            "the wordllama embedder needs the embed extra: pip install 'torpor[embed]'"
        ) from e
    return Path(wordllama.__file__).resolve().parent


@functools.cache
def _wordllama() -> Any:
    folder = package_folder()
    from wordllama import WordLlama

    try:
        return WordLlama.load(
            config=WORDLLAMA_CONFIG, dim=WORDLLAMA_DIM, cache_dir=folder, disable_download=True
        )
    except FileNotFoundError as e:
        raise ConfigError(
            f"the wordllama package in {folder} lacks its model files ({e}); reinstall "
            "'torpor[embed]' (nothing is downloaded at run time)"
        ) from e


class HTTPEmbedder:
    """An OpenAI-compatible embeddings endpoint: ``POST {base_url}/embeddings`` with
    ``{"model", "input": [texts]}``, answered ``{"data": [{"index", "embedding"}], "usage":
    {"prompt_tokens"}}``. ``base_url`` ends with ``/v1`` (e.g. ``http://127.0.0.1:8080/v1``);
    ``timeout_s`` per request. After each call ``last_usage`` holds ``{"input_tokens": n}``
    (what a recorded call sums into the budget).

    Errors (the model errors of :mod:`torpor.errors`, naming the model, never the key):
    ModelRateLimitedError (429), ModelUnavailableError (connection refused/reset, 5xx),
    ModelTimeoutError, ModelRequestError (other 4xx, or an answer that is not embeddings)."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        timeout_s: float = 30.0,
        dimensions: int | None = None,
    ):
        self.model = model
        self.model_id = f"openai-compatible/{model}"
        self.base_url = base_url.rstrip("/")
        self._key = api_key
        self.timeout_s = timeout_s
        self.dimensions = dimensions
        self.last_usage: dict[str, int] = {"input_tokens": 0}

    def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
        """One vector per text, in order (the server's ``index`` decides the order)."""
        if not texts:
            return []
        body: dict[str, Any] = {"model": self.model, "input": list(texts)}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        import urllib.request  # lazily: `import torpor` stays fast

        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        req = urllib.request.Request(
            self.base_url + "/embeddings", json.dumps(body).encode(), headers, method="POST"
        )
        answer = self._send(req)
        try:
            data = sorted(answer["data"], key=lambda d: int(d["index"]))
            vectors = [[float(x) for x in d["embedding"]] for d in data]
        except (KeyError, TypeError, ValueError) as e:
            raise ModelRequestError(self.model, f"the answer holds no embeddings ({e!r})") from e
        if len(vectors) != len(texts):
            raise ModelRequestError(
                self.model, f"asked for {len(texts)} embeddings, the answer holds {len(vectors)}"
            )
        usage = answer.get("usage") or {}
        self.last_usage = {"input_tokens": int(usage.get("prompt_tokens") or 0)}
        return list(vectors)

    def _send(self, req: Any) -> Any:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode("utf-8", "replace")
            if self._key:  # a server that echoes the key never gets it into an error
                detail = detail.replace(self._key, "[key]")
            if e.code == 429:
                after = e.headers.get("retry-after")
                raise ModelRateLimitedError(
                    self.model,
                    f"rate limited (429): {detail}",
                    retry_after=float(after)
                    if after and after.replace(".", "").isdigit()
                    else None,
                ) from None
            cls: type[ModelError] = ModelUnavailableError if e.code >= 500 else ModelRequestError
            raise cls(self.model, f"HTTP {e.code}: {detail}", status=e.code) from None
        except TimeoutError as e:
            raise ModelTimeoutError(self.model, f"no answer within {self.timeout_s} s") from e
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise ModelTimeoutError(self.model, f"no answer within {self.timeout_s} s") from e
            raise ModelUnavailableError(
                self.model, f"cannot reach {self.base_url}: {e.reason}"
            ) from e
        except (ConnectionError, json.JSONDecodeError) as e:
            raise ModelUnavailableError(self.model, f"{self.base_url}: {e}") from e


def embedder_from_env(env: Mapping[str, str] | None = None) -> Embedder | None:
    """The embedder ``TORPOR_EMBEDDER`` names (see the module docstring), or None for none.
    ConfigError for an unknown name (naming it and the choices)."""
    env = os.environ if env is None else env
    name = env.get("TORPOR_EMBEDDER", "").strip().lower()
    if name in ("", "none", "off"):
        return None
    if name == "wordllama":
        return WordLlamaEmbedder()
    if name == "openai":
        return HTTPEmbedder(
            env.get("TORPOR_EMBEDDER_MODEL", "text-embedding-3-small"),
            base_url=env.get("TORPOR_EMBEDDER_URL", "https://api.openai.com/v1"),
            api_key=env.get("TORPOR_EMBEDDER_API_KEY") or env.get("OPENAI_API_KEY"),
        )
    raise ConfigError(
        f"TORPOR_EMBEDDER={env.get('TORPOR_EMBEDDER')!r} is not an embedder: "
        "use wordllama, openai or none"
    )


__all__ = [
    "WORDLLAMA_CONFIG",
    "WORDLLAMA_DIM",
    "Embedder",
    "HTTPEmbedder",
    "WordLlamaEmbedder",
    "embedder_from_env",
    "normalized",
    "package_folder",
]
