-- Stream queries (SQLite); the same names as postgres.sql (store/streams.py).

-- name: fence
SELECT 1 FROM runs WHERE run_id = :run_id AND lease_owner = :owner AND lease_epoch = :epoch;

-- name: insert_item
INSERT INTO stream_items (run_id, stream, stream_offset, part, kind, wseq, data, epoch, at_ms)
VALUES (:run_id, :stream, :stream_offset, :part, :kind, :wseq, :data, :epoch, :at_ms);

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

-- name: data_version
PRAGMA data_version;

-- name: delete_run
DELETE FROM stream_items WHERE run_id = :run_id;
