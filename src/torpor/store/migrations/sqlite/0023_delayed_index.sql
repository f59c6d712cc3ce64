-- torpor schema v23 (issue 48): an idle worker's `next_wake_at` asks for the earliest delayed
-- start of a pending run (`not_before_ms`) beside the earliest timer. Through runs_dispatch it
-- read every pending run (a backlog of a hundred thousand queued runs: all of them, on each
-- poll). This partial index holds only pending runs with a delayed start, in start order, so
-- the earliest is the first one of a walk that stops at the first run the worker accepts.
CREATE INDEX runs_delayed ON runs (status, not_before_ms)
    WHERE status = 'pending' AND not_before_ms IS NOT NULL;
