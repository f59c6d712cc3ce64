-- torpor schema v6 (PostgreSQL): storage that grows with new content, and retention. Same
-- tables and meaning as the SQLite schema beside it; hashes are stored as their 32 bytes
-- (bytea; the queries take and give hex), which halves the keys of the two largest indexes;
-- fixed-width columns first (no alignment padding).
CREATE TABLE chunks (
    size       bigint NOT NULL,
    used_at_ms bigint NOT NULL,
    hash       bytea PRIMARY KEY,
    data       bytea NOT NULL
);
CREATE TABLE blob_refs (
    size   bigint NOT NULL DEFAULT 0,
    run_id text NOT NULL,
    kind   text NOT NULL,
    hash   bytea NOT NULL,
    PRIMARY KEY (run_id, kind, hash)
);
INSERT INTO blob_refs (hash, run_id, kind, size)
SELECT DISTINCT decode(CAST(payload AS jsonb) ->> 'sha256', 'hex'), run_id, 'artifact',
       COALESCE(CAST(CAST(payload AS jsonb) ->> 'size' AS bigint), 0) FROM events
WHERE type = 'artifact_created' AND CAST(payload AS jsonb) ->> 'sha256' IS NOT NULL;
CREATE TABLE retention (
    workflow      text PRIMARY KEY,
    keep_days     double precision,
    keep_last     bigint,
    archive_url   text,
    updated_at_ms bigint NOT NULL
);
