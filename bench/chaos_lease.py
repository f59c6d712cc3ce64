"""Chaos on leases: do paused workers call effects after their lease was taken over? (issue 16)

PostgreSQL, 6 worker processes (2 runs at once each), a 3 s lease renewed every second, runs of
10 effects each. Every effect is a POST to a plain local HTTP service that counts calls per
idempotency key and knows nothing of fencing tokens; reconcile asks it for the count. For
``--seconds`` a chaos loop picks a random worker every 0.2-0.8 s and either SIGKILLs it (a
fresh worker replaces it) or freezes it with SIGSTOP for 2-6 s (longer than the lease) before
SIGCONT. Then the chaos stops, every run is finished, and the service says how many keys were
called more than once.

``--fenced``: the service refuses a call whose fencing token (the lease epoch, which the
effect takes as ``fencing_token``) is below the highest it has seen for the key — the remedy
for the window no check can close.

``--mode before`` sets ``TORPOR_BENCH_SKIP_EFFECT_LEASE_CHECK=1`` in the workers (the check
right before an effect call is skipped: the code path before issue 16); ``--mode after`` is
the default behaviour. ``--window-ms`` (default 50) widens the instant between an effect's
intent and its call with a delay fault point (``delay:effect.calling``, *before* the lease
check) so that a short run meets enough pauses there; it is the same in both modes.

    uv run python -m bench.chaos_lease --mode before --seconds 60
    uv run python -m bench.chaos_lease --mode after --seconds 60

Results: a Markdown line on stdout and ``bench/results/chaos_lease_<mode>[_fenced].json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from bench.common import ROOT, pg_schema, save

FLOW = """
import json, os, time, urllib.error, urllib.request
import torpor

SERVICE = os.environ["CHAOS_SERVICE"]


def call(i, idempotency_key, fencing_token):
    url = f"{SERVICE}/call?key={idempotency_key}&token={fencing_token}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 409:  # a fencing service refused a stale token: nothing happened
            raise torpor.EffectNotApplied("stale fencing token") from None
        raise


def find(c):
    with urllib.request.urlopen(f"{SERVICE}/count?key={c.idempotency_key}", timeout=10) as r:
        n = json.loads(r.read())["count"]
    return torpor.Applied({"count": n}) if n else torpor.Absent()


@torpor.workflow(name="chaos.flow")
def flow(run, n):
    for i in range(n):
        run.step(f"think{i}", time.sleep, 0.05)
        run.effect(f"e{i}", call, i, reconcile=find)
    return n
"""


class Counts:
    def __init__(self, fenced: bool) -> None:
        self.lock = threading.Lock()
        self.fenced = fenced
        self.calls: Counter[str] = Counter()
        self.highest: dict[str, int] = {}
        self.refused = 0


def serve(counts: Counts) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            q = parse_qs(urlparse(self.path).query)
            key, token = q["key"][0], int(q["token"][0])
            with counts.lock:
                if counts.fenced and token < counts.highest.get(key, 0):
                    counts.refused += 1
                    self.send_response(409)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                counts.highest[key] = max(token, counts.highest.get(key, 0))
                counts.calls[key] += 1
                n = counts.calls[key]
            self._answer({"key": key, "count": n})

        def do_GET(self) -> None:
            key = parse_qs(urlparse(self.path).query)["key"][0]
            with counts.lock:
                n = counts.calls[key]
            self._answer({"key": key, "count": n})

        def log_message(self, *args: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("before", "after"), default="after")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--effects", type=int, default=10)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--window-ms", type=float, default=50)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument(
        "--fenced",
        action="store_true",
        help="The service refuses a call whose fencing token is below the highest it saw.",
    )
    args = ap.parse_args()
    rng = random.Random(args.seed)
    counts = Counts(args.fenced)
    srv = serve(counts)
    tmp = Path(tempfile.mkdtemp(prefix="torpor-chaos-"))
    (tmp / "chaosflow.py").write_text(textwrap.dedent(FLOW))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp), str(ROOT / "src")])
    env["CHAOS_SERVICE"] = f"http://127.0.0.1:{srv.server_address[1]}"
    env.setdefault("TORPOR_SIGNING_KEY", "chaos")
    env["TORPOR_HOME"] = str(tmp / "home")
    env["TORPOR_FAULTS"] = f"delay:effect.calling@*={args.window_ms / 1000:g}"
    if args.mode == "before":
        env["TORPOR_BENCH_SKIP_EFFECT_LEASE_CHECK"] = "1"
    sys.path.insert(0, str(tmp))
    os.environ["CHAOS_SERVICE"] = env["CHAOS_SERVICE"]
    import chaosflow  # noqa: F401  (registers the workflow for starting runs)

    import torpor

    with pg_schema() as url:
        env["TORPOR_DATABASE_URL"] = url
        rt = torpor.Runtime(url)
        for r in range(args.runs):
            rt.start("chaos.flow", args.effects, run_id=f"c{r:04d}")
        rt.close()

        def spawn() -> subprocess.Popen[bytes]:
            cmd = [sys.executable, "-m", "torpor.cli", "worker", "--import", "chaosflow"]
            cmd += ["-c", "2", "--lease-ttl", "3", "--heartbeat", "1"]
            return subprocess.Popen(
                cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )

        workers = [spawn() for _ in range(args.workers)]
        kills = stops = 0
        end = time.monotonic() + args.seconds
        frozen: dict[int, float] = {}
        while time.monotonic() < end:
            time.sleep(rng.uniform(0.2, 0.8))
            now = time.monotonic()
            for pid, until in list(frozen.items()):
                if now >= until:
                    os.kill(pid, signal.SIGCONT)
                    del frozen[pid]
            i = rng.randrange(len(workers))
            w = workers[i]
            if w.pid in frozen:
                continue
            if rng.random() < 0.4:
                w.kill()
                w.wait()
                workers[i] = spawn()
                kills += 1
            else:
                os.kill(w.pid, signal.SIGSTOP)
                frozen[w.pid] = now + rng.uniform(2.0, 6.0)
                stops += 1
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        client = torpor.Client(url)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            open_runs = [r for r in client.runs(limit=100_000) if r.status != "finished"]
            if not open_runs:
                break
            time.sleep(1)
        outcomes = Counter(r.outcome for r in client.runs(limit=100_000))
        client.close()
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
    srv.shutdown()
    keys = len(counts.calls)
    twice = sorted(k for k, n in counts.calls.items() if n > 1)
    expected = args.runs * args.effects
    result = {
        "mode": args.mode,
        "fenced_service": args.fenced,
        "stale_calls_refused": counts.refused,
        "seconds": args.seconds,
        "workers": args.workers,
        "window_ms": args.window_ms,
        "sigkills": kills,
        "sigstops": stops,
        "effect_keys_expected": expected,
        "effect_keys_called": keys,
        "keys_called_more_than_once": len(twice),
        "examples": twice[:10],
        "outcomes": dict(outcomes),
    }
    save(f"chaos_lease_{args.mode}{'_fenced' if args.fenced else ''}", result)
    service = f"fencing ({counts.refused} stale refused)" if args.fenced else "plain"
    print(
        f"| {args.mode} | {service} | {args.seconds:g} s | {kills} SIGKILL, {stops} SIGSTOP | "
        f"{keys} of {expected} keys called | **{len(twice)}** called twice | "
        f"{dict(outcomes)} |"
    )


if __name__ == "__main__":
    main()
