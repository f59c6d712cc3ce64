-- Episodic memory queries (SQLite); the same names as postgres.sql. Columns of an episode, in
-- the order torpor.episodes.store reads them: episode_id, run_id, boundary, scope, agent,
-- task_type, kind, outcome, summary, lesson, at_seq, created_at_ms, conditions, refs, claims,
-- superseded_by, then the score.

-- name: run_filing
SELECT workflow, scope, task_type, episodes_seq FROM runs WHERE run_id = :run_id;

-- name: runs_behind
-- Runs filed for episodes whose history has boundaries not yet turned into episodes.
SELECT run_id FROM runs
WHERE task_type IS NOT NULL AND status IN ('waiting', 'finished')
  AND episodes_seq < (SELECT max(seq) FROM events e WHERE e.run_id = runs.run_id)
ORDER BY created_at_ms LIMIT :limit;

-- name: insert_episode
INSERT INTO episodes (episode_id, run_id, boundary, scope, agent, task_type, kind, outcome,
                      summary, lesson, conditions, refs, claims, tags, at_seq, created_at_ms)
VALUES (:episode_id, :run_id, :boundary, :scope, :agent, :task_type, :kind, :outcome,
        :summary, :lesson, :conditions, :refs, :claims, :tags, :at_seq, :created_at_ms)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: index_episode
INSERT INTO episodes_fts (rowid, summary, lesson, tags) VALUES (:id, :summary, :lesson, :tags);

-- name: unindex_episode
INSERT INTO episodes_fts (episodes_fts, rowid, summary, lesson, tags)
VALUES ('delete', :id, :summary, :lesson, :tags);

-- name: mark_captured
UPDATE runs SET episodes_seq = :seq WHERE run_id = :run_id AND episodes_seq < :seq;

-- name: live_claims
-- The latest live episodes a new one of this scope and task type may contradict.
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

-- name: search_ranked
-- The filters are tokens in the MATCH expression (the index intersects them with the words);
-- the exact columns are compared as well. BM25 (rank) is lower for better matches.
SELECT e.episode_id, e.run_id, e.boundary, e.scope, e.agent, e.task_type, e.kind, e.outcome,
       e.summary, e.lesson, e.at_seq, e.created_at_ms, e.conditions, e.refs, e.claims,
       e.superseded_by, -episodes_fts.rank
FROM episodes_fts JOIN episodes e ON e.id = episodes_fts.rowid
WHERE episodes_fts MATCH :match
  AND e.scope = :scope
  AND (:agent IS NULL OR e.agent = :agent)
  AND (:task_type IS NULL OR e.task_type = :task_type)
  AND (:outcome IS NULL OR e.outcome = :outcome)
  AND (:live = 0 OR e.superseded_by IS NULL)
  AND e.created_at_ms >= :since_ms AND e.created_at_ms <= :until_ms
ORDER BY episodes_fts.rank, e.created_at_ms DESC, e.id DESC
LIMIT :limit;

-- name: search_recent
SELECT episode_id, run_id, boundary, scope, agent, task_type, kind, outcome, summary, lesson,
       at_seq, created_at_ms, conditions, refs, claims, superseded_by, 0.0
FROM episodes
WHERE scope = :scope
  AND (:agent IS NULL OR agent = :agent)
  AND (:task_type IS NULL OR task_type = :task_type)
  AND (:outcome IS NULL OR outcome = :outcome)
  AND (:live = 0 OR superseded_by IS NULL)
  AND created_at_ms >= :since_ms AND created_at_ms <= :until_ms
ORDER BY created_at_ms DESC, id DESC
LIMIT :limit;

-- name: prunable
SELECT id, episode_id, summary, lesson, tags FROM episodes
WHERE created_at_ms < :before_ms AND (:superseded_only = 0 OR superseded_by IS NOT NULL)
ORDER BY created_at_ms LIMIT :limit;

-- name: delete_episode
DELETE FROM episodes WHERE id = :id;

-- name: count_episodes
SELECT count(*) FROM episodes;
