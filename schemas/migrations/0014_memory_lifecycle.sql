-- A memory's lifecycle: when it expires, which extraction topic it belongs to, and
-- the outbox of its changes (memory.changed.v1), written in the transaction of the
-- change and published after it commits.

-- NULL: it never expires. An expired memory is out of every read at once (a
-- filter); the compaction worker's sweep retires it later, as a delete does.
ALTER TABLE memories ADD COLUMN expire_at timestamptz;
-- The extraction topic it was kept under ('' when none was named).
ALTER TABLE memories ADD COLUMN topic text NOT NULL DEFAULT '';
CREATE INDEX memories_expiring ON memories (expire_at)
    WHERE expire_at IS NOT NULL AND valid_to IS NULL;

-- A revision's own time to live (the app's revisions TTL); the sweep deletes it.
ALTER TABLE memory_revisions ADD COLUMN expire_at timestamptz;
CREATE INDEX memory_revisions_expiring ON memory_revisions (expire_at)
    WHERE expire_at IS NOT NULL;

-- One row per change, in the change's transaction (under the user's lock, so a
-- user's ids follow their changes' commit order); deleted once Pub/Sub confirmed
-- its publish. `claimed_until` is a publisher's lease on the user's rows;
-- `topic_prefix` the deployment whose topics it goes to (its processes' connections
-- set agent_memory.topic_prefix), so deployments sharing a database never publish
-- each other's changes.
CREATE TABLE memory_changes (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic_prefix  text NOT NULL DEFAULT coalesce(current_setting('agent_memory.topic_prefix', true), ''),
    event_id      uuid NOT NULL UNIQUE,
    app           text NOT NULL,
    user_id       text NOT NULL,
    memory_id     uuid NOT NULL,
    change        text NOT NULL CHECK (change IN ('CREATED', 'UPDATED', 'DELETED', 'EXPIRED', 'ROLLED_BACK')),
    body          jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    claimed_until timestamptz
);
CREATE INDEX memory_changes_user ON memory_changes (topic_prefix, app, user_id, id);

-- An app's settings that its admin key changes through the API: the TTLs, the
-- extraction topics. One JSON document per app and name.
CREATE TABLE app_settings (
    app        text NOT NULL,
    name       text NOT NULL,
    value      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app, name)
);
