"""The OpenAI-compatible embeddings adapter (issue 32) against a real HTTP server on loopback,
and embedding calls recorded in a run like model calls: paid once, counted in the budget,
replayed on resume."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import torpor
from torpor.agents.models.embeddings import embed_recorded
from torpor.episodes import EpisodeStore
from torpor.episodes.embed import HTTPEmbedder
from torpor.errors import (
    ModelRateLimitedError,
    ModelRequestError,
    ModelUnavailableError,
)
from torpor.store import open_store

KEY = "sk-test-secret-key-123"


@contextmanager
def server(reply: Callable[[dict[str, Any]], tuple[int, Any]]) -> Iterator[dict[str, Any]]:
    """A real HTTP server on 127.0.0.1 answering ``POST /v1/embeddings`` with ``reply(body)``;
    yields ``{"url", "requests": [(path, headers, body)]}``."""
    seen: dict[str, Any] = {"requests": []}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            seen["requests"].append((self.path, dict(self.headers), body))
            status, answer = reply(body)
            data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            if status == 429:
                self.send_header("retry-after", "2")
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    seen["url"] = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        yield seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def embeddings(body: dict[str, Any]) -> tuple[int, Any]:
    """Vectors from the text's length and vowels, listed in reverse order (the client must
    order them by ``index``)."""
    data = [
        {"object": "embedding", "index": i, "embedding": [float(len(t)), float(t.count("a")), 1.0]}
        for i, t in enumerate(body["input"])
    ]
    usage = {"prompt_tokens": 7 * len(body["input"]), "total_tokens": 7 * len(body["input"])}
    return 200, {"object": "list", "data": data[::-1], "model": body["model"], "usage": usage}


def test_vectors_come_back_in_order_with_usage() -> None:
    with server(embeddings) as srv:
        e = HTTPEmbedder("emb-small", base_url=srv["url"], api_key=KEY)
        got = e.embed(["a", "banana", ""])
        path, headers, body = srv["requests"][0]
    assert path == "/v1/embeddings"
    assert headers["Authorization"] == f"Bearer {KEY}"
    assert body == {"model": "emb-small", "input": ["a", "banana", ""]}
    assert got == [[1.0, 1.0, 1.0], [6.0, 3.0, 1.0], [0.0, 0.0, 1.0]]
    assert e.last_usage == {"input_tokens": 21}
    assert e.embed([]) == []


@pytest.mark.parametrize(
    ("status", "answer", "error", "says"),
    [
        (429, {"error": {"message": "slow down"}}, ModelRateLimitedError, "rate limited"),
        (503, {"error": {"message": "overloaded"}}, ModelUnavailableError, "HTTP 503"),
        (401, {"error": {"message": f"bad key {KEY}"}}, ModelRequestError, "HTTP 401"),
        (200, {"data": [{"index": 0}]}, ModelRequestError, "holds no embeddings"),
        (200, {"data": []}, ModelRequestError, "asked for 1 embeddings"),
        (200, b"not json", ModelUnavailableError, "Expecting value"),
    ],
)
def test_errors_name_the_model_and_never_the_key(
    status: int, answer: Any, error: type[Exception], says: str
) -> None:
    with server(lambda body: (status, answer)) as srv:
        e = HTTPEmbedder("emb-small", base_url=srv["url"], api_key=KEY)
        with pytest.raises(error, match=says) as info:
            e.embed(["x"])
    assert "emb-small" in str(info.value) and KEY not in str(info.value)
    if status == 429:
        assert info.value.retry_after == 2.0  # type: ignore[attr-defined]


def test_a_server_that_is_not_there_is_unavailable() -> None:
    with server(embeddings) as srv:
        url = srv["url"]
    with pytest.raises(ModelUnavailableError, match=r"cannot reach http://127\.0\.0\.1"):
        HTTPEmbedder("emb-small", base_url=url, timeout_s=10).embed(["x"])


def test_episodes_written_and_found_through_the_endpoint(db_url: str) -> None:
    from test_episodes_hybrid import THE_DECISION, ConceptEmbedder, seed

    concepts = ConceptEmbedder()

    def reply(body: dict[str, Any]) -> tuple[int, Any]:
        vecs = concepts.embed(body["input"])
        data = [{"index": i, "embedding": list(v)} for i, v in enumerate(vecs)]
        return 200, {"data": data, "usage": {"prompt_tokens": 1}}

    store = open_store(db_url)
    try:
        with server(reply) as srv:
            e = HTTPEmbedder("concepts", base_url=srv["url"])
            seed(store, e)
            assert store.count_episode_vectors(e.model_id) == 41
            hits = EpisodeStore(store, embedder=e).search("which replica approach", scope="acme")
        assert hits[0].summary == THE_DECISION
    finally:
        store.close()


SERVER_URL: list[str] = [""]


@torpor.workflow(name="i32.embed", version="1")
def embed_twice(run: Any, texts: list[str]) -> dict[str, Any]:
    e = HTTPEmbedder("emb-small", base_url=SERVER_URL[0])
    first = embed_recorded(run, e, texts, price_per_mtok_usd=0.02)
    run.wait_for("go")
    second = embed_recorded(run, e, texts[:1])
    return {"first": first, "second": second}


def test_recorded_embedding_calls_are_paid_once_and_replayed(db_url: str) -> None:
    rt = torpor.Runtime(db_url)
    try:
        with server(embeddings) as srv:
            SERVER_URL[0] = srv["url"]
            r = rt.run(embed_twice, ["a", "banana"], run_id="e1")
            assert r.status == "waiting" and len(srv["requests"]) == 1
            torpor.Client(db_url).signal("e1", "go")
            done = rt.resume("e1")
            assert done.outcome == "succeeded"
            # The first call was replayed from the record; only the second reached the server.
            assert [b["input"] for _, _, b in srv["requests"]] == [["a", "banana"], ["a"]]
        called = [e.payload for e in rt.store.iter_events("e1") if e.type == "model_called"]
        assert [(c.model, c.input_tokens, c.output_tokens) for c in called] == [  # type: ignore[attr-defined]
            ("openai-compatible/emb-small", 14, 0),
            ("openai-compatible/emb-small", 7, 0),
        ]
        assert called[0].cost_usd == pytest.approx(14 * 0.02 / 1e6)  # type: ignore[attr-defined]
        first = done.result["first"] if isinstance(done.result, dict) else None
        assert first is not None and len(first) == 2
        assert first[1] == pytest.approx([6 / 46**0.5, 3 / 46**0.5, 1 / 46**0.5])  # unit length
    finally:
        rt.close()
