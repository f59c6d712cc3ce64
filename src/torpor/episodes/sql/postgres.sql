-- Episodic memory queries (PostgreSQL); the same names as sqlite.sql. Columns of an episode, in
-- the order torpor.episodes.store reads them: episode_id, run_id, boundary, scope, agent,
-- task_type, kind, outcome, summary, lesson, at_seq, created_at_ms, conditions, refs, claims,
-- superseded_by, then the score.

-- name: run_filing
SELECT workflow, scope, task_type, episodes_seq FROM runs WHERE run_id = :run_id;

-- name: runs_behind
SELECT run_id FROM runs
WHERE task_type IS NOT NULL AND status IN ('waiting', 'finished')
  AND episodes_seq < (SELECT max(seq) FROM events e WHERE e.run_id = runs.run_id)
ORDER BY created_at_ms LIMIT :limit;

-- name: insert_episode
-- tsv: the lesson (weight A) and the summary (weight B) in the english configuration, plus
-- the filter tokens as lexemes of their own (array_to_tsvector: taken verbatim, unparsed).
INSERT INTO episodes (episode_id, run_id, boundary, scope, agent, task_type, kind, outcome,
                      summary, lesson, conditions, refs, claims, tags, at_seq, created_at_ms,
                      tsv)
VALUES (:episode_id, :run_id, :boundary, :scope, :agent, :task_type, :kind, :outcome,
        :summary, :lesson, :conditions, :refs, :claims, :tags, :at_seq, :created_at_ms,
        setweight(to_tsvector('english', CAST(:lesson AS text)), 'A')
        || setweight(to_tsvector('english', CAST(:summary AS text)), 'B')
        || array_to_tsvector(string_to_array(CAST(:tags AS text), ' ')))
ON CONFLICT DO NOTHING
RETURNING id;

-- name: count_lexemes
-- The new episode's lexemes (and '' for the total), in order: concurrent writers lock the
-- counters in the same order, so they cannot deadlock.
INSERT INTO episode_lexemes (lexeme, docs)
SELECT l, 1 FROM (
    SELECT unnest(tsvector_to_array(tsv)) AS l FROM episodes WHERE id = :id
    UNION ALL SELECT ''
) d ORDER BY l
ON CONFLICT (lexeme) DO UPDATE SET docs = episode_lexemes.docs + 1;

-- name: uncount_lexemes
UPDATE episode_lexemes s SET docs = s.docs - 1
FROM (SELECT unnest(tsvector_to_array(tsv)) AS l FROM episodes WHERE id = :id
      UNION ALL SELECT '') d
WHERE s.lexeme = d.l;

-- name: word_docs
-- Episodes holding each word's lexeme (0: none; a stop word has no lexeme and is left out).
SELECT t.w, coalesce(max(s.docs), 0)
FROM unnest(CAST(:words AS text[])) AS t(w)
CROSS JOIN LATERAL unnest(tsvector_to_array(to_tsvector('english', t.w))) AS l(lexeme)
LEFT JOIN episode_lexemes s ON s.lexeme = l.lexeme
GROUP BY t.w;

-- name: tag_docs
SELECT lexeme, docs FROM episode_lexemes WHERE lexeme = ANY(CAST(:tags AS text[]));

-- name: mark_captured
UPDATE runs SET episodes_seq = :seq WHERE run_id = :run_id AND episodes_seq < :seq;

-- name: live_claims
SELECT episode_id, claims FROM episodes
WHERE scope = :scope AND task_type = :task_type AND superseded_by IS NULL
  AND episode_id <> :episode_id
ORDER BY created_at_ms DESC LIMIT :limit;

-- name: supersede
UPDATE episodes SET superseded_by = :by WHERE episode_id = :episode_id AND superseded_by IS NULL;

-- name: get_episode
SELECT episode_id, run_id, boundary, scope, agent, task_type, kind, outcome, summary, lesson,
       at_seq, created_at_ms, conditions, refs, claims, superseded_by, 0.0
FROM episodes WHERE episode_id = :episode_id;

-- name: prunable
SELECT id, episode_id, summary, lesson, tags FROM episodes
WHERE created_at_ms < :before_ms
  AND (NOT CAST(:superseded_only AS boolean) OR superseded_by IS NOT NULL)
ORDER BY created_at_ms LIMIT :limit;

-- name: delete_episode
DELETE FROM episodes WHERE id = :id;

-- name: count_episodes
SELECT count(*) FROM episodes;
