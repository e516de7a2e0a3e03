-- The agent a long-running request acted as (services/api/routers/operations.py):
-- its result names that agent's memories, so a read of the operation sees it as a
-- read of them would ('' a request of no agent's, seen by every read of its user).
ALTER TABLE operations ADD COLUMN agent_id text NOT NULL DEFAULT '';
