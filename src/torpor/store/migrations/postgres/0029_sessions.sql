-- torpor schema v29: sessions (issue 46); see the SQLite migration of the same number.
CREATE TABLE sessions (
    name TEXT PRIMARY KEY,
    workflow TEXT NOT NULL,
    agent TEXT NOT NULL,
    run_id TEXT NOT NULL,
    segment INTEGER NOT NULL,
    turns BIGINT NOT NULL DEFAULT 0,
    segment_turns INTEGER NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
CREATE TABLE session_messages (
    session TEXT NOT NULL,
    seq BIGINT NOT NULL,
    message_id TEXT NOT NULL UNIQUE,
    sender TEXT NOT NULL,
    text TEXT NOT NULL,
    sent_at_ms BIGINT NOT NULL,
    status TEXT NOT NULL,
    run_id TEXT,
    turn BIGINT,
    reply TEXT,
    reason TEXT,
    disposed_at_ms BIGINT,
    PRIMARY KEY (session, seq)
);
CREATE INDEX session_messages_pending ON session_messages (session, seq)
    WHERE status = 'pending';
