-- torpor schema v1 (PostgreSQL). Same tables and meaning as the SQLite schema beside it; times
-- are epoch milliseconds (bigint) and every lease/dispatch decision uses the database clock,
-- torpor_now_ms(), never a worker's clock.
CREATE FUNCTION torpor_now_ms() RETURNS bigint
    LANGUAGE sql VOLATILE
    AS $$ SELECT CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS bigint) $$;

CREATE TABLE runs (
    run_id              text PRIMARY KEY,
    workflow            text NOT NULL,
    version             text NOT NULL,
    status              text NOT NULL,
    outcome             text,
    created_at_ms       bigint NOT NULL,
    updated_at_ms       bigint NOT NULL,
    wake_at_ms          bigint,
    lease_owner         text,
    lease_epoch         bigint NOT NULL DEFAULT 0,
    lease_expires_at_ms bigint NOT NULL DEFAULT 0,
    last_seq            bigint NOT NULL DEFAULT 0,
    checkpoint_seq      bigint NOT NULL DEFAULT 0,
    checkpoint          text
);
CREATE INDEX runs_dispatch ON runs (status, wake_at_ms);

CREATE TABLE events (
    run_id   text NOT NULL,
    seq      bigint NOT NULL,
    type     text NOT NULL,
    step_id  text,
    epoch    bigint NOT NULL,
    at_ms    bigint NOT NULL,
    v        integer NOT NULL DEFAULT 1,
    payload  text NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX events_step ON events (run_id, step_id) WHERE step_id IS NOT NULL;

CREATE TABLE inbox (
    message_id   text PRIMARY KEY,
    run_id       text NOT NULL,
    kind         text NOT NULL,
    body         text NOT NULL,
    at_ms        bigint NOT NULL,
    consumed_seq bigint
);
CREATE INDEX inbox_pending ON inbox (run_id, at_ms) WHERE consumed_seq IS NULL;
