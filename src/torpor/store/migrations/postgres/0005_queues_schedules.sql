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
    WHERE queue IS NOT NULL;

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

-- The checked claim of an unstarted run of a queue with limits (called by the claim_next query
-- for the candidate it locked): takes the queue's transaction-scoped advisory lock, which
-- serializes the checked claims of one queue until their transactions end, then counts the
-- queue's slots and starts. Being VOLATILE, each query in it takes a fresh snapshot, taken
-- after the lock was ours: it sees every claim of the queue committed before, so the counts are
-- exact, in the same round trip as the candidate's choice. Returns the new epoch and whom the
-- lease was taken from; no row when a limit has no room (nothing changed).
CREATE FUNCTION torpor_claim_checked(p_run_id text, p_owner text, p_ttl_ms bigint)
    RETURNS TABLE (epoch bigint, taken_from text)
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    v_queue text;
    v_key text;
    v_started bigint;
    v_now bigint;
BEGIN
    SELECT r.queue, r.concurrency_key, r.started_at_ms INTO v_queue, v_key, v_started
    FROM runs r WHERE r.run_id = p_run_id;
    PERFORM pg_advisory_xact_lock(1953460848, hashtext(v_queue));
    v_now := torpor_now_ms();
    IF v_started IS NULL AND EXISTS (
        -- (each count stops at its limit, read in the order of the index that serves it)
        SELECT 1 FROM queues q WHERE q.name = v_queue AND (
            (q.concurrency IS NOT NULL AND q.concurrency <= (
                SELECT count(*) FROM (
                    SELECT 1 FROM runs o WHERE o.queue = v_queue
                    AND o.started_at_ms IS NOT NULL AND o.status <> 'finished'
                    ORDER BY o.queue LIMIT q.concurrency) AS active))
            OR (q.key_concurrency IS NOT NULL AND v_key IS NOT NULL AND q.key_concurrency <= (
                SELECT count(*) FROM (
                    SELECT 1 FROM runs o WHERE o.queue = v_queue AND o.concurrency_key = v_key
                    AND o.started_at_ms IS NOT NULL AND o.status <> 'finished'
                    ORDER BY o.queue, o.concurrency_key LIMIT q.key_concurrency) AS active))
            OR (q.rate_limit IS NOT NULL AND q.rate_limit <= (
                SELECT count(*) FROM (
                    SELECT 1 FROM runs o WHERE o.queue = v_queue
                    AND o.started_at_ms > v_now - q.rate_period_ms
                    ORDER BY o.queue, o.started_at_ms LIMIT q.rate_limit) AS recent))
            OR (q.key_rate_limit IS NOT NULL AND v_key IS NOT NULL AND q.key_rate_limit <= (
                SELECT count(*) FROM (
                    SELECT 1 FROM runs o WHERE o.queue = v_queue AND o.concurrency_key = v_key
                    AND o.started_at_ms > v_now - q.key_rate_period_ms
                    ORDER BY o.queue, o.concurrency_key, o.started_at_ms
                    LIMIT q.key_rate_limit) AS recent))))
    THEN
        RETURN;
    END IF;
    RETURN QUERY
    UPDATE runs
    SET lease_taken_from = lease_owner, lease_owner = p_owner,
        lease_epoch = runs.lease_epoch + 1, lease_expires_at_ms = v_now + p_ttl_ms,
        updated_at_ms = v_now, started_at_ms = COALESCE(started_at_ms, v_now)
    WHERE runs.run_id = p_run_id
    RETURNING runs.lease_epoch, runs.lease_taken_from;
END
$$;
