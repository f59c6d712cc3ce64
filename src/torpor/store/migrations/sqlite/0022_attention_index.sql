-- torpor schema v22 (issue 48): `torpor ls --attention` (and the console's needs-attention
-- list) reads the newest runs that need attention. Through runs_newest that walk went on until
-- 50 of them were found: every run of a store where few need attention (317-366 ms on a
-- 1.1M-run PostgreSQL store, bench/pg_plans.py). This partial index holds only those runs, in
-- the page's order, so the page is a walk of it that stops at the page (the query
-- `list_runs_attention` names its condition, so the planner can match it).
CREATE INDEX runs_attention ON runs (created_at_ms DESC, run_id) WHERE attention IS NOT NULL;
