-- Episode vector queries (SQLite); the same names as postgres.sql but put_vector, one row a
-- statement (in-process: no round trip), where PostgreSQL has put_vectors. A vector is a
-- little-endian float32 blob. (store/episode_vectors.py)

-- name: put_vector
INSERT INTO episode_vectors (episode_id, model, dim, vec, created_at_ms)
VALUES (:episode_id, :model, :dim, :vec, :created_at_ms)
ON CONFLICT DO NOTHING;

-- name: get_vectors
SELECT v.episode_id, v.vec FROM json_each(:ids) AS j CROSS JOIN episode_vectors AS v
ON v.episode_id = j.value AND v.model = :model;

-- name: missing_vectors
-- Episodes (newest first) without a vector of the model: what a backfill embeds.
SELECT e.episode_id, e.summary, e.lesson FROM episodes e
WHERE NOT EXISTS (SELECT 1 FROM episode_vectors v
                  WHERE v.episode_id = e.episode_id AND v.model = :model)
ORDER BY e.id DESC LIMIT :limit;

-- name: count_vectors
SELECT count(*) FROM episode_vectors WHERE model = :model;

-- name: drop_orphan_vectors
DELETE FROM episode_vectors
WHERE NOT EXISTS (SELECT 1 FROM episodes e WHERE e.episode_id = episode_vectors.episode_id);
