-- torpor schema v16 (issue 36): a rate limit holds across a takeover. The checked claim of
-- migration 0005 also claims a takeover in a queue with a rate limit (a started run whose
-- holder never released its lease: a new start of its work). It waits for room in the queue's
-- rate windows among the *other* runs' starts (not for the concurrency limits: the run holds
-- its slot, and its own earlier start does not hold it back, so a queue with concurrency 1
-- and a long window never deadlocks), then restamps started_at_ms, so the runs that start
-- after it count the takeover. An unstarted run is checked and claimed as before.
CREATE OR REPLACE FUNCTION torpor_claim_checked(p_run_id text, p_owner text, p_ttl_ms bigint)
    RETURNS TABLE (epoch bigint, taken_from text)
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    v_queue text;
    v_key text;
    v_started bigint;
    v_holder text;
    v_now bigint;
BEGIN
    SELECT r.queue, r.concurrency_key, r.started_at_ms, r.lease_owner
    INTO v_queue, v_key, v_started, v_holder
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
    IF v_started IS NOT NULL AND v_holder IS NOT NULL AND EXISTS (
        -- a takeover: room among the other runs' starts (its own is about to move)
        SELECT 1 FROM queues q WHERE q.name = v_queue AND (
            (q.rate_limit IS NOT NULL AND q.rate_limit <= (
                SELECT count(*) FROM (
                    SELECT 1 FROM runs o WHERE o.queue = v_queue AND o.run_id <> p_run_id
                    AND o.started_at_ms > v_now - q.rate_period_ms
                    ORDER BY o.queue, o.started_at_ms LIMIT q.rate_limit) AS recent))
            OR (q.key_rate_limit IS NOT NULL AND v_key IS NOT NULL AND q.key_rate_limit <= (
                SELECT count(*) FROM (
                    SELECT 1 FROM runs o WHERE o.queue = v_queue AND o.concurrency_key = v_key
                    AND o.run_id <> p_run_id
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
        updated_at_ms = v_now,
        started_at_ms = CASE WHEN v_holder IS NOT NULL AND v_started IS NOT NULL THEN v_now
                             ELSE COALESCE(started_at_ms, v_now) END
    WHERE runs.run_id = p_run_id
    RETURNING runs.lease_epoch, runs.lease_taken_from;
END
$$;
