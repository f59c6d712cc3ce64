-- torpor schema v30: a session's segments (issue 46): one row per segment run, with the
-- session turn it starts at (`first_turn`, from 1); the newest is `sessions.run_id`.
CREATE TABLE session_segments (
    session TEXT NOT NULL,
    segment INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    first_turn INTEGER NOT NULL,
    started_at_ms INTEGER NOT NULL,
    PRIMARY KEY (session, segment)
);
