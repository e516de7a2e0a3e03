-- With each user's lexeme counts, how many rows the user has (counted under the
-- empty lexeme, which no tsvector holds): the full-text side's stop words are the
-- words in more than a share of the user's own rows, and its term weights are
-- BM25's, both from the searching user's rows only (shared/db/search.py).
--
-- The counting is static SQL, one trigger function per table, so that PL/pgSQL
-- keeps each statement's plan (per trigger) instead of planning a dynamic
-- statement at every write: an archived turn writes three episode rows (itself
-- and the keys of the two turns before it).
CREATE FUNCTION apply_lexeme_deltas(of_table text, apps text[], users text[], lexemes text[],
                                    deltas integer[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    gone_apps text[];
    gone_users text[];
    gone_lexemes text[];
BEGIN
    WITH up AS (
        INSERT INTO lexeme_counts AS c (app, user_id, tbl, lexeme, rows)
        SELECT d.app, d.user_id, of_table, d.lexeme, sum(d.delta)::integer
        FROM unnest(apps, users, lexemes, deltas) AS d(app, user_id, lexeme, delta)
        GROUP BY d.app, d.user_id, d.lexeme HAVING sum(d.delta) <> 0
        ORDER BY d.app, d.user_id, d.lexeme
        ON CONFLICT (app, user_id, tbl, lexeme) DO UPDATE SET rows = c.rows + excluded.rows
        RETURNING c.app, c.user_id, c.lexeme, c.rows
    )
    SELECT array_agg(up.app), array_agg(up.user_id), array_agg(up.lexeme)
    INTO gone_apps, gone_users, gone_lexemes FROM up WHERE up.rows <= 0;
    -- A word no row of the user holds any more is forgotten with its rows.
    IF gone_lexemes IS NOT NULL THEN
        DELETE FROM lexeme_counts c
        USING unnest(gone_apps, gone_users, gone_lexemes) AS g(app, user_id, lexeme)
        WHERE c.app = g.app AND c.user_id = g.user_id AND c.tbl = of_table
          AND c.lexeme = g.lexeme AND c.rows <= 0;
    END IF;
END $$;

-- A row's lexemes and the empty one, +1 for a new row and -1 for an old one; a
-- memory counts while it is live.
CREATE FUNCTION count_memory_lexemes() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    apps text[]; users text[]; lexemes text[]; deltas integer[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(r.app), array_agg(r.user_id), array_agg(l.lexeme), array_agg(1)
        INTO apps, users, lexemes, deltas
        FROM new_rows r, unnest(tsvector_to_array(r.tsv) || '{""}'::text[]) AS l(lexeme)
        WHERE r.valid_to IS NULL;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(r.app), array_agg(r.user_id), array_agg(l.lexeme), array_agg(-1)
        INTO apps, users, lexemes, deltas
        FROM old_rows r, unnest(tsvector_to_array(r.tsv) || '{""}'::text[]) AS l(lexeme)
        WHERE r.valid_to IS NULL;
    ELSE
        SELECT array_agg(x.app), array_agg(x.user_id), array_agg(x.lexeme), array_agg(x.delta)
        INTO apps, users, lexemes, deltas FROM (
            SELECT r.app, r.user_id, l.lexeme, 1 AS delta
            FROM new_rows r, unnest(tsvector_to_array(r.tsv) || '{""}'::text[]) AS l(lexeme)
            WHERE r.valid_to IS NULL
            UNION ALL
            SELECT r.app, r.user_id, l.lexeme, -1
            FROM old_rows r, unnest(tsvector_to_array(r.tsv) || '{""}'::text[]) AS l(lexeme)
            WHERE r.valid_to IS NULL
        ) x;
    END IF;
    IF lexemes IS NOT NULL THEN
        PERFORM apply_lexeme_deltas('memories', apps, users, lexemes, deltas);
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION count_episode_lexemes() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    apps text[]; users text[]; lexemes text[]; deltas integer[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(r.app), array_agg(r.user_id), array_agg(l.lexeme), array_agg(1)
        INTO apps, users, lexemes, deltas
        FROM new_rows r, unnest(tsvector_to_array(r.tsv) || '{""}'::text[]) AS l(lexeme);
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(r.app), array_agg(r.user_id), array_agg(l.lexeme), array_agg(-1)
        INTO apps, users, lexemes, deltas
        FROM old_rows r, unnest(tsvector_to_array(r.tsv) || '{""}'::text[]) AS l(lexeme);
    ELSE
        SELECT array_agg(x.app), array_agg(x.user_id), array_agg(x.lexeme), array_agg(x.delta)
        INTO apps, users, lexemes, deltas FROM (
            SELECT r.app, r.user_id, l.lexeme, 1 AS delta
            FROM new_rows r, unnest(tsvector_to_array(r.tsv) || '{""}'::text[]) AS l(lexeme)
            UNION ALL
            SELECT r.app, r.user_id, l.lexeme, -1
            FROM old_rows r, unnest(tsvector_to_array(r.tsv) || '{""}'::text[]) AS l(lexeme)
        ) x;
    END IF;
    IF lexemes IS NOT NULL THEN
        PERFORM apply_lexeme_deltas('episodes', apps, users, lexemes, deltas);
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER memories_count_inserted ON memories;
DROP TRIGGER memories_count_updated ON memories;
DROP TRIGGER memories_count_deleted ON memories;
DROP TRIGGER episodes_count_inserted ON episodes;
DROP TRIGGER episodes_count_updated ON episodes;
DROP TRIGGER episodes_count_deleted ON episodes;
DROP FUNCTION count_lexemes();
CREATE TRIGGER memories_count_inserted AFTER INSERT ON memories
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION count_memory_lexemes();
CREATE TRIGGER memories_count_updated AFTER UPDATE ON memories
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_memory_lexemes();
CREATE TRIGGER memories_count_deleted AFTER DELETE ON memories
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION count_memory_lexemes();
CREATE TRIGGER episodes_count_inserted AFTER INSERT ON episodes
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION count_episode_lexemes();
CREATE TRIGGER episodes_count_updated AFTER UPDATE ON episodes
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_episode_lexemes();
CREATE TRIGGER episodes_count_deleted AFTER DELETE ON episodes
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION count_episode_lexemes();

-- The rows already there.
INSERT INTO lexeme_counts (app, user_id, tbl, lexeme, rows)
SELECT app, user_id, 'memories', '', count(*) FROM memories WHERE valid_to IS NULL
GROUP BY app, user_id;
INSERT INTO lexeme_counts (app, user_id, tbl, lexeme, rows)
SELECT app, user_id, 'episodes', '', count(*) FROM episodes GROUP BY app, user_id;
