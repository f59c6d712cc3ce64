-- torpor schema v11 (SQLite): the fact ledger (torpor.memory.ledger, issue 30).
-- One row per record a compaction wrote: (run_id, seq, idx) names the `context_compacted`
-- event that carries it and its place there, so the rows are written in the transaction that
-- appends the event, once (a rerun of that append is refused by the event's own key).
-- Rows are never updated: `supersedes` (JSON list of keys) names the records this one replaces;
-- who replaced them is this row's source/step, when its seq/at_ms. `key` is the dedup key.
CREATE TABLE ledger (
    id          INTEGER PRIMARY KEY,
    run_id      TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    idx         INTEGER NOT NULL,
    compaction  INTEGER NOT NULL,
    key         TEXT NOT NULL,
    kind        TEXT NOT NULL,
    text        TEXT NOT NULL,
    body        TEXT NOT NULL,
    ids         TEXT NOT NULL,
    subject     TEXT NOT NULL,
    turn        INTEGER NOT NULL,
    step        TEXT,
    source      TEXT NOT NULL,
    score       REAL NOT NULL,
    supersedes  TEXT NOT NULL,
    at_ms       INTEGER NOT NULL,
    UNIQUE (run_id, seq, idx)
);
CREATE INDEX ledger_run_key ON ledger (run_id, key);
-- Full-text over the record's text and (a unit's) body (external content: stored once),
-- searched within one run. `body`: a folded turn as the buffer held it, decoded.
CREATE VIRTUAL TABLE ledger_fts USING fts5(
    text, body, content='ledger', content_rowid='id', tokenize='porter unicode61'
);
