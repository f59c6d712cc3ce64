-- torpor schema v24 (PostgreSQL, issue 32): pgvector's approximate index over episode vectors,
-- where the server has the extension. When `vector` is in pg_available_extensions (it is not
-- in Debian bookworm's PostgreSQL packages) and this role may create it, the extension is
-- created and `episode_vectors_hnsw_256` indexes the 256-value vectors (the default wordllama
-- model's) as pgvector `vector(256)` cast from the `real[]` column — an HNSW index with cosine
-- distance, the expression index of the one column every vector is written to (no second copy
-- of a vector, nothing else changes on write). A hybrid search then takes its dense candidates
-- from the index (`nearest_vectors` in sql/episode_vectors/postgres.sql) instead of the
-- filter's most recent. Without the extension (or the right to create it) nothing is created
-- and the `real[]` path is used; running this again later (a store made before pgvector was
-- installed) is `torpor.store.episode_vectors.create_vector_index`.
DO $$
DECLARE
    sch text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') THEN
        IF NOT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
            RETURN;
        END IF;
        BEGIN
            CREATE EXTENSION IF NOT EXISTS vector;
        EXCEPTION WHEN OTHERS THEN
            RAISE NOTICE 'torpor: pgvector not created (%), episode vectors stay real[]', SQLERRM;
            RETURN;
        END;
    END IF;
    SELECT n.nspname INTO sch FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace
    WHERE x.extname = 'vector';
    EXECUTE format(
        'CREATE INDEX IF NOT EXISTS episode_vectors_hnsw_256 ON episode_vectors '
        'USING hnsw ((CAST(vec AS %1$I.vector(256))) %1$I.vector_cosine_ops) WHERE dim = 256',
        sch);
END
$$;
