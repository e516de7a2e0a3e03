-- Per user, how many of their rows hold each lexeme: the full-text side's term
-- weights and its stop words (shared/db/search.py). A user's own counts, so that
-- no other tenant's rows and no table statistics (ANALYZE) move a ranking; kept
-- here, so that a search reads a few index entries instead of counting each of
-- its words over every tenant's posting list.
--
-- Statement triggers keep the counts with every write, in the writer's
-- transaction: a memory counts while it is live (valid_to IS NULL), an episode
-- always. A statement adds its changes as one upsert per user and lexeme, in a
-- fixed order (a user's writes are serialised by the user's lock as well).
CREATE TABLE lexeme_counts (
    app     text NOT NULL,
    user_id text NOT NULL,
    tbl     text NOT NULL,   -- 'memories' or 'episodes'
    lexeme  text NOT NULL,
    rows    integer NOT NULL,
    PRIMARY KEY (app, user_id, tbl, lexeme)
);

CREATE FUNCTION count_lexemes() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    live text := CASE TG_TABLE_NAME WHEN 'memories' THEN 'r.valid_to IS NULL' ELSE 'true' END;
    parts text[] := '{}';
    gone_apps text[];
    gone_users text[];
    gone_lexemes text[];
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        parts := parts || format(
            'SELECT r.app, r.user_id, l.lexeme, 1 AS delta FROM new_rows r, '
            'unnest(tsvector_to_array(r.tsv)) AS l(lexeme) WHERE %s', live);
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        parts := parts || format(
            'SELECT r.app, r.user_id, l.lexeme, -1 AS delta FROM old_rows r, '
            'unnest(tsvector_to_array(r.tsv)) AS l(lexeme) WHERE %s', live);
    END IF;
    EXECUTE format(
        'WITH up AS ('
        '  INSERT INTO lexeme_counts AS c (app, user_id, tbl, lexeme, rows) '
        '  SELECT d.app, d.user_id, %L, d.lexeme, sum(d.delta)::integer FROM (%s) d '
        '  GROUP BY d.app, d.user_id, d.lexeme HAVING sum(d.delta) <> 0 '
        '  ORDER BY d.app, d.user_id, d.lexeme '
        '  ON CONFLICT (app, user_id, tbl, lexeme) DO UPDATE SET rows = c.rows + excluded.rows '
        '  RETURNING c.app, c.user_id, c.lexeme, c.rows'
        ') SELECT array_agg(app), array_agg(user_id), array_agg(lexeme) FROM up WHERE rows <= 0',
        TG_TABLE_NAME, array_to_string(parts, ' UNION ALL '))
        INTO gone_apps, gone_users, gone_lexemes;
    -- A word no row of the user holds any more is forgotten with its rows.
    IF gone_lexemes IS NOT NULL THEN
        DELETE FROM lexeme_counts c
        USING unnest(gone_apps, gone_users, gone_lexemes) AS g(app, user_id, lexeme)
        WHERE c.app = g.app AND c.user_id = g.user_id AND c.tbl = TG_TABLE_NAME
          AND c.lexeme = g.lexeme AND c.rows <= 0;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER memories_count_inserted AFTER INSERT ON memories
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION count_lexemes();
CREATE TRIGGER memories_count_updated AFTER UPDATE ON memories
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_lexemes();
CREATE TRIGGER memories_count_deleted AFTER DELETE ON memories
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION count_lexemes();
CREATE TRIGGER episodes_count_inserted AFTER INSERT ON episodes
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION count_lexemes();
CREATE TRIGGER episodes_count_updated AFTER UPDATE ON episodes
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_lexemes();
CREATE TRIGGER episodes_count_deleted AFTER DELETE ON episodes
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION count_lexemes();

-- The rows already there.
INSERT INTO lexeme_counts (app, user_id, tbl, lexeme, rows)
SELECT m.app, m.user_id, 'memories', l.lexeme, count(*)
FROM memories m, unnest(tsvector_to_array(m.tsv)) AS l(lexeme)
WHERE m.valid_to IS NULL
GROUP BY m.app, m.user_id, l.lexeme;
INSERT INTO lexeme_counts (app, user_id, tbl, lexeme, rows)
SELECT e.app, e.user_id, 'episodes', l.lexeme, count(*)
FROM episodes e, unnest(tsvector_to_array(e.tsv)) AS l(lexeme)
GROUP BY e.app, e.user_id, l.lexeme;
