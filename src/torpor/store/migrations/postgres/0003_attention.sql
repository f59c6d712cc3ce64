-- torpor schema v3 (PostgreSQL): what the run row says about a run that cannot proceed, and whom a
-- lease was taken from.
-- `attention`: the needs-attention detail of a run that is not finished but cannot proceed on
-- the code or workers running (a version no worker has, a replay that diverged, a step that
-- crashes its process), as its history's latest `attention_needed` says; cleared when it
-- proceeds. `lease_taken_from`: the owner whose unreleased lease the current one took over
-- (NULL when the previous holder released it): a new owner that took over knows the run's
-- last execution died. `infra_retries`: appends of the run that the store retried or read back
-- after losing its connection around a commit (the run's trace of infrastructure trouble).
ALTER TABLE runs ADD COLUMN attention text;
ALTER TABLE runs ADD COLUMN lease_taken_from text;
ALTER TABLE runs ADD COLUMN infra_retries integer NOT NULL DEFAULT 0;
