-- torpor schema v19 (issue 48): indexes the scale bench (bench/scale.py) found missing.
-- `runs_newest`: `torpor ls` and the console read the newest page (ORDER BY created_at_ms
-- DESC, run_id) by walking this index and stopping at the page, not by sorting every run.
-- `runs_held`: the claim's candidates among waiting runs are those due (runs_dispatch) or
-- still leased by an executor that died mid-execution; this partial index holds only leased
-- runs, so the claim does not visit every waiting run to find the second kind.
CREATE INDEX runs_newest ON runs (created_at_ms DESC, run_id);
CREATE INDEX runs_held ON runs (status) WHERE lease_owner IS NOT NULL;
