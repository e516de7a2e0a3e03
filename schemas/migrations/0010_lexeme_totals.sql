-- With each user's lexeme counts, how many rows the user has (counted under the
-- empty lexeme, which no tsvector holds): the full-text side's stop words are the
-- words in more than a share of the user's own rows, and its term weights are
-- BM25's, both from the searching user's rows only (shared/db/search.py).
CREATE OR REPLACE FUNCTION count_lexemes() RETURNS trigger LANGUAGE plpgsql AS $$
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
            'unnest(tsvector_to_array(r.tsv) || ''{""}''::text[]) AS l(lexeme) WHERE %s', live);
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        parts := parts || format(
            'SELECT r.app, r.user_id, l.lexeme, -1 AS delta FROM old_rows r, '
            'unnest(tsvector_to_array(r.tsv) || ''{""}''::text[]) AS l(lexeme) WHERE %s', live);
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

-- The rows already there.
INSERT INTO lexeme_counts (app, user_id, tbl, lexeme, rows)
SELECT app, user_id, 'memories', '', count(*) FROM memories WHERE valid_to IS NULL
GROUP BY app, user_id;
INSERT INTO lexeme_counts (app, user_id, tbl, lexeme, rows)
SELECT app, user_id, 'episodes', '', count(*) FROM episodes GROUP BY app, user_id;
