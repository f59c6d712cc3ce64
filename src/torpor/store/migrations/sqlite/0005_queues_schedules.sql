-- torpor schema v5 (SQLite): queues with limits, and schedules.
-- A run may belong to a `queue` (NULL: none, never limited) under a `concurrency_key` (one
-- customer, one repository), with a `priority` (higher is claimed first) and a delayed start
-- `not_before_ms` (never claimed before it). `started_at_ms` is when the run was first claimed:
-- a run of a queue holds one of its slots while it is started and not finished, so slots are
-- derived from the run rows themselves (a worker killed mid-run frees nothing and leaks nothing:
-- the run keeps its slot until whoever takes it over finishes it). Rate limits count the runs
-- started within their period.
ALTER TABLE runs ADD COLUMN queue TEXT;
ALTER TABLE runs ADD COLUMN concurrency_key TEXT;
ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN not_before_ms INTEGER;
ALTER TABLE runs ADD COLUMN started_at_ms INTEGER;
UPDATE runs SET started_at_ms = created_at_ms WHERE lease_epoch > 0;
CREATE INDEX runs_queue_active ON runs (queue, concurrency_key)
    WHERE queue IS NOT NULL AND started_at_ms IS NOT NULL AND status <> 'finished';
CREATE INDEX runs_queue_started ON runs (queue, started_at_ms) WHERE queue IS NOT NULL;
CREATE INDEX runs_queue_key_started ON runs (queue, concurrency_key, started_at_ms)
    WHERE queue IS NOT NULL;

-- A queue's limits (NULL: that limit does not apply). A run naming a queue without a row here
-- is not limited.
CREATE TABLE queues (
    name               TEXT PRIMARY KEY,
    concurrency        INTEGER,
    key_concurrency    INTEGER,
    rate_limit         INTEGER,
    rate_period_ms     INTEGER,
    key_rate_limit     INTEGER,
    key_rate_period_ms INTEGER,
    updated_at_ms      INTEGER NOT NULL
);

-- Schedules: `next_fire_ms` (UTC epoch ms) is the next slot to fire, computed in the zone `tz`;
-- `generation` grows with every edit. A worker fires a slot by creating the run whose id is the
-- schedule's name and the slot's UTC time (so a slot makes one run, however many workers, and
-- an edit never fires a slot twice), then moving next_fire_ms on with a compare-and-set.
CREATE TABLE schedules (
    name          TEXT PRIMARY KEY,
    workflow      TEXT NOT NULL,
    input         TEXT NOT NULL,
    cron          TEXT NOT NULL,
    tz            TEXT NOT NULL,
    catchup       TEXT NOT NULL,
    queue         TEXT,
    paused        INTEGER NOT NULL DEFAULT 0,
    next_fire_ms  INTEGER NOT NULL,
    last_fire_ms  INTEGER,
    generation    INTEGER NOT NULL DEFAULT 1,
    updated_at_ms INTEGER NOT NULL
);
