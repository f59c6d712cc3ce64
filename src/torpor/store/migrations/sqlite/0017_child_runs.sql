-- torpor schema v17: child runs (issue 37). `parent_run_id`: the run whose step started this one
-- (NULL for a run started from outside). When a child's outcome is recorded, the store posts a
-- `child` message to its parent's inbox in the same transaction, and wakes the parent when its
-- wait may be over: `child_need` (on the parent's row) counts the final outcomes its open wait on
-- children still needs (NULL: wake on every one).
ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
ALTER TABLE runs ADD COLUMN child_need INTEGER;
CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
