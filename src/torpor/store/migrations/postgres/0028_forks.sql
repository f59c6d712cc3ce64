-- torpor schema v28: forks (issue 45). `fork_of`: the run this one is a fork of (NULL for a run
-- that is not a fork); `fork_seq`: the seq of the origin's history it was copied up to (its
-- own `run_forked` event follows at fork_seq + 1). The index lists an origin's forks.
ALTER TABLE runs ADD COLUMN fork_of text;
ALTER TABLE runs ADD COLUMN fork_seq bigint;
CREATE INDEX runs_fork_of ON runs (fork_of) WHERE fork_of IS NOT NULL;
