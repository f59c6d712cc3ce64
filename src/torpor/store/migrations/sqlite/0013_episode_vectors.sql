-- torpor schema v13 (SQLite): episode vectors for search by meaning (torpor.episodes.hybrid).
-- One row per (episode, embedding model): the episode's text embedded by that model, a
-- little-endian float32 blob of `dim` values, unit length. Kept apart from `episodes` (no
-- foreign key, like episodes to runs): written after the episode, read by id for a bounded
-- candidate set; an episode without a row is embedded when searched, and rows whose episode
-- was pruned are dropped by `drop_orphan_episode_vectors`.
CREATE TABLE episode_vectors (
    episode_id    TEXT NOT NULL,
    model         TEXT NOT NULL,
    dim           INTEGER NOT NULL,
    vec           BLOB NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (episode_id, model)
) WITHOUT ROWID;
