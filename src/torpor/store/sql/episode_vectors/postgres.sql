-- Episode vector queries (PostgreSQL); the same names as sqlite.sql but put_vectors (every
-- row of a write in one statement). A vector is a real[]. (store/episode_vectors.py)

-- name: put_vectors
-- Every vector of a write in one statement (one round trip): `rows` is a JSON array of
-- {"id": episode id, "v": [floats]} (a float32 printed shortest-exact reads back the same).
INSERT INTO episode_vectors (episode_id, model, dim, vec, created_at_ms)
SELECT r->>'id', :model, json_array_length(r->'v'),
       ARRAY(SELECT CAST(x AS real) FROM json_array_elements_text(r->'v') AS x), :created_at_ms
FROM json_array_elements(CAST(:rows AS json)) AS r
ON CONFLICT DO NOTHING;

-- name: get_vectors
SELECT v.episode_id, v.vec FROM episode_vectors AS v
WHERE v.episode_id = ANY(CAST(:ids AS text[])) AND v.model = :model;

-- name: missing_vectors
-- Episodes (newest first) without a vector of the model: what a backfill embeds.
SELECT e.episode_id, e.summary, e.lesson FROM episodes e
WHERE NOT EXISTS (SELECT 1 FROM episode_vectors v
                  WHERE v.episode_id = e.episode_id AND v.model = :model)
ORDER BY e.id DESC LIMIT :limit;

-- name: count_vectors
SELECT count(*) FROM episode_vectors WHERE model = CAST(:model AS text);

-- name: drop_orphan_vectors
DELETE FROM episode_vectors
WHERE NOT EXISTS (SELECT 1 FROM episodes e WHERE e.episode_id = episode_vectors.episode_id);
