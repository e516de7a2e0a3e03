-- Agents: the agent a memory, a turn or an API key belongs to. '' is none: a
-- memory of no agent is the user's, which every agent of the user reads; one of
-- an agent only that agent reads (shared/memory/agents.py).

ALTER TABLE memories ADD COLUMN agent_id text NOT NULL DEFAULT '';
ALTER TABLE episodes ADD COLUMN agent_id text NOT NULL DEFAULT '';
ALTER TABLE extraction_pending ADD COLUMN agent_id text NOT NULL DEFAULT '';
-- A key limited to one agent acts as that agent and names no other ('' any).
ALTER TABLE api_keys ADD COLUMN agent_id text NOT NULL DEFAULT '';

-- One live memory per entity within its app, user, scope, project *and agent*:
-- two agents of a user each keep their own "ui theme".
DROP INDEX memories_live_entity;
CREATE UNIQUE INDEX memories_live_entity
    ON memories (app, user_id, scope, project_id, session_id, agent_id, lower(entity_name))
    WHERE valid_to IS NULL AND entity_name <> '';
