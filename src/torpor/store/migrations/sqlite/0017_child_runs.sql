-- torpor schema v17: child runs (issue 37). `parent_run_id`: the run whose step started this one
-- (NULL for a run started from outside). When a child's outcome is recorded, the store posts a
-- `child` message to its parent's inbox and wakes it, in the same transaction.
ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
