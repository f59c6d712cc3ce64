-- torpor schema v11 (PostgreSQL): the fact ledger (torpor.memory.ledger, issue 30); same
-- meaning as the SQLite migration beside it. `tsv` is the record's text (english
-- configuration) and (a unit's) body, searched within one run through the GIN index.
CREATE TABLE ledger (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      text NOT NULL,
    seq         bigint NOT NULL,
    idx         integer NOT NULL,
    compaction  integer NOT NULL,
    key         text NOT NULL,
    kind        text NOT NULL,
    text        text NOT NULL,
    body        text NOT NULL,
    ids         text NOT NULL,
    subject     text NOT NULL,
    turn        integer NOT NULL,
    step        text,
    source      text NOT NULL,
    score       double precision NOT NULL,
    supersedes  text NOT NULL,
    at_ms       bigint NOT NULL,
    tsv         tsvector NOT NULL,
    UNIQUE (run_id, seq, idx)
);
CREATE INDEX ledger_run_key ON ledger (run_id, key);
CREATE INDEX ledger_tsv ON ledger USING gin (tsv);
