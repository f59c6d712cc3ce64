-- torpor schema v6 (SQLite): storage that grows with new content, and retention.
-- `chunks`: content-addressed parts of large stored values (store/chunks.py), named by the
-- sha256 of their text (`data`: its UTF-8 bytes, zlib-compressed when that saves space;
-- `size`: the text's bytes); a stored text that starts with "~" refers to them. `used_at_ms`:
-- when a writer last wrote or confirmed the chunk (garbage collection spares a chunk used within its
-- grace period, so a chunk written just before the event that refers to it is never lost).
-- `blob_refs`: which run refers to which chunk or artifact (kind 'chunk' or 'artifact'),
-- written before the history that refers to it; collection keeps everything a retained run
-- refers to. `retention`: how long each workflow's finished runs are kept (no row: forever),
-- and where their history is archived before deletion.
CREATE TABLE chunks (
    hash       TEXT PRIMARY KEY,
    data       BLOB NOT NULL,
    size       INTEGER NOT NULL,
    used_at_ms INTEGER NOT NULL
);
CREATE TABLE blob_refs (
    hash   TEXT NOT NULL,
    run_id TEXT NOT NULL,
    kind   TEXT NOT NULL,
    size   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, kind, hash)
) WITHOUT ROWID;
INSERT INTO blob_refs (hash, run_id, kind, size)
SELECT DISTINCT json_extract(payload, '$.sha256'), run_id, 'artifact',
       COALESCE(json_extract(payload, '$.size'), 0) FROM events
WHERE type = 'artifact_created' AND json_extract(payload, '$.sha256') IS NOT NULL;
CREATE TABLE retention (
    workflow      TEXT PRIMARY KEY,
    keep_days     REAL,
    keep_last     INTEGER,
    archive_url   TEXT,
    updated_at_ms INTEGER NOT NULL
);
