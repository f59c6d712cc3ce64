"""The labelled set of ``bench/episodes_hybrid.py`` (issue 32): decisions, failures and
instructions an agent may record, each with a question asking for it in other words. Written
by the bench's author, so it could be made to favour either ranking: the bench sets no target
on it.

The distractors (issue 31): English records of the same kinds about other things
(:func:`distractors`, templates filled from word pools by a seeded generator), and the 30
answers written at seeded places among them (:func:`labelled_episodes`). Until then the
distractors were the synthetic workload's Zipf pseudo-words, written after every answer: any
English word — a stop word ("we", "did", "the") included — told an answer from a distractor,
so when stop words left the query (both backends, issue 31) the answers stopped being found
for a reason that says nothing about ranking, and a filter's most recent episodes were never
answers. Now every episode is English, stop words are shared by all of them, and recency tells
nothing. The pools were written once, before measuring, and not changed after.

``uv run python bench/episodes_labelled.py``: lexical recall@10 on both backends (no
embedder; seconds).
"""

from __future__ import annotations

import random

#: (episode text, a question asking for it in other words). Written for this bench; see the
#: module docstring.
LABELLED: list[tuple[str, str]] = [
    (
        "Decision: use the brisk mirror strategy for the release",
        "which mirror approach did we pick",
    ),
    (
        "Deploy failed: connection refused on port 5432 of the staging database",
        "why could the rollout not reach postgres",
    ),
    (
        "Instruction from Dana: never push to main on Fridays",
        "what did Dana say about weekend merges",
    ),
    ("The invoice service times out when the batch exceeds 500 rows", "what makes billing hang"),
    (
        "Switched the cache from Redis to an in-process LRU to cut latency",
        "why did we drop the key-value server",
    ),
    (
        "Approach B failed: the vendor API rejects requests without an idempotency header",
        "why was the supplier endpoint refusing our calls",
    ),
    ("Customer Acme asked for reports in CSV rather than PDF", "what file format does Acme want"),
    (
        "Rotated the signing key after the laptop was stolen",
        "why did we replace the cryptographic credentials",
    ),
    ("The nightly backup job writes to bucket archive-eu-west", "where do the overnight copies go"),
    (
        "Tests are flaky because the mock clock drifts under load",
        "why do unit checks fail at random",
    ),
    (
        "Decision: postpone the migration to Kubernetes until Q3",
        "when will we move to container orchestration",
    ),
    (
        "Use Python 3.11 for the build image; 3.12 breaks the numpy wheel",
        "which interpreter version should the docker image have",
    ),
    (
        "The marketing site is hosted on Netlify, the app on Fly.io",
        "where does the landing page live",
    ),
    (
        "Commitment: send the security review to the auditor by Monday",
        "what did we promise the compliance inspector",
    ),
    (
        "The OCR step misreads invoices scanned below 200 dpi",
        "why does text extraction get bills wrong",
    ),
    (
        "Failed approach: compressing logs with zstd level 19 took too long",
        "why did we give up on maximum compression",
    ),
    (
        "Ticket PROJ-4412 tracks the memory leak in the worker pool",
        "which issue follows the process pool using too much RAM",
    ),
    (
        "Instruction: all emails to customers must be reviewed by legal",
        "who has to approve outgoing client mail",
    ),
    (
        "The GPU node pool is scaled to zero at night to save money",
        "how do we cut the graphics card bill overnight",
    ),
    (
        "Decision: rename the CLI command 'sync' to 'pull'",
        "what is the new name of the synchronise subcommand",
    ),
    (
        "Rate limit of the search API is 60 requests per minute",
        "how many queries a minute does the lookup service allow",
    ),
    (
        "The Spanish translation was done by an external agency",
        "who translated the app into Spanish",
    ),
    (
        "Retried the payment three times, then the card was declined",
        "what happened when we charged the customer",
    ),
    (
        "Removed the feature flag for dark mode after full rollout",
        "why is the night theme toggle gone",
    ),
    (
        "Disk on build-runner-3 filled up because of stale Docker layers",
        "why did the CI machine run out of space",
    ),
    (
        "The mobile app crashes on Android 9 when the camera opens",
        "what breaks on old phones when taking a photo",
    ),
    (
        "Decision: keep the monolith and split out only the billing module",
        "did we choose microservices",
    ),
    ("Sarah prefers to be contacted on Slack, not by phone", "how should we reach Sarah"),
    ("The data warehouse refresh starts at 02:00 UTC", "when does the analytics database reload"),
    (
        "Upgrading OpenSSL fixed the handshake errors with the bank's gateway",
        "how did we solve the TLS failures with the payment provider",
    ),
]


# ------------------------------------------------------------------ distractors (issue 31)

_NAMES = ["Priya", "Tomas", "Wei", "Olga", "Marcus", "Ines", "Kenji", "Amara", "Lukas", "Noor"]
_COMPANIES = ["Initech", "Umbrella", "Hooli", "Vandelay", "Stark", "Wonka", "Tyrell", "Cyberdyne"]
_NOUNS = [
    "scheduler", "queue", "search index", "gateway", "dashboard", "exporter", "crawler",
    "notifier", "uploader", "resolver", "proxy", "renderer", "planner", "webhook", "tracker",
    "profiler", "importer", "thumbnailer", "geocoder", "billing report", "audit log",
    "feature store", "config loader", "session store", "job runner", "license checker",
]  # fmt: skip
_ADJS = ["incremental", "staged", "blue-green", "lazy", "sharded", "batched", "canary", "nightly"]
_ERRORS = [
    "timeout after 30 seconds", "permission denied", "checksum mismatch", "out of memory",
    "HTTP 502 from the upstream", "disk quota exceeded", "schema validation error",
    "too many open files", "certificate expired", "deadlock detected",
]  # fmt: skip
_HOSTS = ["worker-7", "db-replica-2", "edge-fra-1", "ci-runner-5", "batch-node-3", "cache-01"]
_WHEN = ["Mondays", "the end of the quarter", "release week", "holidays", "the first of the month"]
_ACTIONS = [
    "deploy without a ticket", "change the schema by hand", "share staging credentials",
    "skip the changelog", "merge without two reviews", "restart production manually",
]  # fmt: skip
_FORMATS = ["XLSX", "JSON", "XML", "Parquet", "HTML", "plain text"]
_GOALS = ["save memory", "simplify the setup", "meet the SLA", "reduce the bill", "avoid lock-in"]
_LIBS = ["celery", "dramatiq", "rq", "kafka", "nats", "rabbitmq", "sqlite", "duckdb", "minio"]


def distractors(n: int, seed: int = 31) -> list[str]:
    """``n`` English records an agent may keep — decisions, failures, instructions, findings,
    commitments — about other things than the labelled answers (templates filled from the
    pools above; the same ``seed`` gives the same texts)."""
    rnd = random.Random(seed)
    c = rnd.choice
    forms = [
        lambda: f"Decision: use the {c(_ADJS)} {c(_NOUNS)} for the {c(_NOUNS)}",
        lambda: f"Deploy of the {c(_NOUNS)} failed: {c(_ERRORS)} on {c(_HOSTS)}",
        lambda: f"Instruction from {c(_NAMES)}: never {c(_ACTIONS)} during {c(_WHEN)}",
        lambda: f"The {c(_NOUNS)} slows down when the {c(_NOUNS)} is {c(_ADJS)}",
        lambda: f"Switched the {c(_NOUNS)} from {c(_LIBS)} to {c(_LIBS)} to {c(_GOALS)}",
        lambda: f"Customer {c(_COMPANIES)} asked for the {c(_NOUNS)} in {c(_FORMATS)}",
        lambda: f"Ticket OPS-{rnd.randint(100, 9999)} tracks the {c(_ERRORS)} in the {c(_NOUNS)}",
        lambda: f"Failed approach: running the {c(_NOUNS)} on {c(_HOSTS)} hit {c(_ERRORS)}",
        lambda: f"Commitment: {c(_NAMES)} will fix the {c(_NOUNS)} before {c(_WHEN)}",
        lambda: f"{c(_NAMES)} prefers the {c(_ADJS)} {c(_NOUNS)} to {c(_GOALS)}",
        lambda: f"Retried the {c(_NOUNS)} {rnd.randint(2, 5)} times, then got {c(_ERRORS)}",
        lambda: f"The {c(_NOUNS)} of {c(_COMPANIES)} runs on {c(_HOSTS)} with {c(_LIBS)}",
    ]
    return [c(forms)() for _ in range(n)]


def labelled_episodes(n_distractors: int = 600, seed: int = 31) -> list[tuple[str, int | None]]:
    """The episodes of the set in the order written: ``(text, i)`` for the answer of
    ``LABELLED[i]``, ``(text, None)`` for a distractor; the answers at seeded places among
    the distractors (so neither recency nor position marks them)."""
    rnd = random.Random(seed + 1)
    out: list[tuple[str, int | None]] = [(t, None) for t in distractors(n_distractors, seed)]
    for i, (text, _q) in enumerate(LABELLED):
        out.insert(rnd.randint(0, len(out)), (text, i))
    return out


def lexical_recall(backend: str, n_distractors: int = 600) -> float:
    """Lexical recall@10 of the set (each question within the set's scope, no embedder) on
    a fresh store of ``backend`` (``sqlite``, or ``postgres``: a fresh schema of the bench's
    server, ``bench/common.py``)."""
    import sys
    import tempfile
    from contextlib import ExitStack
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import pg_schema

    from torpor.episodes import Episode, EpisodeStore
    from torpor.store import open_store

    eps, of = [], {}
    for n, (text, i) in enumerate(labelled_episodes(n_distractors)):
        eid = f"own-{n}:ended@1"
        of[i] = eid
        ep = Episode(eid, f"own-{n}", "ended@1", "own", "agent", "ops", "ended", "succeeded",
                     text, "", 1, 1_000_000 + n * 1000)  # fmt: skip
        eps.append(ep)
    with ExitStack() as stack:
        if backend == "sqlite":
            url = f"sqlite:///{Path(stack.enter_context(tempfile.TemporaryDirectory())) / 'l.db'}"
        else:
            url = stack.enter_context(pg_schema())
        store = open_store(url)
        stack.callback(store.close)
        es = EpisodeStore(store, embedder=None)
        es.write(eps)
        found = [
            of[i] in [h.episode_id for h in es.search(q, scope="own", limit=10)]
            for i, (_, q) in enumerate(LABELLED)
        ]
    return sum(found) / len(found)


if __name__ == "__main__":
    import sys

    for b in sys.argv[1:] or ["sqlite", "postgres"]:
        print(f"own labelled set {b}: lexical recall@10 {lexical_recall(b):.3f}", flush=True)
