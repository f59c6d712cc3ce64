-- torpor schema v8 (PostgreSQL): episodic memory (torpor.episodes); same meaning as the SQLite
-- migration beside it. `tsv` is the episode's text (english configuration) plus one lexeme per
-- filter (scope, agent, task type, outcome), so one GIN index answers the filters and the
-- words together; the exact columns are compared as well.
ALTER TABLE runs ADD COLUMN scope text;
ALTER TABLE runs ADD COLUMN task_type text;
ALTER TABLE runs ADD COLUMN episodes_seq bigint NOT NULL DEFAULT 0;

CREATE TABLE episodes (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    episode_id    text NOT NULL UNIQUE,
    run_id        text NOT NULL,
    boundary      text NOT NULL,
    scope         text NOT NULL,
    agent         text NOT NULL,
    task_type     text NOT NULL,
    kind          text NOT NULL,
    outcome       text NOT NULL,
    summary       text NOT NULL,
    lesson        text NOT NULL,
    conditions    text NOT NULL,
    refs          text NOT NULL,
    claims        text NOT NULL,
    tags          text NOT NULL,
    at_seq        bigint NOT NULL,
    created_at_ms bigint NOT NULL,
    superseded_by text,
    tsv           tsvector NOT NULL,
    UNIQUE (run_id, boundary)
);
CREATE INDEX episodes_tsv ON episodes USING gin (tsv);
-- How many episodes hold each lexeme of `tsv` (words and filter tokens; '' counts them all):
-- a search weighs its words and sizes its filter from here, never by visiting the episodes
-- (PostgreSQL must read a row to count it). Kept in the transaction that writes or prunes.
CREATE TABLE episode_lexemes (
    lexeme text PRIMARY KEY,
    docs   bigint NOT NULL
);
CREATE INDEX episodes_recent ON episodes (scope, task_type, created_at_ms);
CREATE INDEX episodes_scope_recent ON episodes (scope, created_at_ms);
CREATE INDEX episodes_age ON episodes (created_at_ms);
