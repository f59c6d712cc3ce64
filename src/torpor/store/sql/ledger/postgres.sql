-- Fact ledger queries (PostgreSQL); the same names as sqlite.sql (store/ledger.py).

-- name: columns
key, kind, text, ids, subject, turn, step, source, compaction, score, supersedes, body, seq,
at_ms

-- name: insert_record
INSERT INTO ledger (run_id, seq, idx, compaction, key, kind, text, body, ids, subject, turn,
                    step, source, score, supersedes, at_ms, tsv)
VALUES (:run_id, :seq, :idx, :compaction, :key, :kind, :text, :body, :ids,
        :subject, :turn, :step, :source, :score, :supersedes, :at_ms,
        to_tsvector('english', :text || ' ' || :body))
ON CONFLICT DO NOTHING;

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
WHERE run_id = :run_id AND compaction <= :upto
  AND tsv @@ to_tsquery('english', :match)
ORDER BY ts_rank(tsv, to_tsquery('english', :match)) DESC, seq DESC
LIMIT :limit;

-- name: delete_run
DELETE FROM ledger WHERE run_id = :run_id;
