-- Named queries of the PostgreSQL backend: the same names as sqlite.sql beside it. Parameters
-- are `:name` (rewritten to psycopg's %(name)s at load). Lease expiry, fencing and dispatch use
-- the database clock torpor_now_ms(); `:now_ms` is never trusted for them (it stamps events and
-- the arrival of inbox messages, on the clock that fixes wait deadlines). Nullable filter
-- parameters are cast so the server can type them.

-- name: schema_version
SELECT version FROM torpor_schema ORDER BY version DESC LIMIT 1;

-- name: insert_run
INSERT INTO runs (run_id, workflow, version, status, created_at_ms, updated_at_ms, last_seq,
                  queue, concurrency_key, priority, not_before_ms, scope, task_type)
VALUES (:run_id, :workflow, :version, 'pending', torpor_now_ms(), torpor_now_ms(), 1,
        CAST(:queue AS text), CAST(:key AS text), :priority,
        CAST(:not_before_ms AS bigint), CAST(:scope AS text), CAST(:task_type AS text))
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
       checkpoint_seq, attention, infra_retries,
       NULL  -- damage: PostgreSQL's typed columns hold numbers only (SQLite's can be damaged)
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
    lease_expires_at_ms = torpor_now_ms() + :ttl_ms, updated_at_ms = torpor_now_ms(),
    started_at_ms = CASE WHEN CAST(:starts AS boolean) THEN COALESCE(started_at_ms, torpor_now_ms()) ELSE started_at_ms END
WHERE run_id = :run_id
  AND (lease_owner IS NULL OR lease_expires_at_ms <= torpor_now_ms() OR lease_owner = :owner
       OR (lease_owner = CAST(:stale_owner AS text)
           AND lease_epoch = CAST(:stale_epoch AS bigint)))
RETURNING lease_epoch, lease_taken_from;

-- name: claim_next
-- A waiting run whose lease was never released (its executor died mid-execution, say right
-- after moving the wake signal into the history) is taken again once that lease expires.
-- :accept ({workflow: [versions]} as JSON, or NULL) and :exclude (JSON list of run ids) limit
-- the claim to runs this worker can execute and has not backed off from; :skip_queues (JSON
-- list) leaves out queues found full earlier in this transaction. A delayed run is not taken
-- before its not_before_ms; a run of a queue that has not started yet only while every limit
-- of its queue has room (a started run holds its slot: taking it over needs no room).
-- `top`: the first :top_k runnable runs in claim order, without the limit checks (cheap);
-- only those are checked against their queue's limits (a few count probes each), so a claim
-- costs the same however many runs wait in queues. When none of them can be claimed and there
-- were :top_k, the caller asks again with a larger :top_k (runs further down may be free).
-- The best candidate is locked (SKIP LOCKED: other workers take the next one; its runnable
-- conditions are re-evaluated on the row's latest version) and claimed (`claimed`), unless it
-- is an unstarted run of a queue with limits: the counts this statement saw may be stale by
-- the time it commits (another worker claiming another run of that queue), so such a run is
-- claimed by torpor_claim_checked (migration 0005), which counts again under the queue's lock.
-- A takeover (a started run of a queue whose holder never released its lease) is a new start
-- of its work: in a queue with a rate limit it is claimed by torpor_claim_checked too (migration
-- 0016), which waits for room among the other runs' starts, and it restamps started_at_ms so
-- the runs that start after it count it (issue 36: a limit holds across a takeover).
-- Returns one row: (runs in top, run id, epoch, taken from, needs_check, queue); the run id is
-- NULL when nothing was found, the epoch NULL when the checked claim found no room.
WITH clock AS MATERIALIZED (
    -- committed on its own (autocommit): a lease move needs no WAL flush (see
    -- SQLStore._lease_transaction for why that is safe)
    SELECT torpor_now_ms() AS now_ms, set_config('synchronous_commit', 'off', true) AS mode
),
top AS MATERIALIZED (
    SELECT run_id, queue, concurrency_key, started_at_ms, lease_owner FROM runs r
    -- three arms, each an index search (runs_dispatch twice, runs_held): not every waiting
    -- run visited to find the due and the still-leased ones (issue 48)
    WHERE (status IN ('pending', 'running')
           OR (status = 'waiting' AND wake_at_ms <= (SELECT now_ms FROM clock))
           OR (status = 'waiting' AND lease_owner IS NOT NULL))
      AND (lease_owner IS NULL OR lease_expires_at_ms <= (SELECT now_ms FROM clock))
      AND (CAST(:accept AS jsonb) IS NULL OR EXISTS (
           SELECT 1 FROM jsonb_each(CAST(:accept AS jsonb)) AS w(name, versions),
                         jsonb_array_elements_text(w.versions) AS v(version)
           WHERE w.name = r.workflow AND v.version = r.version))
      AND NOT (CAST(:exclude AS jsonb) ? run_id)
      AND (not_before_ms IS NULL OR not_before_ms <= (SELECT now_ms FROM clock))
    ORDER BY priority DESC, COALESCE(wake_at_ms, created_at_ms), run_seq
    LIMIT :top_k
), qstate AS MATERIALIZED (
    -- The limits of the queues of the unstarted runs in `top`, and whether a queue-wide limit
    -- (concurrency, rate) has no room: counted once per queue, not once per run.
    SELECT q.name,
           -- (each count stops at its limit, read in the order of the index that serves it)
           (q.concurrency IS NOT NULL AND q.concurrency <= (
               SELECT count(*) FROM (
                   SELECT 1 FROM runs o WHERE o.queue = q.name
                   AND o.started_at_ms IS NOT NULL AND o.status <> 'finished'
                   ORDER BY o.queue LIMIT q.concurrency) AS active))
           OR (q.rate_limit IS NOT NULL AND q.rate_limit <= (
               SELECT count(*) FROM (
                   SELECT 1 FROM runs o WHERE o.queue = q.name
                   AND o.started_at_ms > (SELECT now_ms FROM clock) - q.rate_period_ms
                   ORDER BY o.queue, o.started_at_ms LIMIT q.rate_limit) AS recent)) AS full,
           (q.concurrency IS NOT NULL OR q.key_concurrency IS NOT NULL
            OR q.rate_limit IS NOT NULL OR q.key_rate_limit IS NOT NULL) AS limited,
           (q.rate_limit IS NOT NULL OR q.key_rate_limit IS NOT NULL) AS rated
    FROM queues q
    WHERE q.name IN (SELECT queue FROM top WHERE started_at_ms IS NULL OR lease_owner IS NOT NULL)
), ckeys AS MATERIALIZED (
    SELECT DISTINCT queue, concurrency_key AS ckey FROM top
    WHERE started_at_ms IS NULL AND queue IS NOT NULL AND concurrency_key IS NOT NULL
), kfull AS MATERIALIZED (
    -- The (queue, key) pairs of `top` whose per-key limit has no room: the runs holding a slot
    -- counted once per pair (a thousand runs waiting behind one key cost one count), the
    -- recent starts in one pass over the queues' rate windows.
    SELECT k.queue, k.ckey FROM ckeys k JOIN queues q ON q.name = k.queue
    WHERE q.key_concurrency IS NOT NULL AND q.key_concurrency <= (
               SELECT count(*) FROM (
                   SELECT 1 FROM runs o WHERE o.queue = k.queue AND o.concurrency_key = k.ckey
                   AND o.started_at_ms IS NOT NULL AND o.status <> 'finished'
                   ORDER BY o.queue, o.concurrency_key LIMIT q.key_concurrency) AS active)
    UNION
    SELECT o.queue, o.concurrency_key FROM runs o JOIN queues q ON q.name = o.queue
    WHERE q.key_rate_limit IS NOT NULL
      AND o.queue IN (SELECT queue FROM ckeys)
      AND o.started_at_ms > (SELECT now_ms FROM clock) - q.key_rate_period_ms
      AND (o.queue, o.concurrency_key) IN (SELECT queue, ckey FROM ckeys)
    GROUP BY o.queue, o.concurrency_key, q.key_rate_limit
    HAVING count(*) >= q.key_rate_limit
), checked AS MATERIALIZED (
    -- The runs of `top` whose queue has room for them (per key too), by `top`'s snapshot.
    -- (A takeover in a queue with a rate limit is checked too; skipped once found without room.)
    SELECT t.run_id,
           ((t.started_at_ms IS NULL AND COALESCE(qs.limited, false))
            OR (t.started_at_ms IS NOT NULL AND t.lease_owner IS NOT NULL
                AND COALESCE(qs.rated, false))) AS needs_check
    FROM top t LEFT JOIN qstate qs ON qs.name = t.queue
    WHERE t.queue IS NULL OR qs.name IS NULL
          OR (t.started_at_ms IS NOT NULL
              AND (t.lease_owner IS NULL OR NOT qs.rated
                   OR NOT (CAST(:skip_queues AS jsonb) ? t.queue)))
          OR (t.started_at_ms IS NULL
              AND NOT (CAST(:skip_queues AS jsonb) ? t.queue) AND NOT qs.full
              AND NOT EXISTS (SELECT 1 FROM kfull k
                              WHERE k.queue = t.queue AND k.ckey = t.concurrency_key))
), cand AS (
    -- The first of them not being claimed by another worker, locked; its runnable conditions
    -- are evaluated again on the row's latest version.
    SELECT r.run_id, r.queue,
           r.run_id = ANY (ARRAY(SELECT run_id FROM checked WHERE needs_check)) AS needs_check
    FROM runs r
    WHERE r.run_id = ANY (ARRAY(SELECT run_id FROM checked))
      AND (r.status IN ('pending', 'running')
           OR (r.status = 'waiting'
               AND (r.wake_at_ms <= (SELECT now_ms FROM clock) OR r.lease_owner IS NOT NULL)))
      AND (r.lease_owner IS NULL OR r.lease_expires_at_ms <= (SELECT now_ms FROM clock))
    ORDER BY r.priority DESC, COALESCE(r.wake_at_ms, r.created_at_ms), r.run_seq
    LIMIT 1
    FOR UPDATE OF r SKIP LOCKED
), claimed AS (
    UPDATE runs
    SET lease_taken_from = lease_owner, lease_owner = :owner, lease_epoch = lease_epoch + 1,
        lease_expires_at_ms = torpor_now_ms() + :ttl_ms, updated_at_ms = torpor_now_ms(),
        started_at_ms = CASE WHEN runs.lease_owner IS NOT NULL AND runs.queue IS NOT NULL
                             THEN torpor_now_ms()
                             ELSE COALESCE(runs.started_at_ms, torpor_now_ms()) END
    FROM cand
    WHERE runs.run_id = cand.run_id AND NOT cand.needs_check
    RETURNING runs.run_id, runs.lease_epoch, runs.lease_taken_from
), checked_claim AS MATERIALIZED (
    -- an unstarted run of a queue with limits, or a takeover under a rate limit: counted and
    -- claimed under the queue's lock
    SELECT f.epoch, f.taken_from
    FROM cand, LATERAL torpor_claim_checked(cand.run_id, :owner, :ttl_ms) AS f
    WHERE cand.needs_check
)
SELECT (SELECT count(*) FROM top), cand.run_id,
       COALESCE(claimed.lease_epoch, (SELECT epoch FROM checked_claim)),
       COALESCE(claimed.lease_taken_from, (SELECT taken_from FROM checked_claim)),
       cand.needs_check, cand.queue
FROM (SELECT 1) AS one
LEFT JOIN cand ON true
LEFT JOIN claimed ON claimed.run_id = cand.run_id;

-- name: renew_lease
UPDATE runs SET lease_expires_at_ms = torpor_now_ms() + :ttl_ms
WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch
  AND lease_expires_at_ms > torpor_now_ms();

-- name: release_lease
UPDATE runs SET lease_owner = NULL, lease_expires_at_ms = 0, updated_at_ms = torpor_now_ms()
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
SELECT payload, seq FROM events
WHERE run_id = :run_id AND step_id = :step_id AND type = 'step_completed'
ORDER BY seq DESC LIMIT 1;

-- name: step_events
SELECT seq, type, epoch, at_ms, v, payload FROM events
WHERE run_id = :run_id AND step_id = :step_id ORDER BY seq;

-- name: listed_run
-- A fragment: the columns of a listed run (list_runs, list_runs_attention).
run_id, workflow, version, status, outcome, created_at_ms,
       GREATEST(updated_at_ms, (SELECT at_ms FROM events e WHERE e.run_id = runs.run_id
                                ORDER BY seq DESC LIMIT 1)),
       wake_at_ms, lease_owner, lease_epoch, lease_expires_at_ms,
       (SELECT seq FROM events e WHERE e.run_id = runs.run_id ORDER BY seq DESC LIMIT 1),
       checkpoint_seq, attention, infra_retries,
       NULL  -- damage: PostgreSQL's typed columns hold numbers only (SQLite's can be damaged)

-- name: list_runs_attention
-- `ls --attention`: the newest runs that need attention, a walk of runs_attention (migration
-- 0022, a partial index of those runs alone) that stops at the page.
SELECT {{ listed_run }}
FROM runs
WHERE attention IS NOT NULL
  AND (CAST(:status AS text) IS NULL OR status = CAST(:status AS text))
  AND (CAST(:outcome AS text) IS NULL OR outcome = CAST(:outcome AS text))
  AND (CAST(:workflow AS text) IS NULL OR workflow = CAST(:workflow AS text))
ORDER BY created_at_ms DESC, run_id LIMIT :limit;

-- name: list_runs
SELECT {{ listed_run }}
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
-- (`resume --all`): runs not yet started in a queue with limits are left to workers, which
-- start them under those limits.
SELECT run_id FROM runs
WHERE (status IN ('pending', 'running')
       OR (status = 'waiting'
           AND (wake_at_ms <= torpor_now_ms() OR lease_owner IS NOT NULL)))
  AND (lease_owner IS NULL OR lease_expires_at_ms <= torpor_now_ms())
  AND (not_before_ms IS NULL OR not_before_ms <= torpor_now_ms())
  AND (queue IS NULL OR started_at_ms IS NOT NULL OR NOT EXISTS (
       SELECT 1 FROM queues q WHERE q.name = runs.queue AND (
           q.concurrency IS NOT NULL OR q.key_concurrency IS NOT NULL
           OR q.rate_limit IS NOT NULL OR q.key_rate_limit IS NOT NULL)))
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
-- A run of a queue reopened from a terminal outcome gave its slot back when it finished: it
-- claims one again (started_at_ms cleared), under its queue's limits, like a new run.
UPDATE runs SET status = 'pending', wake_at_ms = torpor_now_ms(), updated_at_ms = torpor_now_ms(),
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

-- name: notify_wake
SELECT pg_notify('torpor_wake', :run_id);

-- name: next_wake_at
-- The earliest timer of a waiting run, or delayed start of a pending one. The timers as a walk
-- of runs_dispatch in deadline order that stops at the first one :accept takes (issue 48: a
-- min() over every waiting run read 100,000 of them, 130-170 ms, on each idle worker's poll);
-- the delayed starts likewise, a walk of runs_delayed (migration 0023), not every pending run.
SELECT min(t) FROM (
    (SELECT wake_at_ms AS t FROM runs
     WHERE status = 'waiting' AND wake_at_ms IS NOT NULL
       AND (CAST(:accept AS jsonb) IS NULL OR EXISTS (
            SELECT 1 FROM jsonb_each(CAST(:accept AS jsonb)) AS w(name, versions),
                          jsonb_array_elements_text(w.versions) AS v(version)
            WHERE w.name = runs.workflow AND v.version = runs.version))
     ORDER BY wake_at_ms LIMIT 1)
    UNION ALL
    (SELECT not_before_ms FROM runs
     WHERE status = 'pending' AND not_before_ms > torpor_now_ms()
       AND (CAST(:accept AS jsonb) IS NULL OR EXISTS (
            SELECT 1 FROM jsonb_each(CAST(:accept AS jsonb)) AS w(name, versions),
                          jsonb_array_elements_text(w.versions) AS v(version)
            WHERE w.name = runs.workflow AND v.version = runs.version))
     ORDER BY not_before_ms LIMIT 1)
) AS due;

-- name: damaged_runs
-- None: a typed column cannot hold anything but its type (see the SQLite query).
SELECT NULL, NULL WHERE CAST(:limit AS bigint) < 0;

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
-- (Typed columns: a value of the wrong type cannot be stored; see the SQLite version.)
SELECT run_id, status, queue, concurrency_key, priority, not_before_ms, started_at_ms
FROM runs WHERE false LIMIT :limit;

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
VALUES (:name, :workflow, :input, :cron, :tz, :catchup, CAST(:queue AS text), false,
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
UPDATE schedules SET paused = CAST(:paused AS boolean), generation = generation + 1,
    retry_at_ms = NULL,
    last_error = CASE WHEN NOT CAST(:paused AS boolean) THEN NULL ELSE last_error END,
    next_fire_ms = COALESCE(CAST(:next_fire_ms AS bigint), next_fire_ms), updated_at_ms = :now_ms
WHERE name = :name;

-- name: schedule_due
-- Schedules not paused whose next fire is due by :now_ms.
SELECT name, workflow, input, cron, tz, catchup, queue, paused, next_fire_ms, last_fire_ms,
       generation, last_error, retry_at_ms
FROM schedules WHERE paused = false AND next_fire_ms <= :now_ms
  AND (retry_at_ms IS NULL OR retry_at_ms <= :now_ms)
ORDER BY next_fire_ms LIMIT :limit;

-- name: schedule_next_fire
SELECT min(GREATEST(next_fire_ms, retry_at_ms)) FROM schedules WHERE paused = false;

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
-- refreshes when it was last used (garbage collection spares it for the grace period). The
-- database clock stamps it, the clock collection judges by.
INSERT INTO chunks (hash, data, size, used_at_ms)
VALUES (decode(:hash, 'hex'), :data, :size, torpor_now_ms())
ON CONFLICT (hash) DO UPDATE SET used_at_ms = excluded.used_at_ms
WHERE chunks.used_at_ms < excluded.used_at_ms;

-- name: insert_ref
INSERT INTO blob_refs (hash, run_id, kind, size)
VALUES (decode(:hash, 'hex'), :run_id, :kind, :size)
ON CONFLICT DO NOTHING;

-- name: get_chunk
SELECT data FROM chunks WHERE hash = decode(:hash, 'hex');

-- name: retention_policies
SELECT workflow, keep_days, keep_last, archive_url FROM retention ORDER BY workflow;

-- name: set_retention
INSERT INTO retention (workflow, keep_days, keep_last, archive_url, updated_at_ms)
VALUES (:workflow, :keep_days, :keep_last, :archive_url, torpor_now_ms())
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
WHERE (CAST(:before_ms AS bigint) IS NOT NULL AND updated_at_ms < CAST(:before_ms AS bigint))
   OR (CAST(:keep_last AS bigint) IS NOT NULL AND n > CAST(:keep_last AS bigint))
ORDER BY updated_at_ms, run_id LIMIT :limit;

-- name: delete_run
-- The run row, only while it is finished and not reopenable (checked under the row lock).
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
-- Chunks no run (or other owner) refers to, unused for the grace period (database clock).
SELECT count(*), COALESCE(sum(size), 0) FROM chunks
WHERE used_at_ms < torpor_now_ms() - :grace_ms
  AND hash NOT IN (SELECT hash FROM blob_refs WHERE kind = 'chunk');

-- name: collect_chunks
DELETE FROM chunks
WHERE used_at_ms < torpor_now_ms() - :grace_ms
  AND hash NOT IN (SELECT hash FROM blob_refs WHERE kind = 'chunk');

-- name: referenced_artifacts
SELECT DISTINCT encode(hash, 'hex') FROM blob_refs WHERE kind = 'artifact';

-- name: run_references
-- Every reference of every run in the store (not other owners': episodes), with whether a
-- referenced chunk is in the chunks table (for ``torpor doctor``).
SELECT r.run_id, r.kind, encode(r.hash, 'hex'), r.size,
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
-- Runs by what they occupy: history payloads + checkpoint + chunks and artifacts referred to
-- (octet_length: as UTF-8 text, before TOAST compression).
SELECT run_id, workflow, status, outcome, history, ckpt, chunked, artifacts FROM (
    SELECT r.run_id, r.workflow, r.status, r.outcome,
           COALESCE((SELECT sum(octet_length(payload)) FROM events e
                     WHERE e.run_id = r.run_id), 0) AS history,
           COALESCE(octet_length(r.checkpoint), 0) AS ckpt,
           COALESCE((SELECT sum(size) FROM blob_refs b WHERE b.run_id = r.run_id
                     AND b.kind = 'chunk'), 0) AS chunked,
           COALESCE((SELECT sum(size) FROM blob_refs b WHERE b.run_id = r.run_id
                     AND b.kind = 'artifact'), 0) AS artifacts
    FROM runs r
    WHERE (CAST(:workflow AS text) IS NULL OR r.workflow = CAST(:workflow AS text))
) AS s
ORDER BY history + ckpt + chunked + artifacts DESC, run_id LIMIT :limit;

-- name: event_at
-- One event by its seq (the user checkpoint an engine checkpoint refers to).
SELECT seq, type, epoch, at_ms, v, payload FROM events WHERE run_id = :run_id AND seq = :seq;

-- name: get_chunks
-- Several chunks at once (:hashes: a JSON array of hex hashes).
SELECT encode(hash, 'hex'), data FROM chunks
WHERE hash IN (SELECT decode(h, 'hex') FROM jsonb_array_elements_text(CAST(:hashes AS jsonb)) AS h);

-- name: child_set_parent
-- Child runs (issue 37, store/children.py): the run whose step started this one.
UPDATE runs SET parent_run_id = :parent WHERE run_id = :run_id;

-- name: child_parent
SELECT parent_run_id FROM runs WHERE run_id = :run_id;

-- name: child_runs
SELECT run_id, workflow, version, status, outcome, created_at_ms,
       GREATEST(updated_at_ms, (SELECT at_ms FROM events e WHERE e.run_id = runs.run_id
                                ORDER BY seq DESC LIMIT 1)),
       wake_at_ms, lease_owner, lease_epoch, lease_expires_at_ms,
       (SELECT seq FROM events e WHERE e.run_id = runs.run_id ORDER BY seq DESC LIMIT 1),
       checkpoint_seq, attention, infra_retries,
       NULL
FROM runs WHERE parent_run_id = :parent
ORDER BY created_at_ms, run_id LIMIT :limit;

-- name: child_tell_parent
-- A child's outcome, posted to its parent's inbox in the transaction that records it (an
-- unfinished parent only: a finished run takes no message).
INSERT INTO inbox (message_id, run_id, kind, body, at_ms)
SELECT :message_id, p.run_id, 'child', :body, :now_ms
FROM runs p WHERE p.run_id = :parent AND p.status <> 'finished'
ON CONFLICT (message_id) DO NOTHING;

-- name: child_need_lock
-- Locks the parent's row first: a child's outcome and the parent's count are serialized on it,
-- and the count (a later statement, a later snapshot) sees every outcome committed before.
SELECT child_need FROM runs WHERE run_id = :parent FOR UPDATE;

-- name: child_final_count
-- How many of the children waited on (:children, a JSON list) have a final outcome.
SELECT count(*) FROM runs
WHERE parent_run_id = :parent
  AND run_id IN (SELECT jsonb_array_elements_text(CAST(:children AS jsonb)))
  AND status = 'finished' AND outcome NOT IN ('unresolved', 'blocked');

-- name: child_need_set
UPDATE runs SET child_need = :need WHERE run_id = :parent;

-- name: child_need_taken
-- A final child outcome: one fewer needed; returns what is left (NULL: no count kept).
UPDATE runs SET child_need = child_need - 1
WHERE run_id = :parent AND child_need IS NOT NULL
RETURNING child_need;
