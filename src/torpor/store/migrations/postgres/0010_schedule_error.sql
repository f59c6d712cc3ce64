-- torpor schema v10: why a schedule could not fire. `last_error`: the last error a worker met
-- firing it (a time zone unknown on that host, a stored cron that does not parse, a damaged
-- row), or NULL; set with the retry moved `SCHEDULE_RETRY_S` later (torpor.schedules), shown by
-- `torpor schedule ls`, and cleared by the next fire, an edit or a resume.
ALTER TABLE schedules ADD COLUMN last_error TEXT;
