"""Resumable streaming (issue 40): what streaming a reply into a run's stream costs, measured
against its plain peers in the same run.

1. **A 2,000-token reply, streamed vs not.** A loopback server speaking the OpenAI Chat
   Completions wire format produces ``--tokens`` tokens at ``--token-ms`` each: answering
   ``stream: true`` with one server-sent event per token as it is produced, else with the
   whole body once it is done. A workflow makes one recorded model call
   (``OpenAIChatModel(stream="reply")`` vs ``OpenAIChatModel()``); the figure is the wall
   time of the run, the two alternating ``--reps`` times on a fresh store each. Also counted:
   the store writes the stream made (its batches: distinct ``at_ms``) per 50 ms of the
   call (gaps between batches over the time from the first to the last), and the smallest
   gap between two batches but the last (the ``end``, written at once). Goals: ≤ 1.10x the
   unstreamed run; ≤ 1 write per 50 ms.
2. **Delta latency, writer → reader on another connection, vs a bare LISTEN/NOTIFY round
   trip** (PostgreSQL). Bare: one connection sends ``NOTIFY``, another (``LISTEN``) receives
   it. torpor: a delta written by a :class:`~torpor.streams.PartWriter` (after a quiet spell
   longer than the batching interval, so it is written at once) until a
   :class:`~torpor.streams.StreamReader` on a store of its own (other connections) yields it.
   ``--n`` of each, alternating; the ratio of the medians. Goal ≤ 2x.

    uv run python bench/streaming.py [--backends sqlite,postgres] [--tokens 2000] [--reps 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import pg_schema, save, table

import torpor
from torpor.agents.models import Message, OpenAIChatModel, call_model
from torpor.history import RunStarted
from torpor.store import open_store
from torpor.streams import StreamReader, StreamWriter


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    tokens = 2000
    token_s = 0.001


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        n, pace = self.server.tokens, self.server.token_s
        words = [f"w{i} " for i in range(n)]
        base = {"id": "c", "created": 0, "model": "bench", "object": "chat.completion.chunk"}
        if not body.get("stream"):
            end = time.perf_counter() + n * pace
            while time.perf_counter() < end:  # the model "generates" as long as when streamed
                time.sleep(0.001)
            data = json.dumps(
                {
                    **base,
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "".join(words)},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": n + 5},
                }
            ).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def send(obj: Any) -> None:
            raw = f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()
            self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
            self.wfile.flush()

        start = time.perf_counter()
        for i, w in enumerate(words):
            while time.perf_counter() < start + (i + 1) * pace:
                time.sleep(0.0005)
            send(
                {**base, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]}
            )
        send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        send(
            {
                **base,
                "choices": [],
                "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": n + 5},
            }
        )
        send("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


@contextmanager
def model_server(tokens: int, token_ms: float) -> Iterator[str]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.tokens, srv.token_s = tokens, token_ms / 1000
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()
        srv.server_close()


@torpor.workflow(name="bench.stream.reply")
def reply(run: torpor.Run, spec: dict[str, Any]) -> int:
    model = OpenAIChatModel(
        "bench", base_url=spec["url"], api_key="k", stream=spec["stream"], timeout=600
    )
    return len(call_model(run, model, [Message.user("write")]).message.content)


@contextmanager
def store_url(backend: str, tmp: Path, tag: str) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp}/{tag}.db"
    else:
        with pg_schema() as url:
            yield url


def measure_reply(backend: str, tokens: int, token_ms: float, reps: int) -> dict[str, Any]:
    plain: list[float] = []
    streamed: list[float] = []
    writes_per_50ms: list[float] = []
    gaps: list[int] = []
    with model_server(tokens, token_ms) as url, tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        for rep in range(reps + 1):  # the first round warms up (imports, connections)
            for mode in ("plain", "streamed"):
                with store_url(backend, Path(d), f"{mode}{rep}") as db, torpor.Runtime(db) as rt:
                    spec = {"url": url, "stream": "reply" if mode == "streamed" else None}
                    t0 = time.perf_counter()
                    res = rt.run("bench.stream.reply", spec, run_id="r")
                    took = time.perf_counter() - t0
                    assert res.outcome == "succeeded", res
                    if rep == 0:
                        continue
                    (plain if mode == "plain" else streamed).append(took)
                    if mode == "streamed":
                        items = rt.store.stream_items("r", "reply", limit=1_000_000)
                        # One at_ms per batch (when it was taken). The last batch (the end, with
                        # the last deltas) is written at once: the rate is of those before it.
                        at = sorted({i.at_ms for i in items})[:-1]
                        span_s = max(0.05, (at[-1] - at[0]) / 1000)
                        writes_per_50ms.append((len(at) - 1) / (span_s / 0.05))
                        gaps.extend(b - a for a, b in itertools.pairwise(at))
    ratios = [s / p for s, p in zip(streamed, plain, strict=True)]
    return {
        "plain_s": plain,
        "streamed_s": streamed,
        "ratio_median": statistics.median(ratios),
        "writes_per_50ms_max": max(writes_per_50ms),
        "batch_gap_min_ms": min(gaps, default=0),
        "holds": statistics.median(ratios) <= 1.10 and max(writes_per_50ms) <= 1.0,
    }


def measure_latency(url: str, n: int) -> dict[str, Any]:
    import psycopg

    bare: list[float] = []
    ours: list[float] = []
    sender = psycopg.connect(url, autocommit=True)
    listener = psycopg.connect(url, autocommit=True)
    listener.execute("LISTEN bench_bare")
    wstore, rstore = open_store(url), open_store(url)
    wstore.create_run("lat", RunStarted(workflow="wf", version="1"))
    lease = wstore.acquire_lease("lat", "bench:1:x", ttl_s=600)
    writer = StreamWriter(wstore, "lat", "reply", owner=lease.owner, epoch=lease.epoch)
    got: dict[int, float] = {}
    arrived = threading.Condition()

    def read() -> None:
        for item in StreamReader(rstore, "lat", "reply", poll_s=0.5):
            with arrived:
                got[item.offset] = time.perf_counter()
                arrived.notify_all()
            if item.kind == "end":
                return

    t = threading.Thread(target=read, daemon=True)
    t.start()
    part = writer.part("model@1")
    part.write("warm-up ")
    try:
        for i in range(n):
            time.sleep(0.06)  # quiet for longer than the batching interval: written at once
            t0 = time.perf_counter()
            sender.execute("NOTIFY bench_bare, 'x'")
            for _ in listener.notifies(timeout=10, stop_after=1):
                bare.append(time.perf_counter() - t0)
            time.sleep(0.06)
            t0 = time.perf_counter()
            part.write(f"d{i} ")
            with arrived:
                arrived.wait_for(lambda want=i + 2: len(got) >= want, timeout=10)
            ours.append(got[i + 2] - t0)
        part.end()
        t.join(10)
    finally:
        sender.close()
        listener.close()
        wstore.close()
        rstore.close()
    return {
        "bare_ms": [x * 1000 for x in bare],
        "stream_ms": [x * 1000 for x in ours],
        "bare_p50_ms": statistics.median(bare) * 1000,
        "stream_p50_ms": statistics.median(ours) * 1000,
        "ratio_p50": statistics.median(ours) / statistics.median(bare),
        "holds": statistics.median(ours) / statistics.median(bare) <= 2.0,
    }


def run(backends: list[str], tokens: int, token_ms: float, reps: int, n: int) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for b in backends:
        res[b] = {"reply": measure_reply(b, tokens, token_ms, reps)}
        if b == "postgres":
            with pg_schema() as url:
                open_store(url).close()  # the schema
                res[b]["latency"] = measure_latency(url, n)
    return res


def report(res: dict[str, Any]) -> str:
    rows = []
    for b, r in res.items():
        rep = r["reply"]
        lat = r.get("latency")
        rows.append(
            [
                b,
                f"{statistics.median(rep['plain_s']):.3f} s",
                f"{statistics.median(rep['streamed_s']):.3f} s",
                f"{rep['ratio_median']:.3f}x",
                f"{rep['writes_per_50ms_max']:.2f} (min gap {rep['batch_gap_min_ms']} ms)",
                "holds" if rep["holds"] else "**short**",
                f"{lat['bare_p50_ms']:.2f} ms" if lat else "-",
                f"{lat['stream_p50_ms']:.2f} ms" if lat else "-",
                (f"{lat['ratio_p50']:.2f}x ({'holds' if lat['holds'] else '**short**'})")
                if lat
                else "-",
            ]
        )
    head = [
        "backend",
        "reply, not streamed",
        "reply, streamed",
        "ratio (≤ 1.10x)",
        "writes / 50 ms (≤ 1)",
        "reply goals",
        "bare NOTIFY p50",
        "delta p50",
        "ratio (≤ 2x)",
    ]
    return table(head, rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--token-ms", type=float, default=1.0, help="the model's pace per token")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--n", type=int, default=50, help="latency samples of each kind")
    args = ap.parse_args()
    res = run(args.backends.split(","), args.tokens, args.token_ms, args.reps, args.n)
    print("Streaming: a 2,000-token reply streamed vs not; delta latency vs LISTEN/NOTIFY\n")
    print(report(res))
    path = save("streaming", {"results": res, "args": vars(args)})
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
