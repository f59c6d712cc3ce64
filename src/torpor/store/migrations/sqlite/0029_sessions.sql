-- torpor schema v29: sessions (issue 46). A session is a named long-lived agent identity:
-- `run_id` is its current segment (a normal run waiting on its inbox), `segment` that
-- segment's number (from 1), `turns` the turns handled over all segments, `segment_turns`
-- the turns after which a segment continues as a new one. `session_messages` is its durable
-- inbox: every message sent, in order (`seq`), with its disposition (`status`: pending,
-- handled, rejected, superseded), the segment run and turn that disposed of it, the reply.
CREATE TABLE sessions (
    name TEXT PRIMARY KEY,
    workflow TEXT NOT NULL,
    agent TEXT NOT NULL,
    run_id TEXT NOT NULL,
    segment INTEGER NOT NULL,
    turns INTEGER NOT NULL DEFAULT 0,
    segment_turns INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);
CREATE TABLE session_messages (
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    message_id TEXT NOT NULL UNIQUE,
    sender TEXT NOT NULL,
    text TEXT NOT NULL,
    sent_at_ms INTEGER NOT NULL,
    status TEXT NOT NULL,
    run_id TEXT,
    turn INTEGER,
    reply TEXT,
    reason TEXT,
    disposed_at_ms INTEGER,
    PRIMARY KEY (session, seq)
);
CREATE INDEX session_messages_pending ON session_messages (session, seq)
    WHERE status = 'pending';
