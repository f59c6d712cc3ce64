"""The two vocabularies of the planted-fact world: ``dev`` (for an extractor's author to
iterate on) and ``heldout`` (the figure that counts: other option names, other reasons, other
errors, other instruction subjects). A fact's distinctive terms come from here and are used
at most once per world; the distractor output (:mod:`.shapes`) draws on none of them, which the
generator checks (:func:`bench.memory_world.check_world`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Vocab:
    """One family's pools. ``topics``: what a decision is about, with the options it chooses
    between; ``reasons``: reason clauses with the terms their ``{t}`` takes
    (``{n}``: a unique number); ``approaches`` / ``errors``: what was tried and the distinctive
    token of what went wrong (with a clause using it); ``instructions``: subject -> templates
    of the operator's value (``{v}``); ``commitments`` / ``questions``: templates with
    ``{a}`` (a unique term) and ``{n}`` (a unique number)."""

    topics: tuple[tuple[str, tuple[str, ...]], ...]
    reasons: tuple[tuple[str, tuple[str, ...]], ...]
    approaches: tuple[str, ...]
    errors: tuple[tuple[str, str], ...]
    instructions: tuple[tuple[str, str, tuple[str, ...]], ...]
    action_terms: tuple[str, ...]
    config_keys: tuple[str, ...]
    services: tuple[str, ...]


DEV = Vocab(
    topics=(
        ("the cache backend", ("memcached", "valkey", "dragonfly", "keydb")),
        ("the wire format for the event feed", ("protobuf", "capnproto", "flatbuffers", "avro")),
        ("the JSON library on the hot path", ("orjson", "ujson", "msgspec", "simdjson")),
        ("the compression for snapshots", ("zstd", "lz4", "brotli", "xz-utils")),
        ("the connection pooler", ("pgbouncer", "pgcat", "odyssey", "supavisor")),
        ("the schema migration tool", ("alembic", "yoyo-migrations", "sqitch", "atlas")),
        ("the HTTP server for the webhook relay", ("granian", "hypercorn", "uvicorn", "gunicorn")),
        ("the job queue", ("celery", "dramatiq", "arq", "huey", "rq")),
        ("the backup tool", ("litestream", "restic", "borgbackup", "rclone")),
        ("the retry library for the uploader", ("tenacity", "backoff", "stamina")),
        ("the lock around the ledger", ("flock", "advisory-locks", "redlock")),
        ("the test runner setup", ("pytest-xdist", "nox", "tox")),
        ("the build backend", ("hatchling", "pdm-backend", "flit-core", "maturin")),
        ("the dataframe library for the export", ("duckdb", "polars", "pyarrow", "vaex")),
    ),
    reasons=(
        ("p99 dropped to {n} us on the replay set", ()),
        ("it cut the snapshot to {n} KB", ()),
        ("the other one has no {t} wheels", ("arm64", "musl", "s390x", "pypy", "Windows")),
        ("its licence is fine and the other one is {t}", ("SSPL", "AGPL")),
        ("the other one opened {n} connections in the soak test", ()),
        ("the benchmark shows {n} rows/s against 9k", ()),
        ("the maintainers of the other one dropped {t} support", ("glibc-2.28", "IPv6-only")),
        ("the old path spent {n} us per row in glue code", ()),
        ("the other one leaks file handles under {t}", ("gevent", "uvloop", "FIPS")),
    ),
    approaches=(
        "--no-build-isolation",
        "PYTHONHASHSEED=0",
        "mmap-reader",
        "bulk-COPY",
        "wal_autocheckpoint=0",
        "ulimit-raise",
        "sharded-prefetch",
        "pip-install--user",
        "ccache",
        "split-by-tenant",
        "jemalloc",
        "tmpfs-scratch",
        "parallel-gzip",
        "sendfile",
        "lazy-imports",
        "io_uring",
    ),
    errors=(
        ("ENOSPC", "ENOSPC: no space left on device, write"),
        ("EADDRINUSE", "bind: EADDRINUSE (address already in use) on :{n}"),
        ("EMFILE", "EMFILE: too many open files (limit {n})"),
        ("OOMKilled", "container exited 137 (OOMKilled) at {n} MiB"),
        ("SIGBUS", "worker {n} killed by SIGBUS"),
        ("ECONNRESET", "read ECONNRESET after {n} bytes"),
        ("ETIMEDOUT", "connect ETIMEDOUT 10.4.0.7:{n}"),
        ("EACCES", "EACCES: permission denied, open"),
        ("CrashLoopBackOff", "pod went into CrashLoopBackOff after {n} restarts"),
        ("SQLSTATE-40P01", "SQLSTATE-40P01 deadlock between pids {n} and 7788"),
        ("EROFS", "EROFS: read-only file system"),
        ("HTTP-413", "upload rejected with HTTP-413 at {n} KiB"),
    ),
    instructions=(
        (
            "where load tests run",
            "load tests",
            (
                "run load tests only against {v}",
                "load tests go to {v}, nowhere else",
                "keep the load tests on {v}",
            ),
        ),
        (
            "which branch to push to",
            "push",
            (
                "push only to {v}",
                "all pushes go to {v} for now",
                "do not push anywhere but {v}",
            ),
        ),
        (
            "who signs off",
            "sign-off",
            (
                "get sign-off from {v} before merging",
                "{v} approves merges this week",
                "merges need a thumbs-up from {v}",
            ),
        ),
        (
            "how many workers",
            "workers",
            (
                "cap the workers at {v}",
                "no more than {v} workers at once",
                "max {v} workers on the shared box",
            ),
        ),
        (
            "the change freeze",
            "freeze",
            (
                "nothing ships after {v}",
                "the freeze starts {v}",
                "hold all deploys from {v}",
            ),
        ),
        (
            "which tenant is the canary",
            "canary tenant",
            (
                "use {v} as the canary tenant",
                "the canary tenant is {v}",
                "roll out to {v} first",
            ),
        ),
        (
            "the pager",
            "pager",
            (
                "page {v} for anything urgent",
                "{v} holds the pager tonight",
                "escalate to {v}",
            ),
        ),
        (
            "the artifact bucket",
            "bucket",
            (
                "upload artifacts to {v} only",
                "artifacts go in {v}",
                "write build outputs to {v}",
            ),
        ),
    ),
    action_terms=(
        "backfill",
        "re-index",
        "changelog",
        "runbook",
        "postmortem",
        "smoke-suite",
        "rollback-plan",
        "fixture-refresh",
        "dashboard",
        "alert-rule",
        "load-profile",
        "flamegraph",
        "migration-dry-run",
        "release-notes",
    ),
    config_keys=(
        "ingest.batch_window_ms",
        "ledger.max_inflight",
        "uploader.chunk_kib",
        "export.retention_days",
        "relay.worker_count",
        "cache.ttl_seconds",
        "search.shard_count",
        "queue.visibility_timeout",
        "snapshot.every_n_events",
        "scheduler.tick_ms",
        "pool.max_overflow",
        "gc.pause_target_ms",
    ),
    services=(
        "quarry-api",
        "ledgerd",
        "kestrel-sync",
        "tern-relay",
        "basalt-export",
        "gannet-search",
        "wren-scheduler",
        "osprey-cache",
    ),
)


HELDOUT = Vocab(
    topics=(
        ("the message broker", ("nats-jetstream", "rabbitmq", "redpanda", "pulsar", "kafka")),
        ("the serializer for RPC payloads", ("cbor", "bincode", "thrift", "messagepack")),
        ("the storage engine for the audit trail", ("rocksdb", "lmdb", "tikv", "sled")),
        ("the analytics store", ("clickhouse", "timescaledb", "druid", "pinot")),
        (
            "how tenants are partitioned",
            ("hash-partitioning", "range-partitioning", "schema-per-tenant"),
        ),
        ("the log shipper", ("vector-agent", "fluent-bit", "otel-collector", "logstash")),
        ("the container base image", ("distroless", "alpine", "wolfi", "ubi9-minimal")),
        ("the secrets backend", ("vault", "sops", "infisical", "doppler")),
        ("the frontend bundler", ("esbuild", "rollup", "webpack", "turbopack")),
        ("the rate limiter", ("token-bucket", "sliding-log", "gcra")),
        ("the search index", ("meilisearch", "typesense", "tantivy", "opensearch")),
        ("the CI cache", ("sccache", "bazel-remote", "buildbuddy")),
        ("the feature-flag service", ("unleash", "flagsmith", "growthbook", "openfeature")),
    ),
    reasons=(
        ("consumer lag stayed under {n} messages at peak", ()),
        ("cold start is {n} us with it", ()),
        ("the alternative pulls in {t} at build time", ("CGO", "JNI", "node-gyp")),
        ("legal flagged the {t} terms", ("BSL-1.1", "Elastic-License")),
        ("its image is {n} KB smaller", ()),
        ("it keeps working when {t} is down", ("zookeeper", "etcd")),
        ("it handled {n} req/s on one core in the soak test", ()),
        ("the other needs a {t} sidecar", ("envoy", "HSM")),
        ("cache hits on rebuilds went up to {n} an hour", ()),
        ("support for {t} is on its roadmap, not shipped", ("ppc64le", "loongarch", "SAML")),
    ),
    approaches=(
        "GOMAXPROCS=2",
        "--frozen-lockfile",
        "statically-linked-build",
        "read-replica-routing",
        "two-phase-rename",
        "hugepages",
        "zero-copy-splice",
        "gossip-discovery",
        "cgroup-v1-fallback",
        "eager-vacuum",
        "prefork",
        "chunked-upload",
        "fsync-batching",
        "ipvs-mode",
        "pgvector-hnsw",
        "rsync--inplace",
    ),
    errors=(
        ("ImagePullBackOff", "stuck in ImagePullBackOff, manifest digest {n} unknown"),
        ("EPIPE", "write EPIPE on stdout after {n} records"),
        ("ENOMEM", "mmap: ENOMEM at {n} MiB resident"),
        ("SIGSEGV", "signal SIGSEGV: segmentation violation pc=0x{n}"),
        ("ECONNREFUSED", "dial tcp 10.9.4.3:{n}: ECONNREFUSED"),
        ("DeadlineExceeded", "rpc DeadlineExceeded after {n} ms"),
        ("Evicted", "pod Evicted: ephemeral-storage over {n} Mi"),
        ("EXDEV", "rename: EXDEV (cross-device link)"),
        ("SQLSTATE-53300", "SQLSTATE-53300 too many clients, {n} in use"),
        ("HTTP-429", "throttled with HTTP-429, retry-after {n}"),
        ("ELOOP", "ELOOP: too many levels of symbolic links"),
        ("ResourceExhausted", "grpc ResourceExhausted: quota {n} per minute"),
    ),
    instructions=(
        (
            "which region is off limits",
            "region",
            (
                "stay out of {v}",
                "{v} is off limits until further notice",
                "touch nothing in {v}",
            ),
        ),
        (
            "where reports go",
            "reports",
            (
                "post the reports to {v}",
                "reports belong in {v}",
                "send every report to {v}",
            ),
        ),
        (
            "the spend ceiling",
            "spend",
            (
                "keep cloud spend under {v}",
                "the ceiling on spend is {v}",
                "spend stays below {v}",
            ),
        ),
        (
            "which dataset to use",
            "dataset",
            (
                "use only the {v} dataset",
                "work from the {v} dataset",
                "the {v} dataset is the one to use",
            ),
        ),
        (
            "the maintenance window",
            "window",
            (
                "restarts happen only in {v}",
                "the window for restarts is {v}",
                "bounce services during {v} and no other time",
            ),
        ),
        (
            "which account to bill",
            "billing account",
            (
                "bill everything to {v}",
                "charges go to {v}",
                "use {v} as the billing account",
            ),
        ),
        (
            "the rollback contact",
            "rollback contact",
            (
                "ping {v} before any rollback",
                "{v} owns rollbacks",
                "rollbacks go through {v}",
            ),
        ),
        (
            "the restart procedure",
            "procedure",
            (
                "follow {v} for restarts",
                "the restart procedure is {v}",
                "use the steps in {v} to restart",
            ),
        ),
    ),
    action_terms=(
        "soak-test",
        "capacity-report",
        "key-rotation",
        "drift-check",
        "cost-breakdown",
        "sbom",
        "threat-model",
        "chaos-drill",
        "retention-audit",
        "on-call-handoff",
        "perf-baseline",
        "dependency-bump",
        "access-review",
        "restore-drill",
    ),
    config_keys=(
        "broker.prefetch_count",
        "audit.segment_mb",
        "tenant.max_partitions",
        "limiter.burst",
        "index.refresh_interval_s",
        "ci.cache_ttl_h",
        "flags.poll_interval_s",
        "rpc.max_frame_kib",
        "bundler.chunk_limit_kb",
        "vault.lease_ttl_m",
        "otel.batch_size",
        "image.layer_budget_mb",
    ),
    services=(
        "heron-gateway",
        "plover-audit",
        "skua-billing",
        "egret-ingest",
        "murre-auth",
        "petrel-notify",
        "avocet-media",
        "dunlin-reports",
    ),
)


FAMILIES = {"dev": DEV, "heldout": HELDOUT}
