-- torpor schema v25 (PostgreSQL): the streams of a run (torpor.streams, issue 40); same
-- meaning as the SQLite migration beside it. A batch of items is inserted in one
-- transaction that also sends `NOTIFY torpor_stream` (readers elsewhere wake).
CREATE TABLE stream_items (
    run_id         text NOT NULL,
    stream         text NOT NULL,
    stream_offset  bigint NOT NULL,
    part           text NOT NULL,
    kind           text NOT NULL,
    wseq           bigint NOT NULL,
    data           text NOT NULL,
    epoch          bigint NOT NULL,
    at_ms          bigint NOT NULL,
    PRIMARY KEY (run_id, stream, stream_offset)
);
