-- torpor schema v4 (SQLite): inbox messages keep their arrival order. `at_ms` (the store's
-- clock at posting) decides whether a message came before a wait's deadline, but two messages
-- may arrive in the same millisecond (or under a test's clock that stands still); `arrival`
-- numbers a run's messages in the order the run row's lock let them in, and the run takes them
-- in that order (a wait takes the earliest that arrived before its deadline). Existing rows keep
-- their insertion order.
ALTER TABLE inbox ADD COLUMN arrival INTEGER;
UPDATE inbox SET arrival = rowid;
CREATE INDEX inbox_arrival ON inbox (run_id, arrival);
