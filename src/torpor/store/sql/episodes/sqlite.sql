-- Episodic memory queries (SQLite); the same names as postgres.sql. Columns of an episode, in
-- the order the store returns them (store/episodes.py): episode_id, run_id, boundary, scope, agent,
-- task_type, kind, outcome, summary, lesson, at_seq, created_at_ms, conditions, refs, claims,
-- superseded_by, valid_until_ms,
-- then the score.

-- name: run_filing
SELECT workflow, scope, task_type, episodes_seq FROM runs WHERE run_id = :run_id;

-- name: runs_behind
-- Runs filed for episodes whose history has boundaries not yet turned into episodes.
SELECT run_id FROM runs
WHERE task_type IS NOT NULL AND status IN ('waiting', 'finished')
  AND episodes_seq < (SELECT max(seq) FROM events e WHERE e.run_id = runs.run_id)
ORDER BY created_at_ms LIMIT :limit;

-- name: unindex_episode
INSERT INTO episodes_fts (episodes_fts, rowid, summary, lesson, tags)
VALUES ('delete', :id, :summary, :lesson, :tags);

-- name: last_episode_id
SELECT coalesce(max(id), 0) FROM episodes;

-- name: insert_episode
-- One row of a batch (run once per row, one prepared statement); inside the writer's exclusive
-- transaction the rows newly written are those with ids past `last_episode_id`.
INSERT INTO episodes (episode_id, run_id, boundary, scope, agent, task_type, kind, outcome,
                      summary, lesson, conditions, refs, claims, tags, at_seq, created_at_ms)
VALUES (:episode_id, :run_id, :boundary, :scope, :agent, :task_type, :kind, :outcome,
        :summary, :lesson, :conditions, :refs, :claims, :tags, :at_seq, :created_at_ms)
ON CONFLICT DO NOTHING;

-- name: inserted_since
SELECT id, episode_id FROM episodes WHERE id > :last;

-- name: index_since
-- The FTS5 index rows of the episodes just written.
INSERT INTO episodes_fts (rowid, summary, lesson, tags)
SELECT id, summary, lesson, tags FROM episodes WHERE id > :last;

-- name: live_claims_batch
-- The latest live episodes of a scope and task type, with their times (a batch's supersession
-- check reads them once: torpor/store/episodes.py).
SELECT episode_id, claims, created_at_ms FROM episodes
WHERE scope = :scope AND task_type = :task_type AND superseded_by IS NULL
ORDER BY created_at_ms DESC LIMIT :limit;

-- name: mark_captured
UPDATE runs SET episodes_seq = :seq WHERE run_id = :run_id AND episodes_seq < :seq;

-- name: live_claims
-- The latest live episodes a new one of this scope and task type may contradict.
SELECT episode_id, claims FROM episodes
WHERE scope = :scope AND task_type = :task_type AND superseded_by IS NULL
  AND episode_id <> :episode_id
ORDER BY created_at_ms DESC LIMIT :limit;

-- name: supersede
-- The old episode stopped being true when the one superseding it was written (`valid_until_ms`:
-- that episode's time; a person's supersession of an older one: the newer one's).
UPDATE episodes SET superseded_by = :by,
       valid_until_ms = (SELECT created_at_ms FROM episodes n WHERE n.episode_id = :by)
WHERE episode_id = :episode_id AND superseded_by IS NULL;

-- name: get_episode
SELECT episode_id, run_id, boundary, scope, agent, task_type, kind, outcome, summary, lesson,
       at_seq, created_at_ms, conditions, refs, claims, superseded_by, valid_until_ms, 0.0
FROM episodes WHERE episode_id = :episode_id;

-- name: prunable
SELECT id, episode_id, summary, lesson, tags FROM episodes
WHERE created_at_ms < :before_ms AND (:superseded_only = 0 OR superseded_by IS NOT NULL)
ORDER BY created_at_ms LIMIT :limit;

-- name: delete_episode
DELETE FROM episodes WHERE id = :id;

-- name: count_episodes
SELECT count(*) FROM episodes;

-- name: insert_episode_ref
-- An artifact an episode names, kept from garbage collection under the owner
-- `episode:<episode id>` (its size from the run's own reference, when there is one).
INSERT INTO blob_refs (hash, run_id, kind, size)
VALUES (:hash, :owner, 'artifact',
        COALESCE((SELECT size FROM blob_refs
                  WHERE run_id = :run_id AND kind = 'artifact' AND hash = :hash), 0))
ON CONFLICT DO NOTHING;

-- name: delete_episode_refs
DELETE FROM blob_refs WHERE run_id = :owner;

-- name: episode_refs
-- (episodes that name artifacts, distinct artifacts they name)
SELECT count(DISTINCT run_id), count(DISTINCT hash) FROM blob_refs
WHERE run_id >= 'episode:' AND run_id < 'episode;' AND kind = 'artifact';

-- name: orphan_episode_refs
-- References of episodes deleted some other way (never a run's: a run id may start so too).
SELECT count(*) FROM blob_refs
WHERE run_id >= 'episode:' AND run_id < 'episode;'
  AND NOT EXISTS (SELECT 1 FROM episodes e WHERE e.episode_id = substr(blob_refs.run_id, 9))
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = blob_refs.run_id);

-- name: drop_orphan_episode_refs
DELETE FROM blob_refs
WHERE run_id >= 'episode:' AND run_id < 'episode;'
  AND NOT EXISTS (SELECT 1 FROM episodes e WHERE e.episode_id = substr(blob_refs.run_id, 9))
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = blob_refs.run_id);
