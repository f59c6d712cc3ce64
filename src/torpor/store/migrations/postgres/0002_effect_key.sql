-- torpor schema v2 (PostgreSQL): performed effects are indexed by their idempotency key.
-- `effect_key` is set on the events that record an effect as performed (effect_observed, and
-- effect_reconciled with verdict applied); a key found there is never intended again (G2), so
-- a performed effect can leave the run state (and the checkpoint) like a completed step.
-- The unique index makes "performed at most once per key" a property of the table too.
ALTER TABLE events ADD COLUMN effect_key text;
UPDATE events SET effect_key = CAST(payload AS jsonb) ->> 'key'
WHERE type = 'effect_observed'
   OR (type = 'effect_reconciled' AND CAST(payload AS jsonb) ->> 'verdict' = 'applied');
CREATE UNIQUE INDEX events_effect_key ON events (run_id, effect_key) WHERE effect_key IS NOT NULL;
