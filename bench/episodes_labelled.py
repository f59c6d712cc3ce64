"""The labelled set of ``bench/episodes_hybrid.py`` (issue 32): decisions, failures and
instructions an agent may record, each with a question asking for it in other words. Written
by the bench's author, so it could be made to favour either ranking: the bench sets no target
on it."""

from __future__ import annotations

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
