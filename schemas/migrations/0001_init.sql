-- agent-memory: the memory model and the ledger of exactly-once effects.
-- `{{embedding_dim}}` is replaced by AM_EMBEDDING_DIM when the migration runs.
-- "No project" and "no session" are empty strings, so uniqueness needs no NULL rules.

CREATE EXTENSION IF NOT EXISTS vector;

-- Long-term memories: preferences, facts, rules, events. A row is live while
-- valid_to IS NULL; an update or delete closes it and writes a revision.
CREATE TABLE memories (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app             text NOT NULL,
    user_id         text NOT NULL,
    project_id      text NOT NULL DEFAULT '',
    session_id      text NOT NULL DEFAULT '',
    scope           text NOT NULL CHECK (scope IN ('global', 'project', 'session')),
    kind            text NOT NULL CHECK (kind IN ('preference', 'fact', 'rule', 'event')),
    entity_name     text NOT NULL DEFAULT '',
    text            text NOT NULL,
    embedding       vector({{embedding_dim}}),
    tsv             tsvector GENERATED ALWAYS AS (
                        to_tsvector('english', coalesce(entity_name, '') || ' ' || text)
                    ) STORED,
    observed_at     timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    valid_from      timestamptz NOT NULL DEFAULT now(),
    valid_to        timestamptz,
    source_event_id uuid,
    -- scope and project agree: a project memory names its project, a global one none
    CHECK ((scope = 'project') = (project_id <> '')),
    CHECK ((scope = 'session') = (session_id <> ''))
);

-- One live memory per entity *within its app, user, scope and project*,
-- so a fact of project A never overwrites one of project B.
CREATE UNIQUE INDEX memories_live_entity
    ON memories (app, user_id, scope, project_id, session_id, lower(entity_name))
    WHERE valid_to IS NULL AND entity_name <> '';
CREATE INDEX memories_scope ON memories (app, user_id, scope, project_id) WHERE valid_to IS NULL;
CREATE INDEX memories_embedding ON memories USING hnsw (embedding vector_cosine_ops);
CREATE INDEX memories_tsv ON memories USING gin (tsv);

-- Every change of a memory, with the event that caused it (Memory Bank's actions).
CREATE TABLE memory_revisions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    memory_id   uuid NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
    app         text NOT NULL,
    user_id     text NOT NULL,
    action      text NOT NULL CHECK (action IN ('CREATED', 'UPDATED', 'DELETED')),
    old_text    text,
    new_text    text,
    event_id    uuid,
    observed_at timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX memory_revisions_memory ON memory_revisions (memory_id, id);
CREATE INDEX memory_revisions_user ON memory_revisions (app, user_id);

-- The episodic archive: every turn, embedded, until compaction folds it.
CREATE TABLE episodes (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app         text NOT NULL,
    user_id     text NOT NULL,
    project_id  text NOT NULL DEFAULT '',
    session_id  text NOT NULL,
    turn_id     text NOT NULL,
    event_id    uuid NOT NULL,
    user_text   text NOT NULL,
    assistant_text text NOT NULL,
    tool_events jsonb NOT NULL DEFAULT '[]'::jsonb,
    text        text NOT NULL,
    embedding   vector({{embedding_dim}}),
    tsv         tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
    created_at  timestamptz NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (app, user_id, session_id, turn_id)
);
CREATE INDEX episodes_user_time ON episodes (app, user_id, project_id, created_at);
CREATE INDEX episodes_embedding ON episodes USING hnsw (embedding vector_cosine_ops);
CREATE INDEX episodes_tsv ON episodes USING gin (tsv);

-- Tool-permission rules; allow-once grants live in Valkey (consumed atomically there).
CREATE TABLE permission_rules (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app         text NOT NULL,
    user_id     text NOT NULL,
    project_id  text NOT NULL DEFAULT '',  -- '' is the global tier
    tool_name   text NOT NULL,
    pattern     text NOT NULL,
    action      text NOT NULL CHECK (action IN ('ALLOW', 'BLOCK')),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX permission_rules_lookup ON permission_rules (app, user_id, project_id, tool_name);

-- The ledger that makes each consumer's Postgres effects exactly-once: a handler
-- inserts (consumer, event_id) in the same transaction as its effects.
CREATE TABLE processed_events (
    consumer     text NOT NULL,
    event_id     uuid NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- Long-running operations (memories:generate), polled by clients.
CREATE TABLE operations (
    name        text PRIMARY KEY,
    app         text NOT NULL,
    user_id     text NOT NULL,
    kind        text NOT NULL,
    done        boolean NOT NULL DEFAULT false,
    result      jsonb,
    error       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX operations_user ON operations (app, user_id);

-- GDPR deletions: events of a deleted user created before `deleted_at` are dropped.
CREATE TABLE deleted_users (
    app        text NOT NULL,
    user_id    text NOT NULL,
    deleted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app, user_id)
);
