-- torpor schema v13 (PostgreSQL): episode vectors for search by meaning (torpor.episodes.hybrid).
-- One row per (episode, embedding model): the episode's text embedded by that model as a
-- `real[]` of `dim` values, unit length (pgvector's `vector` casts from it where that
-- extension is installed; no extension is needed). Kept apart from `episodes` (no foreign
-- key): written after the episode, read by id for a bounded candidate set; an episode without
-- a row is embedded when searched, and rows whose episode was pruned are dropped by
-- `drop_orphan_episode_vectors`.
CREATE TABLE episode_vectors (
    episode_id    text NOT NULL,
    model         text NOT NULL,
    dim           integer NOT NULL,
    vec           real[] NOT NULL,
    created_at_ms bigint NOT NULL,
    PRIMARY KEY (episode_id, model)
);
