-- torpor schema v30: a session's segments (issue 46); see the SQLite migration.
CREATE TABLE session_segments (
    session TEXT NOT NULL,
    segment INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    first_turn BIGINT NOT NULL,
    started_at_ms BIGINT NOT NULL,
    PRIMARY KEY (session, segment)
);
