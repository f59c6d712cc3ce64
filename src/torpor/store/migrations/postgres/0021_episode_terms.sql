-- torpor schema v21 (PostgreSQL, issue 31): per-scope document frequencies of episode words.
-- `episode_terms` holds, for each scope, how many of its episodes contain each lexeme of their
-- text (`tsv` without the filter tokens), and under lexeme '' how many episodes the scope
-- holds. A search weighs its words within the caller's scope from here — one primary-key
-- probe per word — where counting them in the GIN index costs a bitmap of the whole scope
-- intersected with the word's posting list (the store-wide list: it grows with the store).
-- Kept exact by statement-level triggers (transition tables: one aggregated upsert per
-- INSERT or DELETE statement, whoever runs it), keys taken in (scope, lexeme) order so that
-- two writers of one scope never deadlock; writers in different scopes share no row.
-- An episode's scope and text are never updated (supersession sets other columns only).
CREATE TABLE episode_terms (
    scope  text NOT NULL,
    lexeme text NOT NULL,
    docs   bigint NOT NULL,
    PRIMARY KEY (scope, lexeme)
);

CREATE FUNCTION episode_terms_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO episode_terms (scope, lexeme, docs)
    SELECT scope, lexeme, count(*) FROM (
        SELECT n.scope, '' AS lexeme FROM episode_rows_new n
        UNION ALL
        SELECT n.scope, l FROM episode_rows_new n, unnest(tsvector_to_array(n.tsv)) AS l
        WHERE l <> ALL (string_to_array(n.tags, ' '))
    ) x
    GROUP BY scope, lexeme ORDER BY scope, lexeme
    ON CONFLICT (scope, lexeme) DO UPDATE SET docs = episode_terms.docs + excluded.docs;
    RETURN NULL;
END $$;

CREATE FUNCTION episode_terms_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The same upsert as on insert (ordered, so no deadlock with a writer), counting down;
    -- then the counters that reached zero go (a forgotten scope leaves none).
    INSERT INTO episode_terms (scope, lexeme, docs)
    SELECT scope, lexeme, -count(*) FROM (
        SELECT o.scope, '' AS lexeme FROM episode_rows_old o
        UNION ALL
        SELECT o.scope, l FROM episode_rows_old o, unnest(tsvector_to_array(o.tsv)) AS l
        WHERE l <> ALL (string_to_array(o.tags, ' '))
    ) x
    GROUP BY scope, lexeme ORDER BY scope, lexeme
    ON CONFLICT (scope, lexeme) DO UPDATE SET docs = episode_terms.docs + excluded.docs;
    DELETE FROM episode_terms t USING (
        SELECT o.scope, '' AS lexeme FROM episode_rows_old o
        UNION
        SELECT o.scope, l FROM episode_rows_old o, unnest(tsvector_to_array(o.tsv)) AS l
    ) g
    WHERE t.scope = g.scope AND t.lexeme = g.lexeme AND t.docs <= 0;
    RETURN NULL;
END $$;

CREATE TRIGGER episodes_terms_added AFTER INSERT ON episodes
    REFERENCING NEW TABLE AS episode_rows_new
    FOR EACH STATEMENT EXECUTE FUNCTION episode_terms_add();
CREATE TRIGGER episodes_terms_removed AFTER DELETE ON episodes
    REFERENCING OLD TABLE AS episode_rows_old
    FOR EACH STATEMENT EXECUTE FUNCTION episode_terms_remove();

-- The episodes written before this migration.
INSERT INTO episode_terms (scope, lexeme, docs)
SELECT scope, lexeme, count(*) FROM (
    SELECT scope, '' AS lexeme FROM episodes
    UNION ALL
    SELECT e.scope, l FROM episodes e, unnest(tsvector_to_array(e.tsv)) AS l
    WHERE l <> ALL (string_to_array(e.tags, ' '))
) x
GROUP BY scope, lexeme;
