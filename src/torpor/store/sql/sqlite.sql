-- Named queries of the SQLite backend. Each block starts with `-- name: <name>`; the PostgreSQL
-- file beside this one defines the same names. Parameters are `:name`; `:now_ms` is the store's
-- clock (on PostgreSQL the database clock is used instead).

-- name: schema_version
SELECT version FROM torpor_schema ORDER BY version DESC LIMIT 1;

-- name: insert_run
INSERT INTO runs (run_id, workflow, version, status, created_at_ms, updated_at_ms, last_seq)
VALUES (:run_id, :workflow, :version, 'pending', :now_ms, :now_ms, 1)
ON CONFLICT (run_id) DO NOTHING;

-- name: insert_event
INSERT INTO events (run_id, seq, type, step_id, epoch, at_ms, v, payload)
VALUES (:run_id, :seq, :type, :step_id, :epoch, :at_ms, :v, :payload);

-- name: get_run
SELECT run_id, workflow, version, status, outcome, created_at_ms, updated_at_ms, wake_at_ms,
       lease_owner, lease_epoch, lease_expires_at_ms, last_seq, checkpoint_seq
FROM runs WHERE run_id = :run_id;

-- name: get_checkpoint
SELECT checkpoint_seq, checkpoint, last_seq FROM runs WHERE run_id = :run_id;

-- name: lease_commit_mode
-- First statement of a transaction that only moves a lease (see SQLStore._lease_transaction):
-- nothing to relax here (synchronous is per connection).
SELECT 1;

-- name: acquire_lease
UPDATE runs
SET lease_owner = :owner, lease_epoch = lease_epoch + 1,
    lease_expires_at_ms = :now_ms + :ttl_ms, updated_at_ms = :now_ms
WHERE run_id = :run_id
  AND (lease_owner IS NULL OR lease_expires_at_ms <= :now_ms OR lease_owner = :owner
       OR (lease_owner = :stale_owner AND lease_epoch = :stale_epoch))
RETURNING lease_epoch, lease_expires_at_ms;

-- name: renew_lease
UPDATE runs SET lease_expires_at_ms = :now_ms + :ttl_ms
WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch
  AND lease_expires_at_ms > :now_ms;

-- name: release_lease
UPDATE runs SET lease_owner = NULL, lease_expires_at_ms = 0, updated_at_ms = :now_ms
WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch;

-- name: fence_and_update
UPDATE runs
SET last_seq = :last_seq, status = :status, outcome = :outcome, wake_at_ms = :wake_at_ms,
    version = :version, updated_at_ms = :now_ms
WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch
  AND lease_expires_at_ms > :now_ms AND last_seq = :prev_seq;

-- name: status_columns
-- What the store puts for /* columns */ in fence_append when the run row's status columns
-- must be written; left out for a step of a running run whose columns this lease wrote last
-- time and that did not change (a narrower update of the row).
status = :status, outcome = :outcome, wake_at_ms = :wake_at_ms, version = :version,

-- name: fence_append
-- The fenced update of an append (see fence_and_update), rewriting the engine checkpoint in
-- the same statement when one is given; returns the checkpoint seq, so the append decides on
-- rewriting the checkpoint without another statement.
UPDATE runs
SET /* columns */ last_seq = :last_seq, updated_at_ms = :now_ms,
    checkpoint_seq = CASE WHEN :checkpoint IS NULL THEN checkpoint_seq ELSE :last_seq END,
    checkpoint = COALESCE(:checkpoint, checkpoint)
WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch
  AND lease_expires_at_ms > :now_ms AND last_seq = :prev_seq
RETURNING checkpoint_seq;

-- name: save_checkpoint
UPDATE runs SET checkpoint_seq = :checkpoint_seq, checkpoint = :checkpoint
WHERE run_id = :run_id;

-- name: events_after
SELECT seq, type, epoch, at_ms, v, payload FROM events
WHERE run_id = :run_id AND seq > :after_seq ORDER BY seq LIMIT :limit;

-- name: completions_after
SELECT step_id, payload, seq FROM events
WHERE run_id = :run_id AND seq > :after_seq AND type = 'step_completed' ORDER BY seq;

-- name: step_completion
-- INDEXED BY: without statistics the planner walks the primary key backwards to satisfy the
-- ORDER BY, reading the whole history of the run on every lookup (one per step started).
SELECT payload, seq FROM events INDEXED BY events_step
WHERE run_id = :run_id AND step_id = :step_id AND type = 'step_completed'
ORDER BY seq DESC LIMIT 1;

-- name: step_events
SELECT seq, type, epoch, at_ms, v, payload FROM events INDEXED BY events_step
WHERE run_id = :run_id AND step_id = :step_id ORDER BY seq;

-- name: list_runs
SELECT run_id, workflow, version, status, outcome, created_at_ms, updated_at_ms, wake_at_ms,
       lease_owner, lease_epoch, lease_expires_at_ms, last_seq, checkpoint_seq
FROM runs
WHERE (:status IS NULL OR status = :status) AND (:outcome IS NULL OR outcome = :outcome)
ORDER BY created_at_ms DESC, run_id LIMIT :limit;

-- name: runnable_runs
SELECT run_id FROM runs
WHERE (status IN ('pending', 'running')
       OR (status = 'waiting' AND (wake_at_ms <= :now_ms OR lease_owner IS NOT NULL)))
  AND (lease_owner IS NULL OR lease_expires_at_ms <= :now_ms)
ORDER BY COALESCE(wake_at_ms, created_at_ms) LIMIT :limit;

-- name: insert_inbox
INSERT INTO inbox (message_id, run_id, kind, body, at_ms)
VALUES (:message_id, :run_id, :kind, :body, :now_ms)
ON CONFLICT (message_id) DO NOTHING;

-- name: wake_run
UPDATE runs SET wake_at_ms = :now_ms, updated_at_ms = :now_ms
WHERE run_id = :run_id AND status = 'waiting';

-- name: reopen_run
UPDATE runs SET status = 'pending', wake_at_ms = :now_ms, updated_at_ms = :now_ms
WHERE run_id = :run_id AND status = 'finished' AND outcome IN ('unresolved', 'blocked');

-- name: inbox_owner
SELECT run_id FROM inbox WHERE message_id = :message_id;

-- name: pending_inbox
SELECT message_id, kind, body, at_ms FROM inbox
WHERE run_id = :run_id AND consumed_seq IS NULL ORDER BY at_ms, message_id;

-- name: consume_inbox
UPDATE inbox SET consumed_seq = :seq WHERE message_id = :message_id AND consumed_seq IS NULL;

-- name: count_pending_inbox
SELECT count(*) FROM inbox WHERE run_id = :run_id AND consumed_seq IS NULL;

-- name: get_checkpoint_seq
SELECT checkpoint_seq FROM runs WHERE run_id = :run_id;

-- name: lock_run
SELECT run_id FROM runs WHERE run_id = :run_id;

-- name: claim_next
-- A waiting run whose lease was never released (its executor died mid-execution, say right
-- after moving the wake signal into the history) is taken again once that lease expires.
-- :accept ({workflow: [versions]} as JSON, or NULL) and :exclude (JSON list of run ids) limit
-- the claim to runs this worker can execute and has not backed off from.
UPDATE runs
SET lease_owner = :owner, lease_epoch = lease_epoch + 1,
    lease_expires_at_ms = :now_ms + :ttl_ms, updated_at_ms = :now_ms
WHERE run_id = (
    SELECT run_id FROM runs
    WHERE (status IN ('pending', 'running')
           OR (status = 'waiting' AND (wake_at_ms <= :now_ms OR lease_owner IS NOT NULL)))
      AND (lease_owner IS NULL OR lease_expires_at_ms <= :now_ms)
      AND (:accept IS NULL OR EXISTS (
           SELECT 1 FROM json_each(:accept) AS w, json_each(w.value) AS v
           WHERE w.key = runs.workflow AND v.value = runs.version))
      AND run_id NOT IN (SELECT value FROM json_each(:exclude))
    ORDER BY COALESCE(wake_at_ms, created_at_ms)
    LIMIT 1
)
RETURNING run_id, lease_epoch, lease_expires_at_ms;

-- name: notify_wake
SELECT :run_id;

-- name: next_wake_at
SELECT min(wake_at_ms) FROM runs
WHERE status = 'waiting' AND wake_at_ms IS NOT NULL
  AND (:accept IS NULL OR EXISTS (
       SELECT 1 FROM json_each(:accept) AS w, json_each(w.value) AS v
       WHERE w.key = runs.workflow AND v.value = runs.version));

-- name: db_now_ms
SELECT :now_ms;
