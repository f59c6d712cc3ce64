-- torpor schema v1 (SQLite). The history is append-only: `events` rows are never updated or
-- deleted. `runs` holds the lease (owner, epoch, expiry), the derived status columns used for
-- dispatch and listing, and the latest engine checkpoint (the folded RunState at checkpoint_seq).
CREATE TABLE runs (
    run_id              TEXT PRIMARY KEY,
    workflow            TEXT NOT NULL,
    version             TEXT NOT NULL,
    status              TEXT NOT NULL,
    outcome             TEXT,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    wake_at_ms          INTEGER,
    lease_owner         TEXT,
    lease_epoch         INTEGER NOT NULL DEFAULT 0,
    lease_expires_at_ms INTEGER NOT NULL DEFAULT 0,
    last_seq            INTEGER NOT NULL DEFAULT 0,
    checkpoint_seq      INTEGER NOT NULL DEFAULT 0,
    checkpoint          TEXT
);
CREATE INDEX runs_dispatch ON runs (status, wake_at_ms);

CREATE TABLE events (
    run_id   TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    type     TEXT NOT NULL,
    step_id  TEXT,
    epoch    INTEGER NOT NULL,
    at_ms    INTEGER NOT NULL,
    v        INTEGER NOT NULL DEFAULT 1,
    payload  TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE INDEX events_step ON events (run_id, step_id) WHERE step_id IS NOT NULL;

-- Messages from outside the lease holder (signals, decisions, revocations, cancels, person
-- resolutions). Deduplicated by message_id forever; the lease holder moves them into the
-- history and stamps consumed_seq in the same transaction.
CREATE TABLE inbox (
    message_id   TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL,
    kind         TEXT NOT NULL,
    body         TEXT NOT NULL,
    at_ms        INTEGER NOT NULL,
    consumed_seq INTEGER
);
CREATE INDEX inbox_pending ON inbox (run_id, at_ms) WHERE consumed_seq IS NULL;
