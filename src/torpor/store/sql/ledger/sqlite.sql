-- Fact ledger queries (SQLite); the same names as postgres.sql (store/ledger.py). Columns of a
-- record, in the order the store returns them: key, kind, text, ids, subject, turn, step,
-- source, compaction, score, supersedes, seq, at_ms.

-- name: columns
key, kind, text, ids, subject, turn, step, source, compaction, score, supersedes, body, seq,
at_ms

-- name: insert_record
INSERT INTO ledger (run_id, seq, idx, compaction, key, kind, text, body, ids, subject, turn,
                    step, source, score, supersedes, at_ms)
VALUES (:run_id, :seq, :idx, :compaction, :key, :kind, :text, :body, :ids, :subject, :turn, :step,
        :source, :score, :supersedes, :at_ms)
ON CONFLICT DO NOTHING;

-- name: index_records
INSERT INTO ledger_fts (rowid, text, body)
SELECT id, text, body FROM ledger WHERE run_id = :run_id AND seq = :seq;

-- name: records
SELECT {{ columns }} FROM ledger
WHERE run_id = :run_id AND compaction <= :upto
ORDER BY seq, idx;

-- name: supersedable
SELECT {{ columns }} FROM ledger
WHERE run_id = :run_id AND compaction <= :upto
  AND kind IN ('decision', 'instruction', 'commitment', 'question')
ORDER BY seq, idx;

-- name: keys
SELECT key, supersedes FROM ledger WHERE run_id = :run_id AND compaction <= :upto;

-- name: output_facts
SELECT text FROM ledger
WHERE run_id = :run_id AND compaction <= :upto AND kind <> 'unit'
  AND source IN ('result', 'args')
ORDER BY seq, idx;

-- name: search
SELECT {{ columns }} FROM ledger
WHERE id IN (
    SELECT f.rowid FROM ledger_fts f JOIN ledger l ON l.id = f.rowid
    WHERE ledger_fts MATCH :match AND l.run_id = :run_id AND l.compaction <= :upto
    ORDER BY bm25(ledger_fts), l.seq DESC LIMIT :limit
);

-- name: unindex_run
INSERT INTO ledger_fts (ledger_fts, rowid, text, body)
SELECT 'delete', id, text, body FROM ledger WHERE run_id = :run_id;

-- name: delete_run
DELETE FROM ledger WHERE run_id = :run_id;
