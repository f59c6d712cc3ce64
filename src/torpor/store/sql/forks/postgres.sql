-- Fork queries (PostgreSQL); the same names as sqlite.sql (store/forks.py, issue 45).

-- name: fork_insert_run
-- The fork's row, its history copied in the same transaction: what its fold says (status, wake,
-- checkpoint at its last seq), the origin's scope and task type, and its origin. Epochs only
-- grow: the fork's first lease fences off every epoch its copied history names.
INSERT INTO runs (run_id, workflow, version, status, created_at_ms, updated_at_ms, wake_at_ms,
                  last_seq, checkpoint_seq, checkpoint, lease_epoch, scope, task_type, fork_of,
                  fork_seq)
SELECT CAST(:run_id AS text), CAST(:workflow AS text), CAST(:version AS text),
       CAST(:status AS text), CAST(:now_ms AS bigint), CAST(:now_ms AS bigint),
       CAST(:wake_at_ms AS bigint), CAST(:last_seq AS bigint), CAST(:last_seq AS bigint),
       CAST(:checkpoint AS text), CAST(:lease_epoch AS bigint), o.scope, o.task_type, o.run_id,
       CAST(:fork_seq AS bigint)
FROM runs o WHERE o.run_id = :origin
ON CONFLICT (run_id) DO NOTHING;

-- name: fork_origin
SELECT fork_of, fork_seq FROM runs WHERE run_id = :run_id;

-- name: fork_runs
-- The forks of :origin, oldest first (their rows are read by get_run).
SELECT run_id FROM runs WHERE fork_of = :origin
ORDER BY created_at_ms, run_id LIMIT :limit;
