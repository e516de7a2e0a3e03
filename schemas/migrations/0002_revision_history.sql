-- Late or replayed observations go to history only: a revision with
-- applied = false records what was observed without changing the live memory.
-- An update changes a memory in place (its id stays); a delete closes it.
ALTER TABLE memory_revisions ADD COLUMN applied boolean NOT NULL DEFAULT true;
CREATE INDEX memories_user_entity
    ON memories (app, user_id, scope, project_id, session_id, lower(entity_name), observed_at);
CREATE INDEX memories_live_user ON memories (app, user_id, created_at, id) WHERE valid_to IS NULL;
-- Pinned rules: every live rule of a scope, read with each context.
CREATE INDEX memories_live_rules ON memories (app, user_id, scope, project_id, observed_at)
    WHERE valid_to IS NULL AND kind = 'rule';
