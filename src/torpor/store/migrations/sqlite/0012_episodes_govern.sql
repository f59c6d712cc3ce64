-- torpor schema v12 (SQLite): episodes that record when they stopped being true (issue 31).
-- `valid_until_ms`: set with `superseded_by`, the time of the episode that superseded this one
-- (NULL: still held true). The PostgreSQL migration beside it also drops the per-lexeme
-- counters: both backends now count a search's words within its filter in the index itself.
ALTER TABLE episodes ADD COLUMN valid_until_ms INTEGER;
