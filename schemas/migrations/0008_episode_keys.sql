-- Episodes are searched by a key: their own text, the neighbouring turns of the
-- session and when they were said (shared/memory/episode_keys.py). `context` holds
-- what the key adds to the text; NULL until it is computed, by the extraction
-- worker for new turns and by `agent-memory archive backfill-keys` for the rows
-- archived before this migration.
--
-- `tsv` stops being generated from `text` alone: it is written with the row, the
-- own text weighted A and the context B. DROP EXPRESSION keeps each row's value
-- and does not rewrite the table, so the migration is quick on a large archive.
ALTER TABLE episodes ALTER COLUMN tsv DROP EXPRESSION;
ALTER TABLE episodes ADD COLUMN context text;
ALTER TABLE episodes ALTER COLUMN context SET STORAGE MAIN;
-- A session's turns in order: the neighbours of a new turn, a session's backfill.
CREATE INDEX episodes_session_order ON episodes (app, user_id, session_id, created_at, turn_id);
-- The backfill's work list, small once it is done.
CREATE INDEX episodes_without_context ON episodes (app, user_id, session_id)
    WHERE context IS NULL;
