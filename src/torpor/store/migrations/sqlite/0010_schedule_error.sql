-- torpor schema v10: why a schedule could not fire, and when it is tried again. `last_error`:
-- the last error a worker met firing it (a time zone unknown on that host, a stored cron that
-- does not parse, a damaged row), or NULL; `retry_at_ms`: not fired again before this (UTC
-- epoch ms; `SCHEDULE_RETRY_S` after the failure, torpor.schedules), its `next_fire_ms` kept,
-- so the slots missed meanwhile are caught up by its policy once it can fire. Shown by
-- `torpor schedule ls` and `torpor doctor`; cleared by the next fire, an edit or a resume.
ALTER TABLE schedules ADD COLUMN last_error TEXT;
ALTER TABLE schedules ADD COLUMN retry_at_ms INTEGER;
