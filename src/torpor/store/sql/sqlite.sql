-- Named queries of the SQLite backend. Each block starts with `-- name: <name>`; the PostgreSQL
-- file beside this one defines the same names. Parameters are `:name`; `:now_ms` is the store's
-- clock (on PostgreSQL the database clock is used instead).

-- name: schema_version
SELECT version FROM torpor_schema ORDER BY version DESC LIMIT 1;

-- name: insert_run
INSERT INTO runs (run_id, workflow, version, status, created_at_ms, updated_at_ms, last_seq,
                  scope, task_type)
VALUES (:run_id, :workflow, :version, 'pending', :now_ms, :now_ms, 1, :scope, :task_type)
ON CONFLICT (run_id) DO NOTHING;

-- name: insert_event
-- An insert inside a transaction that already fenced the run (fence_row).
INSERT INTO events (run_id, seq, type, step_id, epoch, at_ms, v, payload, effect_key)
VALUES (:run_id, :seq, :type, :step_id, :epoch, :at_ms, :v, :payload, :effect_key);

-- name: append_event
-- A plain append of one event, a transaction of its own: inserted only while the run row names
-- the writer's lease (owner, epoch, unexpired) — a read of the row, which stays untouched — and
-- refused by the primary key when the seq is taken (another writer got there first).
INSERT INTO events (run_id, seq, type, step_id, epoch, at_ms, v, payload, effect_key)
SELECT :run_id, :seq, :type, :step_id, :epoch, :at_ms, :v, :payload, :effect_key
WHERE EXISTS (
    SELECT 1 FROM runs
    WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch
      AND lease_expires_at_ms > :now_ms
);

-- name: append_events
-- append_event for several events: :events is a JSON array of
-- [seq, type, step_id, at_ms, v, payload, effect_key] arrays.
INSERT INTO events (run_id, seq, type, step_id, epoch, at_ms, v, payload, effect_key)
SELECT :run_id, e.value ->> 0, e.value ->> 1, e.value ->> 2, :epoch, e.value ->> 3,
       e.value ->> 4, e.value ->> 5, e.value ->> 6
FROM json_each(:events) AS e
WHERE EXISTS (
    SELECT 1 FROM runs
    WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch
      AND lease_expires_at_ms > :now_ms
);

-- name: fence_row
-- The fenced update of the run row that opens an append which changes it (its status columns,
-- a checkpoint): matches only while the row names the writer's lease. Writes the checkpoint
-- when one is given; returns the checkpoint seq.
UPDATE runs
SET status = :status, outcome = :outcome, wake_at_ms = :wake_at_ms, version = :version,
    attention = :attention, last_seq = :last_seq, updated_at_ms = :now_ms,
    checkpoint_seq = CASE WHEN :checkpoint IS NULL THEN checkpoint_seq ELSE :last_seq END,
    checkpoint = COALESCE(:checkpoint, checkpoint)
WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch
  AND lease_expires_at_ms > :now_ms
RETURNING checkpoint_seq;

-- name: save_checkpoint
UPDATE runs SET checkpoint_seq = :checkpoint_seq, checkpoint = :checkpoint
WHERE run_id = :run_id;

-- name: performed_effect
-- Whether an idempotency key was ever performed in this run (observed, or reconciled applied).
SELECT seq FROM events INDEXED BY events_effect_key
WHERE run_id = :run_id AND effect_key = :key;

-- name: get_run
-- last_seq and updated_at_ms are those of the latest event: plain appends leave the row alone.
SELECT run_id, workflow, version, status, outcome, created_at_ms,
       max(updated_at_ms, (SELECT at_ms FROM events e WHERE e.run_id = runs.run_id
                           ORDER BY seq DESC LIMIT 1)),
       wake_at_ms, lease_owner, lease_epoch, lease_expires_at_ms,
       (SELECT max(seq) FROM events e WHERE e.run_id = runs.run_id),
       checkpoint_seq, attention, infra_retries
FROM runs WHERE run_id = :run_id;

-- name: get_checkpoint
SELECT checkpoint_seq, checkpoint, last_seq FROM runs WHERE run_id = :run_id;

-- name: lease_commit_mode
-- First statement of a transaction that only moves a lease (see SQLStore._lease_transaction):
-- nothing to relax here (synchronous is per connection).
SELECT 1;

-- name: acquire_lease
UPDATE runs
SET lease_taken_from = lease_owner, lease_owner = :owner, lease_epoch = lease_epoch + 1,
    lease_expires_at_ms = :now_ms + :ttl_ms, updated_at_ms = :now_ms
WHERE run_id = :run_id
  AND (lease_owner IS NULL OR lease_expires_at_ms <= :now_ms OR lease_owner = :owner
       OR (lease_owner = :stale_owner AND lease_epoch = :stale_epoch))
RETURNING lease_epoch, lease_taken_from;

-- name: renew_lease
UPDATE runs SET lease_expires_at_ms = :now_ms + :ttl_ms
WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch
  AND lease_expires_at_ms > :now_ms;

-- name: release_lease
UPDATE runs SET lease_owner = NULL, lease_expires_at_ms = 0, updated_at_ms = :now_ms
WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch;

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
SELECT run_id, workflow, version, status, outcome, created_at_ms,
       max(updated_at_ms, (SELECT at_ms FROM events e WHERE e.run_id = runs.run_id
                           ORDER BY seq DESC LIMIT 1)),
       wake_at_ms, lease_owner, lease_epoch, lease_expires_at_ms,
       (SELECT max(seq) FROM events e WHERE e.run_id = runs.run_id),
       checkpoint_seq, attention, infra_retries
FROM runs
WHERE (:status IS NULL OR status = :status) AND (:outcome IS NULL OR outcome = :outcome)
  AND (:workflow IS NULL OR workflow = :workflow)
  AND (:attention IS NULL OR (attention IS NOT NULL) = :attention)
ORDER BY created_at_ms DESC, run_id LIMIT :limit;

-- name: count_runs
-- Runs per (status, outcome, needs attention): the console's counts.
SELECT status, outcome, attention IS NOT NULL, count(*) FROM runs
WHERE (:workflow IS NULL OR workflow = :workflow)
GROUP BY status, outcome, attention IS NOT NULL;

-- name: run_storage
-- What a run occupies in the database: its events (count, payload bytes), its engine checkpoint
-- and its inbox (count, body bytes), as stored (UTF-8 text).
SELECT (SELECT count(*) FROM events WHERE run_id = :run_id),
       (SELECT COALESCE(sum(length(CAST(payload AS BLOB))), 0) FROM events WHERE run_id = :run_id),
       (SELECT COALESCE(length(CAST(checkpoint AS BLOB)), 0) FROM runs WHERE run_id = :run_id),
       (SELECT count(*) FROM inbox WHERE run_id = :run_id),
       (SELECT COALESCE(sum(length(CAST(body AS BLOB))), 0) FROM inbox WHERE run_id = :run_id);

-- name: runnable_runs
SELECT run_id FROM runs
WHERE (status IN ('pending', 'running')
       OR (status = 'waiting' AND (wake_at_ms <= :now_ms OR lease_owner IS NOT NULL)))
  AND (lease_owner IS NULL OR lease_expires_at_ms <= :now_ms)
ORDER BY COALESCE(wake_at_ms, created_at_ms) LIMIT :limit;

-- name: insert_inbox
-- arrival: the run's messages in the order they got in (under the write lock).
INSERT INTO inbox (message_id, run_id, kind, body, at_ms, arrival)
VALUES (:message_id, :run_id, :kind, :body, :now_ms,
        (SELECT COALESCE(max(arrival), 0) + 1 FROM inbox WHERE run_id = :run_id))
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
WHERE run_id = :run_id AND consumed_seq IS NULL ORDER BY arrival;

-- name: consume_inbox
UPDATE inbox SET consumed_seq = :seq WHERE message_id = :message_id AND consumed_seq IS NULL;

-- name: count_pending_inbox
SELECT count(*) FROM inbox WHERE run_id = :run_id AND consumed_seq IS NULL;

-- name: lock_run
-- (Inside a write transaction, which holds SQLite's write lock.)
SELECT run_id, status, outcome FROM runs WHERE run_id = :run_id;

-- name: claim_next
-- A waiting run whose lease was never released (its executor died mid-execution, say right
-- after moving the wake signal into the history) is taken again once that lease expires.
-- :accept ({workflow: [versions]} as JSON, or NULL) and :exclude (JSON list of run ids) limit
-- the claim to runs this worker can execute and has not backed off from.
UPDATE runs
SET lease_taken_from = lease_owner, lease_owner = :owner, lease_epoch = lease_epoch + 1,
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
RETURNING run_id, lease_epoch, lease_taken_from;

-- name: notify_wake
SELECT :run_id;

-- name: next_wake_at
SELECT min(wake_at_ms) FROM runs
WHERE status = 'waiting' AND wake_at_ms IS NOT NULL
  AND (:accept IS NULL OR EXISTS (
       SELECT 1 FROM json_each(:accept) AS w, json_each(w.value) AS v
       WHERE w.key = runs.workflow AND v.value = runs.version));

-- name: unrunnable_versions
-- Runnable runs of the workflows in :accept ({workflow: [versions]}) recorded under a version
-- this code cannot continue, whose needs-attention detail does not say so yet.
SELECT run_id, version FROM runs
WHERE (status IN ('pending', 'running')
       OR (status = 'waiting' AND (wake_at_ms <= :now_ms OR lease_owner IS NOT NULL)))
  AND (lease_owner IS NULL OR lease_expires_at_ms <= :now_ms)
  AND workflow IN (SELECT key FROM json_each(:accept))
  AND NOT EXISTS (
       SELECT 1 FROM json_each(:accept) AS w, json_each(w.value) AS v
       WHERE w.key = runs.workflow AND v.value = runs.version)
  AND (attention IS NULL OR attention NOT LIKE 'version mismatch%')
LIMIT :limit;

-- name: held_on_host
-- Runs whose lease is held by an owner on a host (owner ids start with 'host:'), whatever
-- its expiry: a worker takes over those whose holder it proves dead.
SELECT run_id, lease_owner, lease_epoch, workflow, version FROM runs
WHERE lease_owner LIKE :host_prefix ESCAPE '\' AND status != 'finished'
LIMIT :limit;

-- name: note_infra_retry
UPDATE runs SET infra_retries = infra_retries + 1 WHERE run_id = :run_id;
