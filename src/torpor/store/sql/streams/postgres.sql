-- Stream queries (PostgreSQL); the same names as sqlite.sql (store/streams.py). The fence
-- locks the run row for share: a takeover (which updates it) waits for the batch to commit.

-- name: append_batch
-- A whole batch in one statement (its own transaction, on the thread's autocommit
-- connection): the lease check locks the run row for share (a takeover, which updates it,
-- waits), relaxes this commit's flush and queues the notification — only when the row still
-- names the writer's lease; the rows go in only then. 0 rows: the lease is gone.
WITH fence AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS relaxed,
           pg_notify('torpor_stream', :payload) AS sent
    FROM runs
    WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch
    FOR SHARE
), ins AS (
    INSERT INTO stream_items (run_id, stream, stream_offset, part, kind, wseq, data, epoch, at_ms)
    SELECT :run_id, :stream, r.o, r.p, r.k, r.w, r.d, :epoch, r.a
    FROM fence, json_to_recordset(CAST(:rows AS json))
         AS r(o bigint, p text, k text, w bigint, d text, a bigint)
    RETURNING 1
)
SELECT count(*) FROM ins;

-- name: tail
-- The last offset, and the ordinal of the last workflow write that is complete: an item of
-- the workflow's own, or a part of it that ended (one left open is written again).
SELECT coalesce(max(stream_offset), 0),
       coalesce(max(CASE WHEN (part = '' AND kind = 'data') OR kind = 'end' THEN wseq END), 0)
FROM stream_items WHERE run_id = :run_id AND stream = :stream;

-- name: open_parts
SELECT part FROM stream_items
WHERE run_id = :run_id AND stream = :stream AND part <> ''
GROUP BY part
HAVING sum(CASE WHEN kind IN ('end', 'retract') THEN 1 ELSE 0 END) = 0
ORDER BY min(stream_offset);

-- name: items
SELECT stream_offset, kind, part, data, at_ms FROM stream_items
WHERE run_id = :run_id AND stream = :stream AND stream_offset > :after
ORDER BY stream_offset LIMIT :limit;

-- name: names
SELECT stream, max(stream_offset) FROM stream_items WHERE run_id = :run_id
GROUP BY stream ORDER BY stream;

-- name: delete_run
DELETE FROM stream_items WHERE run_id = :run_id;
