-- Connected memory: the entities a user's memories and archived turns mention,
-- their aliases, the facts between them over valid time, and the merges of two
-- entities into one (kept, so that a merge can be undone).
--
-- An entity belongs to one app, user and project ('' : the user's global
-- entities); resolution never looks across those, so two projects' "Dana" stay two.

CREATE TABLE entities (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app         text NOT NULL,
    user_id     text NOT NULL,
    project_id  text NOT NULL DEFAULT '',
    name        text NOT NULL,
    kind        text NOT NULL CHECK (kind IN (
                    'person', 'organisation', 'project', 'place', 'tool', 'pet', 'event',
                    'other')),
    -- Set while it is merged into another entity (its aliases and mentions moved there).
    merged_into uuid REFERENCES entities (id) ON DELETE SET NULL,
    first_seen  timestamptz NOT NULL,
    last_seen   timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX entities_user ON entities (app, user_id, project_id);

-- Every name an entity goes by, normalised (lowercase, no accents or punctuation);
-- `how` says why it was taken for this entity.
CREATE TABLE entity_aliases (
    entity_id   uuid NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    app         text NOT NULL,
    user_id     text NOT NULL,
    alias       text NOT NULL,
    normalised  text NOT NULL,
    how         text NOT NULL CHECK (how IN (
                    'name', 'nickname', 'first name', 'full name', 'similar', 'merge')),
    PRIMARY KEY (entity_id, normalised)
);
CREATE INDEX entity_aliases_user ON entity_aliases (app, user_id, normalised);

-- An entity named by a memory or by an archived turn (exactly one of the two).
CREATE TABLE entity_mentions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    entity_id   uuid NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    app         text NOT NULL,
    user_id     text NOT NULL,
    -- ON UPDATE: a row keeps its mentions if its id is rewritten (the benchmarks
    -- give their rows ids made from their names).
    memory_id   uuid REFERENCES memories (id) ON DELETE CASCADE ON UPDATE CASCADE,
    episode_id  uuid REFERENCES episodes (id) ON DELETE CASCADE ON UPDATE CASCADE,
    surface     text NOT NULL,
    observed_at timestamptz NOT NULL,
    CHECK ((memory_id IS NULL) <> (episode_id IS NULL))
);
CREATE UNIQUE INDEX entity_mentions_memory ON entity_mentions (memory_id, entity_id)
    WHERE memory_id IS NOT NULL;
CREATE UNIQUE INDEX entity_mentions_episode ON entity_mentions (episode_id, entity_id)
    WHERE episode_id IS NOT NULL;
CREATE INDEX entity_mentions_entity ON entity_mentions (entity_id, observed_at);
CREATE INDEX entity_mentions_user ON entity_mentions (app, user_id);

-- A fact: subject, predicate, and an object entity or a value, true in event time
-- from `valid_from` until `valid_to` (NULL: still true). A changed fact closes the
-- one it replaces at its own `valid_from`; nothing is overwritten.
CREATE TABLE entity_facts (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app         text NOT NULL,
    user_id     text NOT NULL,
    subject_id  uuid NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    predicate   text NOT NULL,
    object_id   uuid REFERENCES entities (id) ON DELETE CASCADE,
    value       text NOT NULL,
    -- The subject has one value of this predicate at a time.
    single      boolean NOT NULL,
    valid_from  timestamptz NOT NULL,
    valid_to    timestamptz,
    memory_id   uuid REFERENCES memories (id) ON DELETE CASCADE,
    event_id    uuid,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    CHECK (valid_to IS NULL OR valid_to >= valid_from)
);
CREATE INDEX entity_facts_subject ON entity_facts (subject_id, predicate, valid_from);
CREATE INDEX entity_facts_object ON entity_facts (object_id) WHERE object_id IS NOT NULL;
CREATE INDEX entity_facts_memory ON entity_facts (memory_id);
CREATE INDEX entity_facts_user ON entity_facts (app, user_id);

-- One entity merged into another: what moved (mention and alias ids, facts), so
-- that undoing it puts each back.
CREATE TABLE entity_merges (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app         text NOT NULL,
    user_id     text NOT NULL,
    merged_id   uuid NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    into_id     uuid NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    moved       jsonb NOT NULL,
    merged_at   timestamptz NOT NULL DEFAULT now(),
    undone_at   timestamptz
);
CREATE INDEX entity_merges_user ON entity_merges (app, user_id);
