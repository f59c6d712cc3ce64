-- Named queries of the PostgreSQL backend: the same names as sqlite.sql beside it. Parameters
-- are `:name` (rewritten to psycopg's %(name)s at load). Lease expiry, fencing and dispatch use
-- the database clock torpor_now_ms(); `:now_ms` is never trusted for them (it stamps events and
-- the arrival of inbox messages, on the clock that fixes wait deadlines). Nullable filter
-- parameters are cast so the server can type them.

-- name: schema_version
SELECT version FROM torpor_schema ORDER BY version DESC LIMIT 1;

-- name: insert_run
INSERT INTO runs (run_id, workflow, version, status, created_at_ms, updated_at_ms, last_seq,
                  scope, task_type)
VALUES (:run_id, :workflow, :version, 'pending', torpor_now_ms(), torpor_now_ms(), 1,
        CAST(:scope AS text), CAST(:task_type AS text))
ON CONFLICT (run_id) DO NOTHING;

-- name: insert_event
-- An insert inside a transaction that already fenced the run (fence_row).
INSERT INTO events (run_id, seq, type, step_id, epoch, at_ms, v, payload, effect_key)
VALUES (:run_id, :seq, :type, :step_id, :epoch, :at_ms, :v, :payload,
        CAST(:effect_key AS text));

-- name: append_event
-- A plain append of one event, a transaction of its own (one round trip, one WAL flush):
-- inserted only while the run row names the writer's lease (owner, epoch, unexpired by the
-- database clock) — a read of the row, which stays untouched — and refused by the primary key
-- when the seq is taken (another writer got there first).
INSERT INTO events (run_id, seq, type, step_id, epoch, at_ms, v, payload, effect_key)
SELECT :run_id, :seq, :type, CAST(:step_id AS text), :epoch, :at_ms, :v, :payload,
       CAST(:effect_key AS text)
WHERE EXISTS (
    SELECT 1 FROM runs
    WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch
      AND lease_expires_at_ms > torpor_now_ms()
);

-- name: append_events
-- append_event for several events, given as one array per column.
INSERT INTO events (run_id, seq, type, step_id, epoch, at_ms, v, payload, effect_key)
SELECT :run_id, e.seq, e.type, e.step_id, :epoch, e.at_ms, e.v, e.payload, e.effect_key
FROM unnest(CAST(:seqs AS bigint[]), CAST(:types AS text[]), CAST(:step_ids AS text[]),
            CAST(:at_mss AS bigint[]), CAST(:vs AS integer[]), CAST(:payloads AS text[]),
            CAST(:effect_keys AS text[]))
     AS e(seq, type, step_id, at_ms, v, payload, effect_key)
WHERE EXISTS (
    SELECT 1 FROM runs
    WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch
      AND lease_expires_at_ms > torpor_now_ms()
);

-- name: fence_row
-- The fenced update of the run row that opens an append which changes it (its status columns,
-- a checkpoint): matches only while the row names the writer's lease, and takes the row's
-- lock for the rest of the transaction. Writes the checkpoint when one is given; returns the
-- checkpoint seq.
UPDATE runs
SET status = :status, outcome = CAST(:outcome AS text),
    wake_at_ms = CAST(:wake_at_ms AS bigint), version = :version,
    attention = CAST(:attention AS text),
    last_seq = :last_seq, updated_at_ms = torpor_now_ms(),
    checkpoint_seq = CASE WHEN CAST(:checkpoint AS text) IS NULL THEN checkpoint_seq
                          ELSE CAST(:last_seq AS bigint) END,
    checkpoint = COALESCE(CAST(:checkpoint AS text), checkpoint)
WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch
  AND lease_expires_at_ms > torpor_now_ms()
RETURNING checkpoint_seq;

-- name: append_fenced
-- The fenced-row path of an append in one statement, a transaction of its own (one round trip,
-- one WAL flush) — used when the append has no step start to check against the history and no
-- inbox work (an effect's intent, a wait, the outcome): fence_row, refused too when an
-- idempotency key it intends (:intends) was already performed; then the events, inserted only
-- when the fence matched. One row when it landed; none when fenced off or a key was performed.
WITH fence AS (
    UPDATE runs
    SET status = :status, outcome = CAST(:outcome AS text),
        wake_at_ms = CAST(:wake_at_ms AS bigint), version = :version,
    attention = CAST(:attention AS text),
        last_seq = :last_seq, updated_at_ms = torpor_now_ms(),
        checkpoint_seq = CASE WHEN CAST(:checkpoint AS text) IS NULL THEN checkpoint_seq
                              ELSE CAST(:last_seq AS bigint) END,
        checkpoint = COALESCE(CAST(:checkpoint AS text), checkpoint)
    WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch
      AND lease_expires_at_ms > torpor_now_ms()
      AND NOT EXISTS (
          SELECT 1 FROM events
          WHERE run_id = :run_id AND effect_key = ANY(CAST(:intends AS text[])))
    RETURNING checkpoint_seq
), inserted AS (
    INSERT INTO events (run_id, seq, type, step_id, epoch, at_ms, v, payload, effect_key)
    SELECT :run_id, e.seq, e.type, e.step_id, :epoch, e.at_ms, e.v, e.payload, e.effect_key
    FROM fence, unnest(CAST(:seqs AS bigint[]), CAST(:types AS text[]),
                       CAST(:step_ids AS text[]), CAST(:at_mss AS bigint[]),
                       CAST(:vs AS integer[]), CAST(:payloads AS text[]),
                       CAST(:effect_keys AS text[]))
         AS e(seq, type, step_id, at_ms, v, payload, effect_key)
)
SELECT checkpoint_seq FROM fence;

-- name: save_checkpoint
UPDATE runs SET checkpoint_seq = :checkpoint_seq, checkpoint = :checkpoint
WHERE run_id = :run_id;

-- name: performed_effect
-- Whether an idempotency key was ever performed in this run (observed, or reconciled applied).
SELECT seq FROM events WHERE run_id = :run_id AND effect_key = :key;

-- name: get_run
-- last_seq and updated_at_ms are those of the latest event: plain appends leave the row alone.
SELECT run_id, workflow, version, status, outcome, created_at_ms,
       GREATEST(updated_at_ms, (SELECT at_ms FROM events e WHERE e.run_id = runs.run_id
                                ORDER BY seq DESC LIMIT 1)),
       wake_at_ms, lease_owner, lease_epoch, lease_expires_at_ms,
       (SELECT seq FROM events e WHERE e.run_id = runs.run_id ORDER BY seq DESC LIMIT 1),
       checkpoint_seq, attention, infra_retries
FROM runs WHERE run_id = :run_id;

-- name: lock_run
SELECT run_id, status, outcome FROM runs WHERE run_id = :run_id FOR UPDATE;

-- name: get_checkpoint
SELECT checkpoint_seq, checkpoint, last_seq FROM runs WHERE run_id = :run_id;

-- name: lease_commit_mode
-- First statement of a transaction that only moves a lease (see SQLStore._lease_transaction).
SET LOCAL synchronous_commit TO OFF;

-- name: acquire_lease
UPDATE runs
SET lease_taken_from = lease_owner, lease_owner = :owner, lease_epoch = lease_epoch + 1,
    lease_expires_at_ms = torpor_now_ms() + :ttl_ms, updated_at_ms = torpor_now_ms()
WHERE run_id = :run_id
  AND (lease_owner IS NULL OR lease_expires_at_ms <= torpor_now_ms() OR lease_owner = :owner
       OR (lease_owner = CAST(:stale_owner AS text)
           AND lease_epoch = CAST(:stale_epoch AS bigint)))
RETURNING lease_epoch, lease_taken_from;

-- name: claim_next
-- A waiting run whose lease was never released (its executor died mid-execution, say right
-- after moving the wake signal into the history) is taken again once that lease expires.
-- :accept ({workflow: [versions]} as JSON, or NULL) and :exclude (JSON list of run ids) limit
-- the claim to runs this worker can execute and has not backed off from.
UPDATE runs
SET lease_taken_from = lease_owner, lease_owner = :owner, lease_epoch = lease_epoch + 1,
    lease_expires_at_ms = torpor_now_ms() + :ttl_ms, updated_at_ms = torpor_now_ms()
WHERE run_id = (
    SELECT run_id FROM runs
    WHERE (status IN ('pending', 'running')
           OR (status = 'waiting'
               AND (wake_at_ms <= torpor_now_ms() OR lease_owner IS NOT NULL)))
      AND (lease_owner IS NULL OR lease_expires_at_ms <= torpor_now_ms())
      AND (CAST(:accept AS jsonb) IS NULL OR EXISTS (
           SELECT 1 FROM jsonb_each(CAST(:accept AS jsonb)) AS w(name, versions),
                         jsonb_array_elements_text(w.versions) AS v(version)
           WHERE w.name = runs.workflow AND v.version = runs.version))
      AND NOT (CAST(:exclude AS jsonb) ? run_id)
    ORDER BY COALESCE(wake_at_ms, created_at_ms)
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING run_id, lease_epoch, lease_taken_from;

-- name: renew_lease
UPDATE runs SET lease_expires_at_ms = torpor_now_ms() + :ttl_ms
WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch
  AND lease_expires_at_ms > torpor_now_ms();

-- name: release_lease
UPDATE runs SET lease_owner = NULL, lease_expires_at_ms = 0, updated_at_ms = torpor_now_ms()
WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch;

-- name: events_after
SELECT seq, type, epoch, at_ms, v, payload FROM events
WHERE run_id = :run_id AND seq > :after_seq ORDER BY seq LIMIT :limit;

-- name: completions_after
SELECT step_id, payload, seq FROM events
WHERE run_id = :run_id AND seq > :after_seq AND type = 'step_completed' ORDER BY seq;

-- name: step_completion
SELECT payload, seq FROM events
WHERE run_id = :run_id AND step_id = :step_id AND type = 'step_completed'
ORDER BY seq DESC LIMIT 1;

-- name: step_events
SELECT seq, type, epoch, at_ms, v, payload FROM events
WHERE run_id = :run_id AND step_id = :step_id ORDER BY seq;

-- name: list_runs
SELECT run_id, workflow, version, status, outcome, created_at_ms,
       GREATEST(updated_at_ms, (SELECT at_ms FROM events e WHERE e.run_id = runs.run_id
                                ORDER BY seq DESC LIMIT 1)),
       wake_at_ms, lease_owner, lease_epoch, lease_expires_at_ms,
       (SELECT seq FROM events e WHERE e.run_id = runs.run_id ORDER BY seq DESC LIMIT 1),
       checkpoint_seq, attention, infra_retries
FROM runs
WHERE (CAST(:status AS text) IS NULL OR status = CAST(:status AS text))
  AND (CAST(:outcome AS text) IS NULL OR outcome = CAST(:outcome AS text))
  AND (CAST(:workflow AS text) IS NULL OR workflow = CAST(:workflow AS text))
  AND (CAST(:attention AS boolean) IS NULL
       OR (attention IS NOT NULL) = CAST(:attention AS boolean))
ORDER BY created_at_ms DESC, run_id LIMIT :limit;

-- name: count_runs
-- Runs per (status, outcome, needs attention): the console's counts.
SELECT status, outcome, attention IS NOT NULL, count(*) FROM runs
WHERE (CAST(:workflow AS text) IS NULL OR workflow = CAST(:workflow AS text))
GROUP BY status, outcome, attention IS NOT NULL;

-- name: run_storage
-- What a run occupies in the database: its events (count, payload bytes), its engine checkpoint
-- and its inbox (count, body bytes), as stored (pg_column_size: after TOAST compression).
SELECT (SELECT count(*) FROM events WHERE run_id = :run_id),
       (SELECT COALESCE(sum(pg_column_size(payload)), 0) FROM events WHERE run_id = :run_id),
       (SELECT COALESCE(pg_column_size(checkpoint), 0) FROM runs WHERE run_id = :run_id),
       (SELECT count(*) FROM inbox WHERE run_id = :run_id),
       (SELECT COALESCE(sum(pg_column_size(body)), 0) FROM inbox WHERE run_id = :run_id);

-- name: runnable_runs
SELECT run_id FROM runs
WHERE (status IN ('pending', 'running')
       OR (status = 'waiting'
           AND (wake_at_ms <= torpor_now_ms() OR lease_owner IS NOT NULL)))
  AND (lease_owner IS NULL OR lease_expires_at_ms <= torpor_now_ms())
ORDER BY COALESCE(wake_at_ms, created_at_ms) LIMIT :limit;

-- name: insert_inbox
-- at_ms is when the message arrived, by the store's clock (:now_ms), the clock that fixes wait
-- deadlines and stamps events: a message satisfies a wait only if it arrived before the
-- deadline, so both must be read on one clock (no lease or dispatch decision uses it). `arrival`
-- (its serial default, drawn while post_inbox holds the run row's lock) orders the run's
-- messages as they got in.
INSERT INTO inbox (message_id, run_id, kind, body, at_ms)
VALUES (:message_id, :run_id, :kind, :body, :now_ms)
ON CONFLICT (message_id) DO NOTHING;

-- name: wake_run
UPDATE runs SET wake_at_ms = torpor_now_ms(), updated_at_ms = torpor_now_ms()
WHERE run_id = :run_id AND status = 'waiting';

-- name: reopen_run
UPDATE runs SET status = 'pending', wake_at_ms = torpor_now_ms(), updated_at_ms = torpor_now_ms()
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

-- name: notify_wake
SELECT pg_notify('torpor_wake', :run_id);

-- name: next_wake_at
SELECT min(wake_at_ms) FROM runs
WHERE status = 'waiting' AND wake_at_ms IS NOT NULL
  AND (CAST(:accept AS jsonb) IS NULL OR EXISTS (
       SELECT 1 FROM jsonb_each(CAST(:accept AS jsonb)) AS w(name, versions),
                     jsonb_array_elements_text(w.versions) AS v(version)
       WHERE w.name = runs.workflow AND v.version = runs.version));

-- name: unrunnable_versions
-- Runnable runs of the workflows in :accept ({workflow: [versions]}) recorded under a version
-- this code cannot continue, whose needs-attention detail does not say so yet.
SELECT run_id, version FROM runs
WHERE (status IN ('pending', 'running')
       OR (status = 'waiting'
           AND (wake_at_ms <= torpor_now_ms() OR lease_owner IS NOT NULL)))
  AND (lease_owner IS NULL OR lease_expires_at_ms <= torpor_now_ms())
  AND CAST(:accept AS jsonb) ? workflow
  AND NOT (CAST(:accept AS jsonb) -> workflow) ? version
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
