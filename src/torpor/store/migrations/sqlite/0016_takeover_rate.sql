-- torpor schema v16 (issue 36): a rate limit holds across a takeover. Nothing to change in
-- SQLite's schema: its claim is one statement (`claim_next` in store/sql/sqlite.sql) that now
-- makes a takeover wait for room in its queue's rate windows among the other runs' starts and
-- restamps started_at_ms. PostgreSQL's checked claim function changes in its 0016.
SELECT 1;
