-- torpor schema v12 (PostgreSQL): the same `valid_until_ms` as the SQLite migration beside it
-- (issue 31). The per-lexeme counters are dropped: a search counts its filter and words in the
-- GIN index within the caller's filter, as SQLite does in FTS5 (one ranking on both backends),
-- and writers no longer update shared counter rows (they serialized every writer).
ALTER TABLE episodes ADD COLUMN valid_until_ms bigint;
DROP TABLE episode_lexemes;
