-- torpor schema v5 (PostgreSQL): queues with limits, and schedules.
-- A run may belong to a `queue` (NULL: none, never limited) under a `concurrency_key` (one
-- customer, one repository), with a `priority` (higher is claimed first) and a delayed start
-- `not_before_ms` (never claimed before it). `started_at_ms` is when the run was first claimed:
-- a run of a queue holds one of its slots while it is started and not finished, so slots are
-- derived from the run rows themselves (a worker killed mid-run frees nothing and leaks nothing:
-- the run keeps its slot until whoever takes it over finishes it). Rate limits count the runs
-- started within their period.
ALTER TABLE runs ADD COLUMN queue text;
ALTER TABLE runs ADD COLUMN concurrency_key text;
ALTER TABLE runs ADD COLUMN priority integer NOT NULL DEFAULT 0;
-- run_seq: creation order, the tie-break among runs created in the same millisecond.
ALTER TABLE runs ADD COLUMN run_seq bigserial;
ALTER TABLE runs ADD COLUMN not_before_ms bigint;
ALTER TABLE runs ADD COLUMN started_at_ms bigint;
UPDATE runs SET started_at_ms = created_at_ms WHERE lease_epoch > 0;
CREATE INDEX runs_queue_active ON runs (queue, concurrency_key)
    WHERE queue IS NOT NULL AND started_at_ms IS NOT NULL AND status <> 'finished';
CREATE INDEX runs_queue_started ON runs (queue, started_at_ms) WHERE queue IS NOT NULL;
CREATE INDEX runs_queue_key_started ON runs (queue, concurrency_key, started_at_ms)
    WHERE queue IS NOT NULL AND concurrency_key IS NOT NULL;

-- A queue's limits (NULL: that limit does not apply). A run naming a queue without a row here
-- is not limited.
CREATE TABLE queues (
    name               text PRIMARY KEY,
    concurrency        integer,
    key_concurrency    integer,
    rate_limit         integer,
    rate_period_ms     bigint,
    key_rate_limit     integer,
    key_rate_period_ms bigint,
    updated_at_ms      bigint NOT NULL
);

-- Schedules: `next_fire_ms` (UTC epoch ms) is the next slot to fire, computed in the zone `tz`;
-- `generation` grows with every edit. A worker fires a slot by creating the run whose id is the
-- schedule's name and the slot's UTC time (so a slot makes one run, however many workers, and
-- an edit never fires a slot twice), then moving next_fire_ms on with a compare-and-set.
CREATE TABLE schedules (
    name          text PRIMARY KEY,
    workflow      text NOT NULL,
    input         text NOT NULL,
    cron          text NOT NULL,
    tz            text NOT NULL,
    catchup       text NOT NULL,
    queue         text,
    paused        boolean NOT NULL DEFAULT false,
    next_fire_ms  bigint NOT NULL,
    last_fire_ms  bigint,
    generation    integer NOT NULL DEFAULT 1,
    updated_at_ms bigint NOT NULL
);
