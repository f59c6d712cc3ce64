-- torpor schema v27: contradictions among the fact-ledger records of a scope (issue 31,
-- torpor.episodes.contradict). One row per conflict: two records (each named by its run, the
-- seq of the event that wrote it and its place in that event) giving `subject` different
-- values; the newer supersedes the older from `at_ms` (the newer record's event time;
-- `older_at_ms` the older's). Written
-- by the capture of a run's episodes, in the same transaction, once (the primary key); deleted
-- by `torpor memory forget --scope` (a scoped table). Rows copy the two texts, so a conflict
-- stays readable after the runs are deleted by retention.
CREATE TABLE ledger_conflicts (
    scope       TEXT NOT NULL,
    subject     TEXT NOT NULL,
    older_run   TEXT NOT NULL,
    older_seq   INTEGER NOT NULL,
    older_idx   INTEGER NOT NULL,
    older_at_ms INTEGER NOT NULL,
    older_text  TEXT NOT NULL,
    old_value   TEXT NOT NULL,
    newer_run   TEXT NOT NULL,
    newer_seq   INTEGER NOT NULL,
    newer_idx   INTEGER NOT NULL,
    newer_text  TEXT NOT NULL,
    new_value   TEXT NOT NULL,
    at_ms       INTEGER NOT NULL,
    PRIMARY KEY (scope, newer_run, newer_seq, newer_idx, older_run, older_seq, older_idx, subject)
);
CREATE INDEX ledger_conflicts_recent ON ledger_conflicts (scope, at_ms);
