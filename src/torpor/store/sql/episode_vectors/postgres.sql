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

-- name: vector_index
-- The schema of the pgvector extension when the index of migration 0024 exists (else no row).
SELECT n.nspname FROM pg_extension AS x JOIN pg_namespace AS n ON n.oid = x.extnamespace
WHERE x.extname = 'vector' AND to_regclass('episode_vectors_hnsw_256') IS NOT NULL;

-- name: nearest_vectors
-- The filter's episodes nearest the query by the HNSW index of migration 0024 (`{vector}` is
-- the extension's schema-qualified type, put in by the store; the expression is the index's,
-- so the planner uses it), with their vectors. pgvector filters after the index scan: with
-- pgvector >= 0.8 `hnsw.iterative_scan` keeps scanning until `limit` rows pass the filter.
SELECT e.episode_id, e.run_id, e.boundary, e.scope, e.agent, e.task_type, e.kind, e.outcome,
       e.summary, e.lesson, e.at_seq, e.created_at_ms, e.conditions, e.refs, e.claims,
       e.superseded_by, e.valid_until_ms, v.vec
FROM episode_vectors AS v JOIN episodes AS e ON e.episode_id = v.episode_id
WHERE v.model = :model AND v.dim = 256 AND e.scope = :scope
  AND (CAST(:agent AS text) IS NULL OR e.agent = CAST(:agent AS text))
  AND (CAST(:task_type AS text) IS NULL OR e.task_type = CAST(:task_type AS text))
  AND (CAST(:outcome AS text) IS NULL OR e.outcome = CAST(:outcome AS text))
  AND (NOT CAST(:live AS boolean) OR e.superseded_by IS NULL)
  AND e.created_at_ms >= :since_ms AND e.created_at_ms <= :until_ms
ORDER BY CAST(v.vec AS {vector}(256)) <=> CAST(CAST(:q AS real[]) AS {vector}(256))
LIMIT :limit;
