-- torpor schema v25 (SQLite): the streams of a run (torpor.streams, issue 40).
-- One row per item of a named stream: `stream_offset` is dense per (run_id, stream), from 1.
-- Items are run data kept apart from the history: resume never reads them (G8); deleting a
-- run deletes them. `part`: '' for an item the workflow wrote (its ordinal `wseq` makes a
-- replayed write a no-op), else the step attempt that streamed it (`model#2@7`: step id @
-- lease epoch), whose items end with an `end` item, or a `retract` item when the attempt was
-- abandoned. `data`: JSON text. `epoch`: the lease it was written under.
CREATE TABLE stream_items (
    run_id         TEXT NOT NULL,
    stream         TEXT NOT NULL,
    stream_offset  INTEGER NOT NULL,
    part           TEXT NOT NULL,
    kind           TEXT NOT NULL,
    wseq           INTEGER NOT NULL,
    data           TEXT NOT NULL,
    epoch          INTEGER NOT NULL,
    at_ms          INTEGER NOT NULL,
    PRIMARY KEY (run_id, stream, stream_offset)
) WITHOUT ROWID;
