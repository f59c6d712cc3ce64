-- torpor schema v8 (SQLite): episodic memory (torpor.episodes).
-- `runs.scope`: the string a run was started under (a user, a tenant, a team); episodes are
-- only ever retrieved within it. `runs.task_type`: the task type of an agent's run (its name by
-- default); a run with a task type gets episodes. `runs.episodes_seq`: the history seq up to
-- which the run's boundaries have been turned into episodes (a catch-up reads from there).
ALTER TABLE runs ADD COLUMN scope TEXT;
ALTER TABLE runs ADD COLUMN task_type TEXT;
ALTER TABLE runs ADD COLUMN episodes_seq INTEGER NOT NULL DEFAULT 0;
-- One row per (run, boundary): `boundary` is `ended@SEQ`, `slept@SEQ` or `milestone@SEQ`, the
-- seq of the event it was written at, so writing it again after a crash changes nothing.
-- Episodes outlive the runs they came from (no foreign key); `superseded_by` names the episode
-- whose lesson contradicted this one (it is kept, readable, and no longer retrieved by default).
-- `tags` holds one token per filter (scope, agent, task type, outcome), so those filters are
-- answered by the full-text index itself; the exact columns are compared as well.
CREATE TABLE episodes (
    id            INTEGER PRIMARY KEY,
    episode_id    TEXT NOT NULL UNIQUE,
    run_id        TEXT NOT NULL,
    boundary      TEXT NOT NULL,
    scope         TEXT NOT NULL,
    agent         TEXT NOT NULL,
    task_type     TEXT NOT NULL,
    kind          TEXT NOT NULL,
    outcome       TEXT NOT NULL,
    summary       TEXT NOT NULL,
    lesson        TEXT NOT NULL,
    conditions    TEXT NOT NULL,
    refs          TEXT NOT NULL,
    claims        TEXT NOT NULL,
    tags          TEXT NOT NULL,
    at_seq        INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    superseded_by TEXT,
    UNIQUE (run_id, boundary)
);
CREATE INDEX episodes_recent ON episodes (scope, task_type, created_at_ms);
CREATE INDEX episodes_scope_recent ON episodes (scope, created_at_ms);
CREATE INDEX episodes_age ON episodes (created_at_ms);
-- The full-text index over the episodes table (external content: the text is stored once).
-- Ranked by BM25 over summary and lesson; the tags column weighs nothing.
CREATE VIRTUAL TABLE episodes_fts USING fts5(
    summary, lesson, tags, content='episodes', content_rowid='id', tokenize='porter unicode61'
);
INSERT INTO episodes_fts (episodes_fts, rank) VALUES ('rank', 'bm25(1.0, 1.5, 0.0)');
