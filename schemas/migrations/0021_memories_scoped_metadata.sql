-- A filter's metadata equalities read in one index entry per value of a user's
-- scope (shared/db/scoped_metadata.py): each live memory's metadata under a key
-- naming its app, user and row group (the global rows, a project's, a session's).
-- The key puts each id's length before it, so no two groups share a key.
CREATE INDEX memories_scoped_metadata ON memories USING gin ((jsonb_set('{}'::jsonb,
    ARRAY[length(app)::text || ':' || app || length(user_id)::text || ':' || user_id
          || scope || ':' || CASE scope WHEN 'project' THEN project_id
                                        WHEN 'session' THEN session_id ELSE '' END],
    metadata)) jsonb_path_ops)
    WHERE valid_to IS NULL;
