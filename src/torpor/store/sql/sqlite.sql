-- Named queries of the SQLite backend. Each block starts with `-- name: <name>`; the PostgreSQL
-- file beside this one defines the same names. Parameters are `:name`; `:now_ms` is the store's
-- clock (on PostgreSQL the database clock is used instead).

-- name: schema_version
SELECT version FROM torpor_schema ORDER BY version DESC LIMIT 1;

-- name: insert_run
INSERT INTO runs (run_id, workflow, version, status, created_at_ms, updated_at_ms, last_seq,
                  queue, concurrency_key, priority, not_before_ms, scope, task_type)
VALUES (:run_id, :workflow, :version, 'pending', :now_ms, :now_ms, 1,
        :queue, :key, :priority, :not_before_ms, :scope, :task_type)
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

-- name: run_damage
-- A fragment, included by name in double braces: the first number column of a run row that holds
-- something else (SQLite stores any value in any column: a hand edit such as
-- not_before_ms = 'soon'), as 'column=value', or NULL for a sound row.
CASE
  WHEN typeof(created_at_ms) <> 'integer' THEN 'created_at_ms=' || substr(quote(created_at_ms), 1, 40)
  WHEN typeof(updated_at_ms) <> 'integer' THEN 'updated_at_ms=' || substr(quote(updated_at_ms), 1, 40)
  WHEN typeof(wake_at_ms) NOT IN ('integer', 'null') THEN 'wake_at_ms=' || substr(quote(wake_at_ms), 1, 40)
  WHEN typeof(lease_epoch) <> 'integer' THEN 'lease_epoch=' || substr(quote(lease_epoch), 1, 40)
  WHEN typeof(lease_expires_at_ms) <> 'integer'
       THEN 'lease_expires_at_ms=' || substr(quote(lease_expires_at_ms), 1, 40)
  WHEN typeof(checkpoint_seq) <> 'integer' THEN 'checkpoint_seq=' || substr(quote(checkpoint_seq), 1, 40)
  WHEN typeof(infra_retries) <> 'integer' THEN 'infra_retries=' || substr(quote(infra_retries), 1, 40)
  WHEN typeof(priority) <> 'integer' THEN 'priority=' || substr(quote(priority), 1, 40)
  WHEN typeof(not_before_ms) NOT IN ('integer', 'null')
       THEN 'not_before_ms=' || substr(quote(not_before_ms), 1, 40)
  WHEN typeof(started_at_ms) NOT IN ('integer', 'null')
       THEN 'started_at_ms=' || substr(quote(started_at_ms), 1, 40)
END

-- name: get_run
-- last_seq and updated_at_ms are those of the latest event: plain appends leave the row alone.
SELECT run_id, workflow, version, status, outcome, created_at_ms,
       max(updated_at_ms, (SELECT at_ms FROM events e WHERE e.run_id = runs.run_id
                           ORDER BY seq DESC LIMIT 1)),
       wake_at_ms, lease_owner, lease_epoch, lease_expires_at_ms,
       (SELECT max(seq) FROM events e WHERE e.run_id = runs.run_id),
       checkpoint_seq, attention, infra_retries,
       -- a number column that holds something else (a hand-edited row): 'column=value', or NULL
       {{ run_damage }}
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
    lease_expires_at_ms = :now_ms + :ttl_ms, updated_at_ms = :now_ms,
    started_at_ms = CASE WHEN :starts THEN COALESCE(started_at_ms, :now_ms) ELSE started_at_ms END
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

-- name: store_identity
-- The store's identity (migration 0014): (store id, created at ms), one row.
SELECT store_id, created_at_ms FROM store_identity WHERE one = 1;

-- name: recorded_seq
-- The seq the run row last recorded (a status change, a checkpoint): the history reaches it.
SELECT last_seq FROM runs WHERE run_id = :run_id;

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

-- name: listed_run
-- A fragment: the columns of a listed run (list_runs, list_runs_attention).
run_id, workflow, version, status, outcome, created_at_ms,
       max(updated_at_ms, (SELECT at_ms FROM events e WHERE e.run_id = runs.run_id
                           ORDER BY seq DESC LIMIT 1)),
       wake_at_ms, lease_owner, lease_epoch, lease_expires_at_ms,
       (SELECT max(seq) FROM events e WHERE e.run_id = runs.run_id),
       checkpoint_seq, attention, infra_retries,
       {{ run_damage }}

-- name: list_runs
SELECT {{ listed_run }}
FROM runs
WHERE (:status IS NULL OR status = :status) AND (:outcome IS NULL OR outcome = :outcome)
  AND (:workflow IS NULL OR workflow = :workflow)
  AND (:attention IS NULL OR (attention IS NOT NULL) = :attention)
ORDER BY created_at_ms DESC, run_id LIMIT :limit;

-- name: list_runs_attention
-- `ls --attention`: the newest runs that need attention, a walk of runs_attention (migration
-- 0022, a partial index of those runs alone) that stops at the page.
SELECT {{ listed_run }}
FROM runs
WHERE attention IS NOT NULL
  AND (:status IS NULL OR status = :status) AND (:outcome IS NULL OR outcome = :outcome)
  AND (:workflow IS NULL OR workflow = :workflow)
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
-- (`resume --all`): runs not yet started in a queue with limits are left to workers, which
-- start them under those limits.
SELECT run_id FROM runs
WHERE (status IN ('pending', 'running')
       OR (status = 'waiting' AND (wake_at_ms <= :now_ms OR lease_owner IS NOT NULL)))
  AND (lease_owner IS NULL OR lease_expires_at_ms <= :now_ms)
  AND (not_before_ms IS NULL OR not_before_ms <= :now_ms)
  AND (queue IS NULL OR started_at_ms IS NOT NULL OR NOT EXISTS (
       SELECT 1 FROM queues q WHERE q.name = runs.queue AND (
           q.concurrency IS NOT NULL OR q.key_concurrency IS NOT NULL
           OR q.rate_limit IS NOT NULL OR q.key_rate_limit IS NOT NULL)))
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
-- A run of a queue reopened from a terminal outcome gave its slot back when it finished: it
-- claims one again (started_at_ms cleared), under its queue's limits, like a new run.
UPDATE runs SET status = 'pending', wake_at_ms = :now_ms, updated_at_ms = :now_ms,
    started_at_ms = CASE WHEN queue IS NULL THEN started_at_ms ELSE NULL END
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
-- the claim to runs this worker can execute and has not backed off from. A delayed run is not
-- taken before its not_before_ms; a run of a queue that has not started yet only while every
-- limit of its queue has room (a started run holds its slot: taking it over needs no room).
-- The limits are checked once per queue (`qfull`) and once per (queue, key) (`kfull`) among
-- the candidates, not once per candidate: a thousand runs waiting behind one key cost one
-- count. Under the write lock of BEGIN IMMEDIATE the counts cannot change before the update
-- lands. Returns (0, run id, epoch, taken from, needs a checked claim: always 0 here, queue),
-- or no row (:top_k and :skip_queues are PostgreSQL's).
-- A takeover (a started run of a queue whose holder never released its lease) is a new start
-- of its work: it waits for room in its queue's rate windows among the other runs' starts (not
-- for the concurrency limits: it holds its slot) and restamps started_at_ms, so the runs that
-- start after it count it (issue 36: a limit holds across a takeover).
UPDATE runs
SET lease_taken_from = lease_owner, lease_owner = :owner, lease_epoch = lease_epoch + 1,
    lease_expires_at_ms = :now_ms + :ttl_ms, updated_at_ms = :now_ms,
    started_at_ms = CASE WHEN lease_owner IS NOT NULL AND queue IS NOT NULL THEN :now_ms
                         ELSE COALESCE(started_at_ms, :now_ms) END
WHERE run_id = (
    WITH cand AS MATERIALIZED (
        SELECT run_id, queue, concurrency_key, started_at_ms, priority, lease_owner,
               COALESCE(wake_at_ms, created_at_ms) AS due, rowid AS n
        FROM runs r
        -- three arms, each an index search (runs_dispatch twice, runs_held): not every
        -- waiting run visited to find the due and the still-leased ones (issue 48)
        WHERE (status IN ('pending', 'running')
               OR (status = 'waiting' AND wake_at_ms <= :now_ms)
               OR (status = 'waiting' AND lease_owner IS NOT NULL))
          -- An expired lease whose holder's OS lock is held (alive) is not taken, unless
          -- that holder is hung (torpor_may_take: torpor.store.sqlite_leases).
          AND (lease_owner IS NULL OR (lease_expires_at_ms <= :now_ms AND torpor_may_take(
               run_id, lease_owner, lease_epoch, lease_expires_at_ms, :ttl_ms)))
          AND (:accept IS NULL OR EXISTS (
               SELECT 1 FROM json_each(:accept) AS w, json_each(w.value) AS v
               WHERE w.key = r.workflow AND v.value = r.version))
          AND run_id NOT IN (SELECT value FROM json_each(:exclude))
          AND (not_before_ms IS NULL OR not_before_ms <= :now_ms)
    ), qfull AS MATERIALIZED (
        SELECT q.name FROM queues q
        WHERE q.name IN (SELECT queue FROM cand WHERE started_at_ms IS NULL)
          AND ((q.concurrency IS NOT NULL AND q.concurrency <= (
                   SELECT count(*) FROM runs o WHERE o.queue = q.name
                   AND o.started_at_ms IS NOT NULL AND o.status <> 'finished'))
               OR (q.rate_limit IS NOT NULL AND q.rate_limit <= (
                   SELECT count(*) FROM runs o WHERE o.queue = q.name
                   AND o.started_at_ms > :now_ms - q.rate_period_ms)))
    ), ckeys AS MATERIALIZED (
        SELECT DISTINCT queue, concurrency_key AS ckey FROM cand
        WHERE started_at_ms IS NULL AND queue IS NOT NULL AND concurrency_key IS NOT NULL
    ), kfull AS MATERIALIZED (
        SELECT k.queue, k.ckey FROM ckeys k JOIN queues q ON q.name = k.queue
        WHERE (q.key_concurrency IS NOT NULL AND q.key_concurrency <= (
                   SELECT count(*) FROM runs o WHERE o.queue = k.queue
                   AND o.concurrency_key = k.ckey
                   AND o.started_at_ms IS NOT NULL AND o.status <> 'finished'))
              OR (q.key_rate_limit IS NOT NULL AND q.key_rate_limit <= (
                   SELECT count(*) FROM runs o WHERE o.queue = k.queue
                   AND o.concurrency_key = k.ckey
                   AND o.started_at_ms > :now_ms - q.key_rate_period_ms))
    )
    SELECT run_id FROM cand c
    WHERE c.queue IS NULL
       OR (c.started_at_ms IS NOT NULL AND (c.lease_owner IS NULL OR NOT EXISTS (
           SELECT 1 FROM queues q WHERE q.name = c.queue AND (
               (q.rate_limit IS NOT NULL AND q.rate_limit <= (
                   SELECT count(*) FROM runs o WHERE o.queue = q.name AND o.run_id <> c.run_id
                   AND o.started_at_ms > :now_ms - q.rate_period_ms))
               OR (q.key_rate_limit IS NOT NULL AND c.concurrency_key IS NOT NULL
                   AND q.key_rate_limit <= (
                   SELECT count(*) FROM runs o WHERE o.queue = q.name AND o.run_id <> c.run_id
                   AND o.concurrency_key = c.concurrency_key
                   AND o.started_at_ms > :now_ms - q.key_rate_period_ms))))))
       OR (c.started_at_ms IS NULL AND c.queue NOT IN (SELECT name FROM qfull)
           AND NOT EXISTS (SELECT 1 FROM kfull k
                           WHERE k.queue = c.queue AND k.ckey = c.concurrency_key))
    ORDER BY priority DESC, due, n
    LIMIT 1
)
RETURNING 0, run_id, lease_epoch, lease_taken_from, 0, queue;

-- name: notify_wake
SELECT :run_id;

-- name: next_wake_at
-- The earliest timer of a waiting run, or delayed start of a pending one. The timers as a walk
-- of runs_dispatch in deadline order that stops at the first one :accept takes (issue 48: not
-- a min() over every waiting run on each idle worker's poll); the delayed starts likewise, a
-- walk of runs_delayed (migration 0023), not every pending run.
-- (A hand-damaged value that is not a number is left to `ls` and `doctor` to name.)
SELECT min(t) FROM (
    SELECT * FROM (
        SELECT wake_at_ms AS t FROM runs
        WHERE status = 'waiting' AND wake_at_ms IS NOT NULL AND typeof(wake_at_ms) = 'integer'
          AND (:accept IS NULL OR EXISTS (
               SELECT 1 FROM json_each(:accept) AS w, json_each(w.value) AS v
               WHERE w.key = runs.workflow AND v.value = runs.version))
        ORDER BY wake_at_ms LIMIT 1)
    UNION ALL
    SELECT * FROM (
        SELECT not_before_ms FROM runs
        WHERE status = 'pending' AND not_before_ms > :now_ms
          AND typeof(not_before_ms) = 'integer'
          AND (:accept IS NULL OR EXISTS (
               SELECT 1 FROM json_each(:accept) AS w, json_each(w.value) AS v
               WHERE w.key = runs.workflow AND v.value = runs.version))
        ORDER BY not_before_ms LIMIT 1));

-- name: damaged_runs
-- Run rows with a number column that holds something else (SQLite stores any value in any
-- column: a hand edit such as not_before_ms = 'soon'): (run id, 'column=value').
SELECT run_id, damage FROM (SELECT run_id, {{ run_damage }} AS damage FROM runs)
WHERE damage IS NOT NULL ORDER BY run_id LIMIT :limit;

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

-- name: set_trace_context
UPDATE runs SET trace_context = :trace_context WHERE run_id = :run_id AND trace_context IS NULL;

-- name: get_trace_context
SELECT trace_context FROM runs WHERE run_id = :run_id;

-- name: queue_upsert
-- Define a queue's limits, or replace them.
INSERT INTO queues (name, concurrency, key_concurrency, rate_limit, rate_period_ms,
                    key_rate_limit, key_rate_period_ms, updated_at_ms)
VALUES (:name, CAST(:concurrency AS integer), CAST(:key_concurrency AS integer),
        CAST(:rate_limit AS integer), CAST(:rate_period_ms AS bigint),
        CAST(:key_rate_limit AS integer), CAST(:key_rate_period_ms AS bigint), :now_ms)
ON CONFLICT (name) DO UPDATE SET
    concurrency = excluded.concurrency, key_concurrency = excluded.key_concurrency,
    rate_limit = excluded.rate_limit, rate_period_ms = excluded.rate_period_ms,
    key_rate_limit = excluded.key_rate_limit, key_rate_period_ms = excluded.key_rate_period_ms,
    updated_at_ms = excluded.updated_at_ms;

-- name: queue_get
SELECT name, concurrency, key_concurrency, rate_limit, rate_period_ms, key_rate_limit,
       key_rate_period_ms
FROM queues WHERE name = :name;

-- name: queue_list
SELECT name, concurrency, key_concurrency, rate_limit, rate_period_ms, key_rate_limit,
       key_rate_period_ms
FROM queues ORDER BY name;

-- name: queue_delete
DELETE FROM queues WHERE name = :name;

-- name: queue_columns
-- Every run's queue columns (torpor doctor checks them).
SELECT run_id, status, queue, concurrency_key, priority, not_before_ms, started_at_ms
FROM runs ORDER BY run_id LIMIT :limit;

-- name: queue_damaged_pending
-- Pending runs whose queue columns were edited into values of the wrong type (a worker names
-- them once: the claim never takes them).
SELECT run_id, status, queue, concurrency_key, priority, not_before_ms, started_at_ms
FROM runs
WHERE status = 'pending'
  AND (typeof(not_before_ms) NOT IN ('integer', 'null')
       OR typeof(started_at_ms) NOT IN ('integer', 'null')
       OR typeof(priority) <> 'integer'
       OR typeof(queue) NOT IN ('text', 'null')
       OR typeof(concurrency_key) NOT IN ('text', 'null'))
LIMIT :limit;

-- name: queue_run
-- What decides whether a run waits for its queue.
SELECT status, queue, concurrency_key, priority, not_before_ms, started_at_ms
FROM runs WHERE run_id = :run_id;

-- name: queue_active
-- The runs holding a slot of a queue (started, not finished), first started first.
SELECT run_id, concurrency_key, started_at_ms FROM runs
WHERE queue = :queue AND started_at_ms IS NOT NULL AND status <> 'finished'
ORDER BY started_at_ms, run_id LIMIT :limit;

-- name: queue_recent_starts
-- Runs of a queue started after :since_ms, latest first.
SELECT run_id, concurrency_key, started_at_ms FROM runs
WHERE queue = :queue AND started_at_ms > :since_ms
ORDER BY started_at_ms DESC LIMIT :limit;

-- name: schedule_upsert
-- Define a schedule, or replace it (a new generation: a worker holding the old definition
-- cannot move its next fire on).
INSERT INTO schedules (name, workflow, input, cron, tz, catchup, queue, paused, next_fire_ms,
                       last_fire_ms, generation, updated_at_ms)
VALUES (:name, :workflow, :input, :cron, :tz, :catchup, CAST(:queue AS text), 0,
        :next_fire_ms, NULL, 1, :now_ms)
ON CONFLICT (name) DO UPDATE SET
    workflow = excluded.workflow, input = excluded.input, cron = excluded.cron,
    tz = excluded.tz, catchup = excluded.catchup, queue = excluded.queue,
    next_fire_ms = excluded.next_fire_ms, generation = schedules.generation + 1, last_error = NULL,
    retry_at_ms = NULL,
    updated_at_ms = excluded.updated_at_ms;

-- name: schedule_get
SELECT name, workflow, input, cron, tz, catchup, queue, paused, next_fire_ms, last_fire_ms,
       generation, last_error, retry_at_ms
FROM schedules WHERE name = :name;

-- name: schedule_list
SELECT name, workflow, input, cron, tz, catchup, queue, paused, next_fire_ms, last_fire_ms,
       generation, last_error, retry_at_ms
FROM schedules ORDER BY name;

-- name: schedule_delete
DELETE FROM schedules WHERE name = :name;

-- name: schedule_pause
-- Pause, or resume with the next fire recomputed by the caller (:next_fire_ms).
UPDATE schedules SET paused = CAST(:paused AS integer), generation = generation + 1,
    retry_at_ms = NULL,
    last_error = CASE WHEN CAST(:paused AS integer) = 0 THEN NULL ELSE last_error END,
    next_fire_ms = COALESCE(CAST(:next_fire_ms AS bigint), next_fire_ms), updated_at_ms = :now_ms
WHERE name = :name;

-- name: schedule_due
-- Schedules not paused whose next fire is due by :now_ms.
SELECT name, workflow, input, cron, tz, catchup, queue, paused, next_fire_ms, last_fire_ms,
       generation, last_error, retry_at_ms
FROM schedules WHERE paused = 0 AND next_fire_ms <= :now_ms
  AND (retry_at_ms IS NULL OR retry_at_ms <= :now_ms)
ORDER BY next_fire_ms LIMIT :limit;

-- name: schedule_next_fire
-- (A hand-damaged value that is not a number is left to `schedule ls` and `doctor` to name.)
SELECT min(max(next_fire_ms, coalesce(retry_at_ms, next_fire_ms))) FROM schedules
WHERE paused = 0 AND typeof(next_fire_ms) = 'integer';

-- name: schedule_advance
-- Move a schedule past the slots a worker fired: only if no one else did, and it was not edited
-- since the worker read it (compare-and-set on next fire and generation).
UPDATE schedules SET next_fire_ms = :next_fire_ms, last_error = NULL, retry_at_ms = NULL,
    last_fire_ms = COALESCE(CAST(:last_fire_ms AS bigint), last_fire_ms), updated_at_ms = :now_ms
WHERE name = :name AND generation = :generation AND next_fire_ms = :prev_fire_ms;

-- name: schedule_fail
-- Record why a schedule could not fire and when to try again (its next fire kept): only if no
-- one else moved it on, and it was not edited since the worker read it (the values as read,
-- even damaged ones).
UPDATE schedules SET retry_at_ms = :retry_at_ms, last_error = :error, updated_at_ms = :now_ms
WHERE name = :name AND generation = :generation AND next_fire_ms = :prev_fire_ms;

-- name: insert_chunk
-- A content-addressed chunk (store/chunks.py), written once; a writer that writes it again
-- refreshes when it was last used (garbage collection spares it for the grace period).
INSERT INTO chunks (hash, data, size, used_at_ms) VALUES (:hash, :data, :size, :now_ms)
ON CONFLICT (hash) DO UPDATE SET used_at_ms = excluded.used_at_ms
WHERE chunks.used_at_ms < excluded.used_at_ms;

-- name: insert_ref
INSERT INTO blob_refs (hash, run_id, kind, size) VALUES (:hash, :run_id, :kind, :size)
ON CONFLICT DO NOTHING;

-- name: get_chunk
SELECT data FROM chunks WHERE hash = :hash;

-- name: retention_policies
SELECT workflow, keep_days, keep_last, archive_url FROM retention ORDER BY workflow;

-- name: set_retention
INSERT INTO retention (workflow, keep_days, keep_last, archive_url, updated_at_ms)
VALUES (:workflow, :keep_days, :keep_last, :archive_url, :now_ms)
ON CONFLICT (workflow) DO UPDATE
SET keep_days = excluded.keep_days, keep_last = excluded.keep_last,
    archive_url = excluded.archive_url, updated_at_ms = excluded.updated_at_ms;

-- name: delete_retention
DELETE FROM retention WHERE workflow = :workflow;

-- name: expired_runs
-- Finished runs of a workflow past its retention: finished (last written) before :before_ms,
-- or not among its :keep_last most recently finished. Never a run that is not finished, nor
-- one a person can still reopen (unresolved, blocked); those are not counted either.
SELECT run_id FROM (
    SELECT run_id, updated_at_ms,
           row_number() OVER (ORDER BY updated_at_ms DESC, run_id DESC) AS n
    FROM runs
    WHERE workflow = :workflow AND status = 'finished'
      AND outcome NOT IN ('unresolved', 'blocked')
) AS r
WHERE (:before_ms IS NOT NULL AND updated_at_ms < :before_ms)
   OR (:keep_last IS NOT NULL AND n > :keep_last)
ORDER BY updated_at_ms, run_id LIMIT :limit;

-- name: delete_run
-- The run row, only while it is finished and not reopenable (checked under the write lock).
DELETE FROM runs
WHERE run_id = :run_id AND status = 'finished' AND outcome NOT IN ('unresolved', 'blocked')
RETURNING run_id;

-- name: delete_run_events
DELETE FROM events WHERE run_id = :run_id;

-- name: delete_run_inbox
DELETE FROM inbox WHERE run_id = :run_id;

-- name: delete_run_refs
DELETE FROM blob_refs WHERE run_id = :run_id;

-- name: collectable_chunks
-- Chunks no run (or other owner) refers to, unused for the grace period.
SELECT count(*), COALESCE(sum(size), 0) FROM chunks
WHERE used_at_ms < :now_ms - :grace_ms
  AND hash NOT IN (SELECT hash FROM blob_refs WHERE kind = 'chunk');

-- name: collect_chunks
DELETE FROM chunks
WHERE used_at_ms < :now_ms - :grace_ms
  AND hash NOT IN (SELECT hash FROM blob_refs WHERE kind = 'chunk');

-- name: referenced_artifacts
SELECT DISTINCT hash FROM blob_refs WHERE kind = 'artifact';

-- name: run_references
-- Every reference of every run in the store (not other owners': episodes), with whether a
-- referenced chunk is in the chunks table (for ``torpor doctor``).
SELECT r.run_id, r.kind, r.hash, r.size,
       CASE WHEN r.kind <> 'chunk' THEN 1
            WHEN EXISTS (SELECT 1 FROM chunks c WHERE c.hash = r.hash) THEN 1 ELSE 0 END
FROM blob_refs r JOIN runs ru ON ru.run_id = r.run_id
ORDER BY r.run_id, r.kind, r.hash LIMIT :limit;

-- name: pending_bodies
SELECT body FROM inbox WHERE consumed_seq IS NULL;

-- name: restore_run
INSERT INTO runs (run_id, workflow, version, status, outcome, created_at_ms, updated_at_ms,
                  wake_at_ms, last_seq, checkpoint_seq, checkpoint, attention, lease_epoch,
                  infra_retries)
VALUES (:run_id, :workflow, :version, :status, :outcome, :created_at_ms, :updated_at_ms,
        :wake_at_ms, :last_seq, :checkpoint_seq, :checkpoint, :attention, :lease_epoch,
        :infra_retries)
ON CONFLICT (run_id) DO NOTHING;

-- name: run_blob_bytes
-- Bytes of the chunks and of the artifacts a run refers to (each counted once per run).
SELECT COALESCE(sum(CASE WHEN kind = 'chunk' THEN size ELSE 0 END), 0),
       COALESCE(sum(CASE WHEN kind = 'artifact' THEN size ELSE 0 END), 0)
FROM blob_refs WHERE run_id = :run_id;

-- name: largest_runs
-- Runs by what they occupy: history payloads + checkpoint + chunks and artifacts referred to.
SELECT r.run_id, r.workflow, r.status, r.outcome,
       COALESCE((SELECT sum(length(CAST(payload AS BLOB))) FROM events e
                 WHERE e.run_id = r.run_id), 0) AS history,
       COALESCE(length(CAST(r.checkpoint AS BLOB)), 0) AS ckpt,
       COALESCE((SELECT sum(size) FROM blob_refs b WHERE b.run_id = r.run_id
                 AND b.kind = 'chunk'), 0) AS chunked,
       COALESCE((SELECT sum(size) FROM blob_refs b WHERE b.run_id = r.run_id
                 AND b.kind = 'artifact'), 0) AS artifacts
FROM runs r
WHERE (:workflow IS NULL OR r.workflow = :workflow)
ORDER BY history + ckpt + chunked + artifacts DESC, r.run_id LIMIT :limit;

-- name: event_at
-- One event by its seq (the user checkpoint an engine checkpoint refers to).
SELECT seq, type, epoch, at_ms, v, payload FROM events WHERE run_id = :run_id AND seq = :seq;

-- name: get_chunks
-- Several chunks at once (:hashes: a JSON array of hex hashes).
SELECT hash, data FROM chunks WHERE hash IN (SELECT value FROM json_each(:hashes));

-- name: child_set_parent
-- Child runs (issue 37, store/children.py): the run whose step started this one.
UPDATE runs SET parent_run_id = :parent WHERE run_id = :run_id;

-- name: child_parent
SELECT parent_run_id FROM runs WHERE run_id = :run_id;

-- name: child_runs
SELECT run_id, workflow, version, status, outcome, created_at_ms,
       max(updated_at_ms, (SELECT at_ms FROM events e WHERE e.run_id = runs.run_id
                           ORDER BY seq DESC LIMIT 1)),
       wake_at_ms, lease_owner, lease_epoch, lease_expires_at_ms,
       (SELECT max(seq) FROM events e WHERE e.run_id = runs.run_id),
       checkpoint_seq, attention, infra_retries,
       {{ run_damage }}
FROM runs WHERE parent_run_id = :parent
ORDER BY created_at_ms, rowid LIMIT :limit;

-- name: child_tell_parent
-- A child's outcome, posted to its parent's inbox in the transaction that records it (an
-- unfinished parent only: a finished run takes no message).
INSERT INTO inbox (message_id, run_id, kind, body, at_ms, arrival)
SELECT :message_id, p.run_id, 'child', :body, :now_ms,
       (SELECT COALESCE(max(arrival), 0) + 1 FROM inbox WHERE run_id = p.run_id)
FROM runs p WHERE p.run_id = :parent AND p.status != 'finished'
ON CONFLICT (message_id) DO NOTHING;

-- name: child_need_lock
-- (Inside a write transaction, which holds SQLite's write lock.)
SELECT child_need FROM runs WHERE run_id = :parent;

-- name: child_final_count
-- How many of the children waited on (:children, a JSON list) have a final outcome.
SELECT count(*) FROM runs
WHERE parent_run_id = :parent AND run_id IN (SELECT value FROM json_each(:children))
  AND status = 'finished' AND outcome NOT IN ('unresolved', 'blocked');

-- name: child_need_set
UPDATE runs SET child_need = :need WHERE run_id = :parent;

-- name: child_need_taken
-- A final child outcome: one fewer needed; returns what is left (NULL: no count kept).
UPDATE runs SET child_need = child_need - 1
WHERE run_id = :parent AND child_need IS NOT NULL
RETURNING child_need;
