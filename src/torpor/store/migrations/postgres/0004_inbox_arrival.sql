-- torpor schema v4 (PostgreSQL): inbox messages keep their arrival order. `at_ms` (the store's
-- clock at posting) decides whether a message came before a wait's deadline, but two messages
-- may arrive in the same millisecond (or under a test's clock that stands still); `arrival` is
-- drawn while the run row is locked (post_inbox), so it numbers a run's messages in the order
-- they got in, and the run takes them in that order. Existing rows are numbered as stored.
ALTER TABLE inbox ADD COLUMN arrival bigserial;
